"""The statistics of the interleaved latency benchmark (``benchmarks/ort_latency.py``), and one real
measurement of two onnxruntime models of known relative cost."""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import ort_latency  # noqa: E402


def test_median_ci95_order_statistics():
    # n = 100: 1.96 * 10 / 2 = 9.8 -> the 41st and 60th smallest (1-based: floor(50 - 9.8) + 1, ceil(59.8))
    values = list(range(100, 0, -1))  # 1..100, unsorted
    assert ort_latency.median_ci95(values) == (41, 60)
    assert ort_latency.median_ci95([5.0]) == (5.0, 5.0)


def test_ratio_summary_pairs_rounds():
    # a load burst in round 3 slows both models of that round alike: the per-round ratio stays 1.1
    ours = [1.1, 2.2, 11.0, 1.1, 2.2]
    theirs = [1.0, 2.0, 10.0, 1.0, 2.0]
    summary = ort_latency.ratio_summary(ours, theirs)
    assert summary["median"] == pytest.approx(1.1)
    assert summary["p25"] == pytest.approx(1.1) and summary["p75"] == pytest.approx(1.1)
    assert summary["rounds"] == 5


@pytest.mark.parametrize(("ci95", "expected"), [((1.06, 1.2), "over"), ((1.0, 1.05), "ok"), ((1.04, 1.07), "unsure")])
def test_verdict(ci95, expected):
    assert ort_latency.verdict({"ci95": list(ci95)}, 1.05) == expected


def test_percentile_interpolates():
    assert ort_latency.percentile([4.0, 1.0, 3.0, 2.0], 25) == pytest.approx(np.percentile([1, 2, 3, 4], 25))


def _matmuls(count: int) -> bytes:
    """A chain of `count` 64x64 MatMuls on a 64x64 input."""
    weight = onnx.numpy_helper.from_array(np.eye(64, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", [f"v{i}", "w"], [f"v{i + 1}"]) for i in range(count)]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info(f"v{count}", TensorProto.FLOAT, [64, 64])],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()


def test_measure_orders_models_by_work(monkeypatch):
    monkeypatch.setattr(ort_latency, "MIN_ROUNDS", 30)
    monkeypatch.setattr(ort_latency, "BUDGET_SECONDS", 0.3)
    feeds = {"v0": np.ones((64, 64), np.float32)}
    models = {n: (ort_latency.session(_matmuls(k)), feeds) for n, k in (("one", 1), ("eight", 8))}
    times = ort_latency.measure(models)
    assert len(times["one"]) == len(times["eight"]) >= 30
    assert ort_latency.ratio_summary(times["eight"], times["one"])["median"] > 2  # 8x the MatMuls
