"""`ExportOutput`: the exported ONNX model with its adapters, diagnostics and savers."""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import onnx
import onnx_ir as ir

from exporter.capture.adapters import InputAdapter, OutputAdapter
from exporter.constants import TWO_GIB
from exporter.diagnostics import DiagnosticContext
from exporter.output.external_data import save_with_state_dict
from exporter.output.files import atomic_path

if TYPE_CHECKING:
    import torch

    from exporter.capture.fake import ONNXFakeContext
    from exporter.verify.accuracy import Verification, Verifier


@runtime_checkable
class ExportOutputSerializer(Protocol):
    """Writes an `ExportOutput` to a binary stream."""

    def serialize(self, export_output: ExportOutput, destination: io.BufferedIOBase) -> None: ...


class ProtobufExportOutputSerializer:
    """The default serializer: the ONNX protobuf."""

    def serialize(self, export_output: ExportOutput, destination: io.BufferedIOBase) -> None:
        destination.write(export_output.model_proto.SerializeToString())


class ExportOutput:
    """An exported ONNX model, how to feed it, and what happened during export."""

    def __init__(
        self,
        model: ir.Model | None,
        input_adapter: InputAdapter,
        output_adapter: OutputAdapter,
        diagnostic_context: DiagnosticContext,
        *,
        fake_context: ONNXFakeContext | None = None,
        export_exception: BaseException | None = None,
        verifier: Verifier | None = None,
    ) -> None:
        self.model = model
        self._input_adapter = input_adapter
        self._output_adapter = output_adapter
        self._diagnostic_context = diagnostic_context
        self._fake_context = fake_context
        self._export_exception = export_exception
        self._verifier = verifier

    @functools.cached_property
    def model_proto(self) -> onnx.ModelProto:
        """The exported model as an `onnx.ModelProto`."""
        if self.model is None:
            raise RuntimeError("The export failed before an ONNX model was built; see the diagnostics.")
        return ir.serde.serialize_model(self.model)

    @property
    def diagnostic_context(self) -> DiagnosticContext:
        return self._diagnostic_context

    @property
    def fake_context(self) -> ONNXFakeContext | None:
        return self._fake_context

    @property
    def export_exception(self) -> BaseException | None:
        return self._export_exception

    def adapt_torch_inputs_to_onnx(
        self, *model_args: Any, **model_kwargs: Any
    ) -> Sequence[torch.Tensor | int | float | bool]:
        """The model's inputs as the flat list the ONNX model takes (same order as its graph inputs)."""
        return self._input_adapter.apply(*model_args, **model_kwargs)

    def adapt_torch_outputs_to_onnx(self, model_outputs: Any) -> Sequence[torch.Tensor | int | float | bool]:
        """The PyTorch model's outputs as the flat list the ONNX model returns."""
        return self._output_adapter.apply(model_outputs)

    def verify(self, *model_args: Any, **model_kwargs: Any) -> Verification:
        """Run the model in onnxruntime on these inputs against eager PyTorch (FXE0021, added to the
        diagnostics): every output's errors and, when one diverges, the first diverging source line.
        `save` then also writes a reproducer of that divergence in ``<stem>_repro/``."""
        if self._verifier is None:
            raise RuntimeError("Nothing to verify: the export failed, or ran under fake mode (no weights).")
        return self._verifier.verify(model_args, model_kwargs, self._diagnostic_context)

    def save(
        self,
        destination: str | os.PathLike | io.BufferedIOBase,
        *,
        model_state_dict: dict[str, Any] | str | os.PathLike | None = None,
        serializer: ExportOutputSerializer | None = None,
        strict: bool = True,
        external_data: bool = False,
    ) -> None:
        """Write the model to a path (atomically) or a binary stream.

        With `model_state_dict` (a dict, or a ``.safetensors``/``torch.save`` checkpoint path), the
        weights are written as external data in ``<stem>_initializers/`` beside the model. Under fake
        mode, the checkpoints loaded inside `enable_fake_mode` are used when none is given. With
        `strict` (the default), the state dict must hold every weight of the model and nothing else.
        With a file path, a reproducer of a failed verification (`verify`) is written to
        ``<stem>_repro/`` beside the model. The weights of a model of 2 GiB or more (any size with
        `external_data`) go to ``<name>.data`` beside it, written tensor by tensor (no protobuf copy of them).
        """
        if self._verifier is not None and isinstance(destination, (str, os.PathLike)):
            self._verifier.write_reproducer(os.fspath(destination))
        if model_state_dict is None and self._fake_context is not None and self._fake_context.state_dict_paths:
            model_state_dict = list(self._fake_context.state_dict_paths)
        if model_state_dict is not None:
            if not isinstance(destination, (str, os.PathLike)):
                raise ValueError("model_state_dict needs a file path destination: the weights go beside the model.")
            if self.model is None:
                raise RuntimeError("The export failed; there is no model to save.")
            save_with_state_dict(self.model, self.model_proto, os.fspath(destination), model_state_dict, strict=strict)
            return
        serializer = serializer or ProtobufExportOutputSerializer()
        if not isinstance(destination, (str, os.PathLike)):
            serializer.serialize(self, destination)
            return
        path = os.fspath(destination)
        if (
            self.model is not None
            and (external_data or _weights_size(self.model) >= TWO_GIB)
            and serializer.__class__ is ProtobufExportOutputSerializer
        ):
            with atomic_path(path) as tmp:
                ir.save(self.model, tmp, external_data=os.path.basename(path) + ".data")
            return
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            serializer.serialize(self, f)

    def save_diagnostics(self, destination: str | os.PathLike, *, notebook: str | os.PathLike | None = None) -> None:
        """Write the SARIF log of this export; `destination` must end in `.sarif`. In a Jupyter kernel, frames
        of the notebook's cells point into `notebook` (default: the notebook VS Code or Jupyter runs), at the
        cell's line (`exporter.diagnostics.notebook_frames`)."""
        path = os.fspath(destination)
        if not path.endswith(".sarif"):
            raise ValueError(f"'destination' must end in '.sarif', got {path!r}")
        from exporter.diagnostics.notebook_frames import in_notebook
        from exporter.diagnostics.sarif import write_sarif  # sarif_om: ~0.2 s of import, only for SARIF

        write_sarif(in_notebook(self._diagnostic_context, notebook), path)


def count_nodes(model: ir.Model) -> int:
    """The model's ops as the editor's graph view draws them (`onnxlens_server.graph`): local functions
    expanded at each call, an If or Loop one op (the nodes of its bodies not counted)."""

    def ops(graph: ir.Graph | ir.Function) -> int:
        return sum(ops(f) if (f := model.functions.get(n.op_identifier())) is not None else 1 for n in graph)

    return ops(model.graph)


def _weights_size(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)


ONNXProgram = ExportOutput
