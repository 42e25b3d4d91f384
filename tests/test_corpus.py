"""Every corpus model exports, passes onnx.checker, and matches eager PyTorch in onnxruntime."""

from __future__ import annotations

import onnx
import pytest

import corpus
import exporter
from helpers import assert_matches_eager

# Known gaps, each a strict xfail: the day it passes, the test says so.
KNOWN_FAILURES: dict[str, str] = {}


def _params(dynamic: bool):
    for case in corpus.CASES:
        marks = []
        if case.name in KNOWN_FAILURES:
            marks.append(pytest.mark.xfail(reason=KNOWN_FAILURES[case.name], raises=exporter.OnnxExporterError, strict=True))
        if dynamic and not case.dynamic_ok:
            marks.append(pytest.mark.skip(reason="not exportable with all dims dynamic"))
        yield pytest.param(case, id=case.name, marks=marks)


def _export_and_compare(case: corpus.Case, options: exporter.ExportOptions) -> exporter.ExportOutput:
    model, args, kwargs = case.build()
    export_output = exporter.dynamo_export(model, *args, **kwargs, export_options=options)
    onnx.checker.check_model(export_output.model_proto)
    if case.ort_note:
        pytest.skip(f"graph checked; not run in onnxruntime: {case.ort_note}")
    reference, _, _ = case.build()  # fresh model: mutation cases change their buffers when run
    assert_matches_eager(export_output, reference, args, kwargs, atol=case.atol, rtol=case.rtol)
    return export_output


@pytest.mark.parametrize("case", _params(dynamic=False))
def test_export_matches_eager(case: corpus.Case):
    _export_and_compare(case, exporter.ExportOptions())


@pytest.mark.parametrize("case", _params(dynamic=True))
def test_dynamic_export_matches_eager(case: corpus.Case):
    export_output = _export_and_compare(case, exporter.ExportOptions(dynamic_shapes=True))
    dims = [d for i in export_output.model_proto.graph.input for d in i.type.tensor_type.shape.dim]
    if any(d.dim_value > 1 for d in dims):
        assert any(d.dim_param for d in dims), "dynamic_shapes=True left every input dim static"
