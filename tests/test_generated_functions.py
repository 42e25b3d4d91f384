"""ONNX functions generated from a custom op's Python implementation (FXE0011's ``generatedFunction``)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest
import torch
from fixtures.custom_ops import blend, numpy_tanh, scaled_tanh, shifted_sigmoid, softmax_along
from helpers import assert_matches_eager

import exporter
from exporter.translate import python_functions as generate


class Ops(torch.nn.Module):
    """Calls each op with the scalars it is given."""

    def __init__(self, **scalars) -> None:
        super().__init__()
        self.scalars = scalars

    def forward(self, x, y):
        s = self.scalars
        return (
            scaled_tanh(x, s.get("scale", 2.0))
            + shifted_sigmoid(y)
            + blend(x, s.get("alpha", 0.25), y, s.get("clip", False))
        )


def fxe0011(export_output: exporter.ExportOutput, level: str = "ERROR") -> dict[str, dict]:
    """The FXE0011 results at `level`, by operator."""
    return {
        d.properties["fxTarget"]: d
        for d in export_output.diagnostic_context.diagnostics
        if d.rule.id == "FXE0011" and d.level.name == level
    }


def failed_export(model, *args, **options) -> exporter.ExportOutput:
    with pytest.raises(exporter.OnnxExporterError) as raised:
        exporter.dynamo_export(model, *args, export_options=exporter.ExportOptions(**options))
    return raised.value.export_output


def load(generated: dict, folder: pathlib.Path):
    """Import a generated function as a user's file would: its imports, then its code."""
    path = folder / f"{generated['function']}.py"
    path.write_text("\n".join(generated["imports"]) + "\n\n\n" + generated["code"])
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = sys.modules[path.stem] = importlib.util.module_from_spec(spec)  # onnxscript reads the module
    spec.loader.exec_module(module)
    return getattr(module, generated["function"])


def registry_with(functions: dict[str, dict], folder: pathlib.Path) -> exporter.OnnxRegistry:
    registry = exporter.OnnxRegistry()
    for target, generated in functions.items():
        namespace, op_name, overload = target.split(".")
        registry.register_op(load(generated, folder), namespace, op_name, overload)
    return registry


def test_generated_functions_make_the_export_match_pytorch(tmp_path):
    x, y = torch.randn(2, 4), torch.randn(4)
    found = fxe0011(failed_export(Ops(), x, y))
    generated = {target: d.properties["generatedFunction"] for target, d in found.items()}
    assert set(generated) == {
        "onnxlens_test.scaled_tanh.default",
        "onnxlens_test.shifted_sigmoid.default",
        "onnxlens_test.blend.default",
    }

    tanh = generated["onnxlens_test.scaled_tanh.default"]
    assert (
        tanh["function"] == "onnxlens_test_scaled_tanh"
        and tanh["attributes"] == ["scale"]
        and tanh["specialized"] == {}
    )
    assert (
        "def onnxlens_test_scaled_tanh(x, scale: float):" in tanh["code"]
        and "Constant(value_float=scale)" in tanh["code"]
    )
    assert tanh["checkedShapes"] == [[[2, 4]], [[3, 5]]] and tanh["maxAbsError"] < 1e-5
    assert "checked against PyTorch in onnxruntime on inputs of shape x=2×4 and x=3×5" in " ".join(tanh["code"].split())
    assert (
        "def onnxlens_test_blend(a, alpha: float, b, clip: bool):" in generated["onnxlens_test.blend.default"]["code"]
    )  # the schema's order

    registry = registry_with(generated, tmp_path)
    for model, inputs in [
        (Ops(), (x, y)),
        (
            Ops(scale=-0.5, alpha=0.9, clip=True),
            (torch.randn(3, 5), torch.randn(5)),
        ),  # other attribute values and shapes
    ]:
        export_output = exporter.dynamo_export(
            model, *inputs, export_options=exporter.ExportOptions(onnx_registry=registry)
        )
        assert_matches_eager(export_output, model, inputs)
        assert not [
            d
            for d in export_output.diagnostic_context.diagnostics
            if d.rule.id == "FXE0013" and d.level.name == "WARNING"
        ]


