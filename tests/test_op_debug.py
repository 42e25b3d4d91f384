"""Op-level debug (FXE0013) flags translations that are slightly off, and never exact ones."""

from __future__ import annotations

import inspect

import onnxscript
import pytest
import torch
import torch.nn.functional as F
from onnxscript import opset18 as op

import exporter
from exporter.diagnostics import Level
from exporter.diagnostics.context import Diagnostic

near_miss = onnxscript.values.Opset("onnxlens.test.near_miss", 1)


@onnxscript.script(near_miss)
def sigmoid_off_by_1e2(x):
    return op.Mul(op.Sigmoid(x), op.CastLike(op.Constant(value_float=1.01), x))


@onnxscript.script(near_miss)
def sigmoid_off_by_1e3(x):
    return op.Mul(op.Sigmoid(x), op.CastLike(op.Constant(value_float=1.001), x))


@onnxscript.script(near_miss)
def sigmoid_from_exp(x):
    one = op.CastLike(op.Constant(value_float=1.0), x)
    return op.Div(one, op.Add(one, op.Exp(op.Neg(x))))


@onnxscript.script(near_miss)
def silu_from_sigmoid(x):
    return op.Mul(x, op.Sigmoid(x))


class Gate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.linear(x)
        return torch.sigmoid(h), F.silu(h)


SIGMOID_LINE = inspect.getsourcelines(Gate.forward)[1] + 2


def op_checks(*functions: tuple[onnxscript.OnnxFunction, str]) -> list[Diagnostic]:
    """FXE0013 diagnostics of exporting `Gate` with op-level debug, `functions` registered for ATen ops."""
    registry = exporter.OnnxRegistry()
    for function, name in functions:
        registry.register_op(function, "aten", name)
    x = torch.randn(16, 8) * 3
    options = exporter.ExportOptions(op_level_debug=True, onnx_registry=registry)
    diagnostics = exporter.dynamo_export(Gate().eval(), x, export_options=options).diagnostic_context.diagnostics
    return [d for d in diagnostics if d.rule.id == "FXE0013"]


def per_op(checks: list[Diagnostic]) -> dict[str, dict]:
    """The per-op properties in the per-source-line results, by FX target."""
    return {
        o["fxTarget"]: o for d in checks if d.properties.get("aggregate") == "sourceLine" for o in d.properties["ops"]
    }


@pytest.mark.parametrize("function, error", [(sigmoid_off_by_1e2, 1e-2), (sigmoid_off_by_1e3, 1e-3)])
def test_a_translation_off_by_a_small_relative_error_is_flagged(function, error):
    checks = op_checks((function, "sigmoid"))
    (warning,) = [d for d in checks if d.level == Level.WARNING]
    assert warning.properties["fxTarget"] == "aten.sigmoid.default"
    assert warning.properties["ok"] is False
    assert warning.properties["maxRelError"] == pytest.approx(error, rel=1e-3)
    assert warning.location.line == SIGMOID_LINE and warning.location.path == __file__
    (line,) = [d for d in checks if d.properties.get("aggregate") == "sourceLine" and d.location.line == SIGMOID_LINE]
    assert line.properties["mismatches"] == 1
    assert per_op(checks)["aten.silu.default"]["ok"] is True  # the other ops on the line are fine


@pytest.mark.parametrize(
    "functions",
    [[], [(sigmoid_from_exp, "sigmoid"), (silu_from_sigmoid, "silu")]],
    ids=["torchlib", "custom-exact"],
)
def test_exact_translations_are_not_flagged(functions):
    checks = op_checks(*functions)
    assert [d.message for d in checks if d.level >= Level.WARNING] == []
    ops = per_op(checks)
    assert {"aten.linear.default", "aten.sigmoid.default", "aten.silu.default"} <= set(ops)
    for target in ("aten.sigmoid.default", "aten.silu.default"):
        assert ops[target]["ok"] is True and "skipped" not in ops[target], ops[target]
        assert ops[target]["maxAbsError"] < 1e-6
    if functions:  # the custom functions were the ones compared
        assert ops["aten.sigmoid.default"]["onnxOpTypes"] == ["sigmoid_from_exp"]
        assert ops["aten.silu.default"]["onnxOpTypes"] == ["silu_from_sigmoid"]
