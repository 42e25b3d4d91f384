"""OnnxRegistry: torchlib defaults, custom ops via register_op, overriding built-in ATen ops."""

from __future__ import annotations

import onnxscript
import pytest
import torch
from fixtures.custom_ops import scaled_tanh
from helpers import assert_matches_eager
from onnxscript import opset18 as op
from onnxscript import opset23 as op23

import exporter

custom_domain = onnxscript.values.Opset("onnxlens.test", 1)


@onnxscript.script(custom_domain)
def scaled_tanh_onnx(x, scale: float):
    return op.Mul(op.Tanh(x), op.CastLike(op.Constant(value_float=scale), x))


@onnxscript.script(custom_domain)
def relu_as_max(x):
    return op.Max(x, op.CastLike(op.Constant(value_float=0.0), x))


class UsesCustomOp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return scaled_tanh(self.linear(x), 2.5)


def test_defaults_come_from_torchlib():
    registry = exporter.OnnxRegistry()
    assert registry.opset_version == 20  # as torch.onnx.export since PyTorch 2.9
    functions = registry.get_op_functions("aten", "add", "Tensor")
    assert functions and not functions[0].is_custom
    assert functions[0].onnx_function.function_ir.domain == "pkg.onnxscript.torch_lib"
    assert functions[0].onnx_function.name == "aten_add"
    assert registry.is_registered_op("aten", "relu")
    assert not registry.is_registered_op("onnxlens_test", "scaled_tanh")
    assert registry.get_op_functions("onnxlens_test", "scaled_tanh") is None


def test_registries_do_not_share_custom_functions():
    a, b = exporter.OnnxRegistry(), exporter.OnnxRegistry()
    a.register_op(relu_as_max, "aten", "relu")
    assert a.get_op_functions("aten", "relu")[0].is_custom
    assert not b.get_op_functions("aten", "relu")[0].is_custom


def test_custom_op_exports_with_registered_function():
    registry = exporter.OnnxRegistry()
    registry.register_op(scaled_tanh_onnx, "onnxlens_test", "scaled_tanh")
    model, x = UsesCustomOp(), torch.randn(3, 4)
    export_output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(onnx_registry=registry))
    assert_matches_eager(export_output, model, (x,))


@onnxscript.script(custom_domain)
def scaled_tanh_onnx_23(x, scale: float):
    return op23.Mul(op23.Tanh(x), op23.CastLike(op23.Constant(value_float=scale), x))


@pytest.mark.parametrize("function, opset", [(scaled_tanh_onnx, 20), (scaled_tanh_onnx, 23), (scaled_tanh_onnx_23, 23)])
def test_a_function_written_for_an_older_or_the_same_opset_inlines(function, opset):
    """A registered function written for opset 18 joins a model at 20 or 23 (its nodes converted up); one
    written for 23 joins a model at 23. Every node of the model then belongs to the requested opset."""
    registry = exporter.OnnxRegistry()
    registry.register_op(function, "onnxlens_test", "scaled_tanh")
    written_for = function.function_ir.opset_imports[""]
    model, x = UsesCustomOp(), torch.randn(3, 4)
    options = exporter.ExportOptions(onnx_registry=registry, opset_version=opset, modularize=False)
    export_output = exporter.dynamo_export(model, x, export_options=options)
    assert {o.domain: o.version for o in export_output.model_proto.opset_import}[""] == opset
    assert {"Tanh", "Mul"} <= {n.op_type for n in export_output.model_proto.graph.node}
    assert_matches_eager(export_output, model, (x,))
    assert function.function_ir.opset_imports[""] == written_for  # the registered function itself is untouched


def test_a_function_written_for_a_newer_opset_than_the_export_is_a_clear_error():
    registry = exporter.OnnxRegistry()
    registry.register_op(scaled_tanh_onnx_23, "onnxlens_test", "scaled_tanh")
    options = exporter.ExportOptions(onnx_registry=registry, opset_version=20)
    with pytest.raises(exporter.OnnxExporterError, match=r"written for opset 23, but the export targets opset 20"):
        exporter.dynamo_export(UsesCustomOp(), torch.randn(3, 4), export_options=options)