def test_a_scalar_the_implementation_needs_as_a_python_value_is_specialized_and_says_so(tmp_path):
    class Softmax(torch.nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.dim = dim

        def forward(self, x):
            return softmax_along(x, self.dim)

    x = torch.randn(2, 4)
    (found,) = fxe0011(failed_export(Softmax(1), x)).values()
    generated = found.properties["generatedFunction"]
    assert generated["attributes"] == [] and generated["specialized"] == {"dim": 1}
    assert "def onnxlens_test_softmax_along(x, dim: int):" in generated["code"]
    assert "Specialized to this call's dim=1: other values of dim are not computed." in " ".join(
        generated["code"].split()
    )
    registry = registry_with({"onnxlens_test.softmax_along.default": generated}, tmp_path)
    options = exporter.ExportOptions(onnx_registry=registry)
    assert_matches_eager(exporter.dynamo_export(Softmax(1), x, export_options=options), Softmax(1), (x,))
    other = exporter.dynamo_export(
        Softmax(0), x, export_options=options
    )  # another value: the check on every export catches it
    assert [
        d.properties["fxTarget"]
        for d in other.diagnostic_context.diagnostics
        if d.rule.id == "FXE0013" and d.level.name == "WARNING"
    ] == ["onnxlens_test.softmax_along.default"]


def test_an_implementation_that_does_not_export_gets_no_function_and_a_note_why():
    class Numpy(torch.nn.Module):
        def forward(self, x):
            return numpy_tanh(x)

    export_output = failed_export(Numpy(), torch.randn(2, 4))
    (error,) = fxe0011(export_output).values()
    assert "generatedFunction" not in error.properties
    (note,) = fxe0011(export_output, "NOTE").values()
    assert note.message.startswith(
        "No ONNX function could be generated for onnxlens_test.numpy_tanh.default from its Python implementation: it does not export"
    )
    assert ".numpy()" in note.message and note.stack == []  # not a second problem at the line: the error is the problem


def test_the_generated_function_is_in_the_sarif_log(tmp_path):
    class Tanh(torch.nn.Module):
        def forward(self, x):
            return scaled_tanh(x, 2.0)

    failed_export(Tanh(), torch.randn(2, 4)).save_diagnostics(tmp_path / "log.sarif")
    results = json.loads((tmp_path / "log.sarif").read_text())["runs"][0]["results"]
    (result,) = [r for r in results if r["ruleId"] == "FXE0011"]
    generated = result["properties"]["generatedFunction"]
    assert generated["function"] == "onnxlens_test_scaled_tanh"
    assert generated["imports"] == [
        "from onnxscript import script",
        "from onnxscript.values import Opset",
        "from onnxscript.onnx_opset import opset20",
    ]  # the export's opset (the default)
    assert set(generated) == {
        "function",
        "imports",
        "code",
        "attributes",
        "specialized",
        "checkedShapes",
        "maxAbsError",
    }


def test_nothing_is_generated_under_fake_mode_or_past_the_time_budget(monkeypatch):
    class Tanh(torch.nn.Module):
        def forward(self, x):
            return scaled_tanh(x, 2.0)

    with exporter.enable_fake_mode() as ctx:
        model, x = Tanh(), torch.randn(2, 4)
    export_output = failed_export(model, x, fake_context=ctx)
    assert "generatedFunction" not in fxe0011(export_output)["onnxlens_test.scaled_tanh.default"].properties
    assert not fxe0011(export_output, "NOTE")

    monkeypatch.setattr(generate, "BUDGET_SECONDS", 0.0)
    export_output = failed_export(Tanh(), torch.randn(2, 4))
    assert "generatedFunction" not in fxe0011(export_output)["onnxlens_test.scaled_tanh.default"].properties
    assert "are used up" in fxe0011(export_output, "NOTE")["onnxlens_test.scaled_tanh.default"].message
