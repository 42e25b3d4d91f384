"""Passes on the translated ONNX model, as onnx_ir passes: inline torchlib, optimize, convert the
opset, fuse (`optimize`), modularize, fix names, set the IR version; then onnx.checker."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from exporter.constants import METADATA_STACK
from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.diagnostics.locations import Frame, parse_stack_trace
from exporter.onnx_passes.optimize import FusePass, OptimizePass
from exporter.passes.modularize import ModularizePass

_INLINE_BYTES = 1024  # initializers checked with their data (shapes, indices); larger ones by type and shape only
MIN_IR_VERSION = 10  # node and function metadata_props (the source links) and function overloads: IR 10


class PassFailed(RuntimeError):
    """An ONNX pass raised; already reported (FXE0019) under the pass's name."""


class ConvertOpsetPass(ir.passes.InPlacePass):
    """onnxscript's version converter, to the requested default-domain opset: the model's, and the nodes
    that keep an older version of their own (`FunctionOpsetPass`); ensures the model then imports it."""

    def __init__(self, opset_version: int) -> None:
        super().__init__()
        self.opset_version = opset_version

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if model.opset_imports.get("") == self.opset_version:
            older = [
                n
                for n in ir.traversal.RecursiveGraphIterator(model.graph)
                if n.domain == "" and n.version and n.version < self.opset_version
            ]
            if not older:
                return ir.passes.PassResult(model, modified=False)
            from onnxscript.version_converter import _version_converter  # the public pass skips a model at its opset

            _version_converter.convert_version(model, self.opset_version)
            return ir.passes.PassResult(model, modified=True)
        from onnxscript import version_converter

        version_converter.convert_version(model, self.opset_version, fallback=True)
        return ir.passes.PassResult(model, modified=True)

    def ensures(self, model: ir.Model) -> None:
        found = model.opset_imports.get("")
        if found != self.opset_version:
            raise ir.passes.PostconditionError(
                f"the model imports opset {found}, not the requested {self.opset_version}"
            )


class FunctionOpsetPass(ir.passes.InPlacePass):
    """Let the local functions (the user's registered ONNX functions) inline into the model: one written
    for an older default-domain opset keeps its version on each of its nodes (`ConvertOpsetPass` then
    converts them up once inlined); one written for a newer opset than the export's is an error."""

    def __init__(self, opset_version: int) -> None:
        super().__init__()
        self.opset_version = opset_version

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for key, function in list(model.functions.items()):
            written_for = function.opset_imports.get("")
            if written_for is None or written_for == self.opset_version:
                continue
            if written_for > self.opset_version:
                raise ValueError(
                    f"the ONNX function {function.domain}::{function.name} is written for opset {written_for}, but the "
                    f"export targets opset {self.opset_version}: export with ExportOptions(opset_version={written_for}) "
                    f"or write the function for opset {self.opset_version}"
                )
            # A copy: the registry's function object is shared by every export of the process.
            function = model.functions[key] = ir.serde.deserialize_function(ir.serde.serialize_function(function))
            for node in ir.traversal.RecursiveGraphIterator(function):
                if node.domain == "" and node.version is None:
                    node.version = written_for
            function.opset_imports[""] = self.opset_version
            modified = True
        return ir.passes.PassResult(model, modified=modified)


