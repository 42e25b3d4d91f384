"""Every corpus model exports, passes onnx.checker, and matches eager PyTorch when run.

Dynamic exports also run at a second shape (every dynamic dim changed) and must have exactly the
symbolic dims the case lists. Models onnxruntime (CPU) cannot run (`Case.ort_note`) run in onnx's
reference evaluator instead. The transformer, CNN and audio models also export with the other
optimizations: onnxruntime's fusions (``optimize="onnxruntime"``) and opsets 18 and 23 beside the default 20
(opset 18 differs from 20 only in the elementwise Gelu, written out, so it is exported with dynamic shapes only).
"""

from __future__ import annotations

import corpus
import onnx
import pytest
from helpers import assert_matches_eager, expected_graph_inputs

import exporter

# Known gaps, each a strict xfail: the day it passes, the test says so.
KNOWN_FAILURES: dict[str, str] = {}
KNOWN_SECOND_SHAPE_FAILURES: dict[str, str] = {}


def _params(known: dict[str, str], raises: type[BaseException] | tuple[type[BaseException], ...]) -> list:
    """Every corpus case, the `known` ones marked as strict xfails raising `raises`."""
    params = []
    for case in corpus.CASES:
        marks = [pytest.mark.xfail(reason=known[case.name], raises=raises, strict=True)] if case.name in known else []
        params.append(pytest.param(case, id=case.name, marks=marks))
    return params


def _export(case: corpus.Case, options: exporter.ExportOptions) -> exporter.ExportOutput:
    model, args, kwargs = case.build()
    export_output = exporter.dynamo_export(model, *args, **kwargs, export_options=options)
    onnx.checker.check_model(export_output.model_proto)
    return export_output


def _compare(case: corpus.Case, export_output: exporter.ExportOutput, **sizes: int) -> None:
    """Compare with eager on the inputs `case.build(**sizes)` makes (a fresh model: mutation cases
    change their buffers when run; the model is the export's, whatever the sizes)."""
    reference, _, _ = case.build()
    _, args, kwargs = case.build(**sizes)
    assert_matches_eager(
        export_output, reference, args, kwargs, atol=case.atol, rtol=case.rtol, reference=case.ort_note is not None
    )


@pytest.mark.parametrize("case", _params(KNOWN_FAILURES, exporter.OnnxExporterError))
def test_export_matches_eager(case: corpus.Case):
    export_output = _export(
        case, exporter.ExportOptions(verify=True)
    )  # no false alarm (FXE0021) at the default tolerances
    [verified] = [d for d in export_output.diagnostic_context.diagnostics if d.rule.id == "FXE0021"]
    assert verified.message.startswith("Verification skipped" if case.ort_note else "Verified"), verified.message
    _compare(case, export_output)


@pytest.mark.parametrize(
    "case", _params(KNOWN_FAILURES | KNOWN_SECOND_SHAPE_FAILURES, (exporter.OnnxExporterError, AssertionError))
)
def test_dynamic_export_matches_eager_at_two_shapes(case: corpus.Case):
    export_output = _export(case, exporter.ExportOptions(dynamic_shapes=True))
    shapes = {
        i.name: tuple(d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim)
        for i in export_output.model_proto.graph.input
    }
    assert shapes == case.dynamic_dims
    _compare(case, export_output)
    if case.second_shape is None:
        pytest.skip(f"no second shape: {case.no_second_shape}")
    _compare(case, export_output, **case.second_shape)


FUSED_TAGS = {"transformer", "cnn", "audio"}  # the models the fusions rewrite


def _fused_params() -> list:
    """(case, dynamic) for the cases with a tag of FUSED_TAGS that onnxruntime runs (dynamic only where
    the export is right at other sizes: the second-size check refuses the known gaps)."""
    return [
        pytest.param(case, dynamic, id=f"{case.name}-{'dynamic' if dynamic else 'static'}")
        for case in corpus.CASES
        if case.tags & FUSED_TAGS and case.ort_note is None and case.name not in KNOWN_FAILURES
        for dynamic in (False, True)
        if not (dynamic and case.name in KNOWN_SECOND_SHAPE_FAILURES)
    ]


@pytest.mark.parametrize(("case", "dynamic"), _fused_params())
def test_onnxruntime_optimized_export_matches_eager(case: corpus.Case, dynamic: bool):
    export_output = _export(case, exporter.ExportOptions(dynamic_shapes=dynamic, optimize="onnxruntime"))
    _compare(case, export_output)
    if dynamic and case.second_shape is not None:
        _compare(case, export_output, **case.second_shape)


def _other_opset_params() -> list:
    """(case, dynamic, opset): opset 23 (RMSNormalization, RotaryEmbedding, Attention) static and dynamic;
    opset 18 (no Gelu, elementwise: the static export adds nothing to the default opset's) dynamic."""
    return [
        pytest.param(*param.values, opset, id=f"{param.id}-{opset}")
        for opset in (18, 23)
        for param in _fused_params()
        if opset == 23 or param.values[1]
    ]


@pytest.mark.parametrize(("case", "dynamic", "opset"), _other_opset_params())
def test_other_opset_export_matches_eager(case: corpus.Case, dynamic: bool, opset: int):
    export_output = _export(case, exporter.ExportOptions(dynamic_shapes=dynamic, opset_version=opset))
    _compare(case, export_output)
    if dynamic and case.second_shape is not None:
        _compare(case, export_output, **case.second_shape)


def test_second_shapes_change_every_dynamic_dim():
    """The corpus itself: each second shape changes every symbolic dim and keeps every fixed one."""
    for case in corpus.CASES:
        if case.second_shape is None:
            assert all(not dims for dims in case.dynamic_dims.values()), case.name
            continue
        model, args, kwargs = case.build()
        _, args2, kwargs2 = case.build(**case.second_shape)
        first = _shapes(model, args, kwargs)
        second = _shapes(model, args2, kwargs2)
        assert list(first) == list(case.dynamic_dims), case.name
        for name, dims in case.dynamic_dims.items():
            for i, dim in enumerate(dims):
                if isinstance(dim, str):
                    assert second[name][i] != first[name][i], f"{case.name}: {name} dim {i} ({dim}) unchanged"
                else:
                    assert first[name][i] == second[name][i] == dim, f"{case.name}: {name} dim {i}"


def _shapes(model, args, kwargs) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in expected_graph_inputs(model, args, kwargs).items()}
