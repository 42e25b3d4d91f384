"""Every corpus model exports, passes onnx.checker, and matches eager PyTorch in onnxruntime."""

from __future__ import annotations

import onnx
import pytest

import corpus
import exporter
from helpers import assert_matches_eager
import os
MOD = os.environ.get("MOD", "1") == "1"


@pytest.mark.parametrize("case", corpus.CASES, ids=lambda c: c.name)
def test_export_matches_eager(case: corpus.Case):
    model, args, kwargs = case.build()
    export_output = exporter.dynamo_export(model, *args, **kwargs, export_options=exporter.ExportOptions(modularize=MOD))
    onnx.checker.check_model(export_output.model_proto)
    if case.ort_note:
        pytest.skip(f"graph checked; not run: {case.ort_note}")
    reference, _, _ = case.build()  # fresh model: mutation cases change their buffers when run
    assert_matches_eager(export_output, reference, args, kwargs, atol=case.atol, rtol=case.rtol)