class IrVersionPass(ir.passes.InPlacePass):
    """The model's IR version: the lowest onnx's table allows for the opsets it imports
    (`onnx.helper.find_min_ir_version_for`; domains it does not know, such as ``com.microsoft``, add
    nothing), and at least `MIN_IR_VERSION`."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        version = max(MIN_IR_VERSION, min_ir_version(model))
        modified = model.ir_version != version
        model.ir_version = version
        return ir.passes.PassResult(model, modified=modified)


class ContiguousConstantsPass(ir.passes.InPlacePass):
    """Constants folded as numpy views (a linear's weight transposed for MatMul) copied into C order: numpy
    writes a strided array to a file element by element (10 s for a 600 MB model), and every serialization
    of it copies it."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for value in model.graph.initializers.values():
            tensor = value.const_value
            array = tensor.raw if isinstance(tensor, ir.Tensor) else None
            if isinstance(array, np.ndarray) and not array.flags.c_contiguous:
                value.const_value = ir.Tensor(_c_order(array), dtype=tensor.dtype, name=tensor.name)
                modified = True
        return ir.passes.PassResult(model, modified=modified)


def _c_order(array: np.ndarray) -> np.ndarray:
    """`array` copied into C order: by torch where it can (its blocked copy transposes a matrix about 3x
    faster than numpy's)."""
    import torch

    if array.flags.writeable:
        try:
            return torch.from_numpy(array).contiguous().numpy()
        except TypeError:  # a dtype torch does not have
            pass
    return np.ascontiguousarray(array)


def min_ir_version(model: ir.Model) -> int:
    """The lowest IR version onnx allows for the opsets `model` and its functions import."""
    imports = {(d, v) for owner in (model, *model.functions.values()) for d, v in owner.opset_imports.items()}
    return onnx.helper.find_min_ir_version_for(
        [onnx.helper.make_opsetid(d, v) for d, v in imports], ignore_unknown=True
    )


def onnx_passes(opset_version: int, *, optimize: bool | str = True, modularize: bool = True) -> ir.passes.Sequential:
    """The passes that bring a translated model into its final shape, in order (`optimize` as in `ExportOptions`)."""
    passes: list[ir.passes.PassBase] = [FunctionOpsetPass(opset_version), common_passes.InlinePass()]
    if optimize:
        passes.append(OptimizePass())
    passes += [common_passes.RemoveUnusedNodesPass(), ConvertOpsetPass(opset_version)]
    if optimize:
        passes.append(FusePass(opset_version, optimize))
    if modularize:
        passes.append(ModularizePass())
    passes += [
        ContiguousConstantsPass(),
        common_passes.NameFixPass(),
        common_passes.RemoveUnusedOpsetsPass(),
        IrVersionPass(),
    ]
    return ir.passes.Sequential(*passes)


def finalize(
    model: ir.Model, opset_version: int, ctx: DiagnosticContext, *, optimize: bool | str = True, modularize: bool = True
) -> None:
    """Run `onnx_passes` on `model` in place, each reported by name, then `check` it."""
    for pass_ in onnx_passes(opset_version, optimize=optimize, modularize=modularize).passes:
        name = type(pass_).__name__
        try:
            result = pass_(model)
        except Exception as e:
            message = f"ONNX pass {name} failed: {type(e).__name__}: {e}"
            ctx.report(rules.ONNX_MODEL_CHECK, Level.ERROR, message, exception=e, **{"pass": name})
            raise PassFailed(message) from e
        ctx.report(
            rules.ONNX_MODEL_CHECK, Level.NONE, f"Ran ONNX pass {name}.", modified=result.modified, **{"pass": name}
        )
    check(model, ctx)


def check(model: ir.Model, ctx: DiagnosticContext) -> None:
    """Run onnx.checker with strict shape and type inference where onnx knows every op (a model
    onnxruntime would refuse to load otherwise passes: an ``int64`` operand of a float ``Div``; the
    contrib ops of ``optimize="onnxruntime"`` have no types for it); a failure is an error result (the
    model is still returned for inspection). The weights are checked by type and shape only
    (`_weightless_proto`)."""
    proto = _weightless_proto(model)
    try:
        onnx.checker.check_model(proto, full_check=_all_ops_known(model))
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        ctx.report(
            rules.ONNX_MODEL_CHECK,
            Level.ERROR,
            f"onnx.checker rejected the model: {e}",
            stack=_stack_of_named_node(model, str(e)),
            exception=e,
        )
        return
    if ctx.wants(Level.NONE):
        del proto.graph.initializer[:]  # the dump shows structure, not weights
        del proto.graph.input[len(model.graph.inputs) :]
        ctx.report(
            rules.ONNX_MODEL_CHECK,
            Level.NONE,
            "onnx.checker accepted the model.",
            onnxGraph=onnx.printer.to_text(proto),
        )


def _weightless_proto(model: ir.Model) -> onnx.ModelProto:
    """`model` as a protobuf whose main-graph initializers of more than `_INLINE_BYTES` are graph inputs
    of their type and shape (appended after the model's own): no copy of the weights (it cost more than
    the rest of the export, 600 MB for a small LLM) and no 2 GiB limit. The small initializers (shapes,
    indices, scalars) keep their data for shape inference."""
    large = {
        name: value.const_value
        for name, value in model.graph.initializers.items()
        if value.const_value is not None and value.const_value.nbytes > _INLINE_BYTES
    }
    for name, tensor in large.items():  # references, not bytes, while serializing
        model.graph.initializers[name].const_value = ir.ExternalTensor(
            "", 0, tensor.nbytes, tensor.dtype, shape=tensor.shape, name=name
        )
    try:
        proto = ir.serde.serialize_model(model)
    finally:
        for name, tensor in large.items():
            model.graph.initializers[name].const_value = tensor
    initializers = proto.graph.initializer
    moved = [i for i, t in enumerate(initializers) if t.name in large]
    proto.graph.input.extend(
        onnx.helper.make_tensor_value_info(initializers[i].name, initializers[i].data_type, initializers[i].dims)
        for i in moved
    )
    for i in reversed(moved):
        del initializers[i]
    return proto


_NODE_NAME = re.compile(r"node name: ([^)\s]+)\)")


def _stack_of_named_node(model: ir.Model, message: str) -> list[Frame]:
    """The user frames of the node an inference error names (``node name: node_Add_2``), if any."""
    found = _NODE_NAME.search(message)
    nodes = [n for g in (model.graph, *model.functions.values()) for n in g.all_nodes()] if found else []
    stacks = [n.metadata_props.get(METADATA_STACK) for n in nodes if n.name == found[1]]
    return next(([f for f in parse_stack_trace(s) if f.is_user_code] for s in stacks if s), [])


def _all_ops_known(model: ir.Model) -> bool:
    """Whether onnx has a schema or a function body for every op the model imports (no contrib ops)."""
    functions = model.functions.values()
    domains = {domain for owner in (model, *functions) for domain in owner.opset_imports}
    return domains <= {"", "ai.onnx", "ai.onnx.ml", *(f.domain for f in functions)}