def test_custom_function_overrides_builtin_aten_op():
    registry = exporter.OnnxRegistry()
    registry.register_op(relu_as_max, "aten", "relu")
    model, x = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), torch.randn(3, 4)
    options = exporter.ExportOptions(onnx_registry=registry, modularize=False)
    export_output = exporter.dynamo_export(model, x, export_options=options)
    op_types = {n.op_type for n in export_output.model_proto.graph.node}
    assert "Max" in op_types and "Relu" not in op_types
    assert_matches_eager(export_output, model, (x,))


@onnxscript.script(custom_domain)
def relu_as_int64(x):
    return op.Cast(op.Relu(x), to=7)  # wrong: PyTorch's relu keeps the float dtype


def test_a_model_onnxruntime_would_refuse_to_load_is_a_checker_error():
    """Strict type inference finds a translation whose result type is not PyTorch's (an int64 Relu
    feeding a float Add): an error result, not a model that fails to load in onnxruntime."""
    registry = exporter.OnnxRegistry()
    registry.register_op(relu_as_int64, "aten", "relu")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

    class AddsToRelu(torch.nn.Module):
        def forward(self, x):
            return model(x) + x

    with pytest.raises(exporter.OnnxExporterError) as info:
        exporter.dynamo_export(
            AddsToRelu(), torch.randn(3, 4), export_options=exporter.ExportOptions(onnx_registry=registry)
        )
    (error,) = [d for d in info.value.export_output.diagnostic_context.errors() if d.rule.id == "FXE0019"]
    assert error.message.startswith("onnx.checker rejected the model: [ShapeInferenceError] (op_type:Add")
    assert (error.stack[0].path, error.stack[0].snippet) == (__file__, "return model(x) + x")  # the node it names


def test_unsupported_custom_op_raises_naming_the_op():
    model, x = UsesCustomOp(), torch.randn(3, 4)
    with pytest.raises(exporter.OnnxExporterError, match="onnxlens_test.scaled_tanh") as info:
        exporter.dynamo_export(model, x)
    diagnostics = info.value.export_output.diagnostic_context.diagnostics
    assert any(d.rule.id == "FXE0011" for d in diagnostics)


@pytest.mark.parametrize("opset", [18, 20, 23])
def test_opset_is_configurable(opset):
    model, x = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.GELU()), torch.randn(2, 4)
    export_output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(opset_version=opset))
    imports = {o.domain: o.version for o in export_output.model_proto.opset_import}
    assert imports[""] == opset
    assert_matches_eager(export_output, model, (x,))


def test_unsupported_opset_is_a_clear_error():
    with pytest.raises(ValueError, match="opset_version must be an integer from 18 to 25, got 9"):  # refused as given
        exporter.ExportOptions(opset_version=9)


@onnxscript.script(custom_domain)
def scaled_tanh_stub(x, scale: float):
    return op.Identity(x)  # what the FXE0011 quick fix inserts: a placeholder


def custom_translation_warnings(export_output) -> list:
    return [
        d for d in export_output.diagnostic_context.diagnostics if d.properties.get("custom") and d.rule.id == "FXE0013"
    ]


def test_a_wrong_custom_translation_is_a_warning_at_its_line_on_every_export():
    registry = exporter.OnnxRegistry()
    registry.register_op(scaled_tanh_stub, "onnxlens_test", "scaled_tanh")
    model, x = UsesCustomOp(), torch.randn(3, 4)
    export_output = exporter.dynamo_export(
        model, x, export_options=exporter.ExportOptions(onnx_registry=registry)
    )  # no op-level debug
    (warning,) = custom_translation_warnings(export_output)
    assert warning.level.name == "WARNING"
    assert warning.message.startswith(
        "The ONNX function you registered for onnxlens_test.scaled_tanh.default (scaled_tanh_stub) does not compute what PyTorch does"
    )
    expected = (torch.tanh(model.linear(x)) * 2.5 - model.linear(x)).abs().max().item()  # tanh*2.5 vs the identity
    assert warning.properties["maxAbsError"] == pytest.approx(expected, rel=1e-4)
    (frame, *_) = warning.stack
    assert frame.path == __file__ and frame.snippet == "return scaled_tanh(self.linear(x), 2.5)"


def test_a_right_custom_translation_passes_the_check_silently():
    registry = exporter.OnnxRegistry()
    registry.register_op(scaled_tanh_onnx, "onnxlens_test", "scaled_tanh")
    export_output = exporter.dynamo_export(
        UsesCustomOp(), torch.randn(3, 4), export_options=exporter.ExportOptions(onnx_registry=registry)
    )
    assert custom_translation_warnings(export_output) == []
