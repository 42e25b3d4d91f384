"""Capture failures explained in the user's terms (`exporter.diagnostics.explain`)."""

from __future__ import annotations

import os

import pytest
import torch

import exporter
from exporter.diagnostics.explain import explain
from exporter.diagnostics.locations import Frame

GUARD = "GuardOnDataDependentSymNode: Could not guard on data-dependent expression Eq(Mod(u0, 2), 0) (unhinted: Eq(Mod(u0, 2), 0))."


class GuardOnDataDependentSymNode(RuntimeError):
    """Named as torch's: `explain` reads the type name and message, as a log does."""


@pytest.mark.parametrize(
    "line, cause",
    [
        ("if h.sum() > 0:", "data-dependent-branch"),
        ("while x.max() > 1:", "data-dependent-branch"),
        ("y = a if x.any() else b", "data-dependent-branch"),
        ("return x.new_zeros(n).view(2, -1)", "data-dependent-value"),
    ],
)
def test_data_dependent_failures_name_the_line_and_the_fix(line, cause):
    explained = explain(GuardOnDataDependentSymNode(GUARD), [Frame("/m/model.py", 12, "forward", line)])
    assert explained.cause == cause
    assert explained.message.startswith(f"`{line}` ")
    assert "u0" not in explained.message + explained.fix  # no symbols of PyTorch's internals
    expected_fix = "torch.cond(" if cause == "data-dependent-branch" else "torch._check("
    assert expected_fix in explained.fix


def test_the_line_is_read_from_the_file_when_the_frame_has_no_snippet(tmp_path):
    model = tmp_path / "m.py"
    model.write_text("def forward(x):\n    if x.sum() > 0:\n        return x\n")
    explained = explain(GuardOnDataDependentSymNode(GUARD), [Frame(str(model), 2, "forward")])
    assert explained.message.startswith("`if x.sum() > 0:` branches on a tensor's values")


def test_other_failures_keep_torchs_message():
    assert (
        explain(
            RuntimeError("mat1 and mat2 shapes cannot be multiplied"), [Frame("/m/model.py", 3, "forward", "y = a @ b")]
        )
        is None
    )


class Scripted(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.relu() + 1


class HoldsScript(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = torch.jit.script(Scripted())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x) * 2  # MARK: scripted


@pytest.mark.parametrize(
    "make, start",
    [
        (HoldsScript, "Module 'block' is TorchScript"),
        (lambda: torch.jit.script(Scripted()), "The model is TorchScript"),
        (lambda: torch.jit.trace(Scripted(), torch.randn(3)), "The model is TorchScript"),
    ],
    ids=["submodule", "scripted", "traced"],
)
def test_torchscript_modules_are_named_with_what_to_do(make, start):
    """torch.export cannot capture TorchScript (it failed with 'forward() takes 2 positional arguments but 3 were
    given'): the capture error names the scripted module, at the line calling it."""
    with pytest.raises(exporter.OnnxExporterError) as raised:
        exporter.dynamo_export(make(), torch.randn(2, 3))
    [error] = [d for d in raised.value.export_output.diagnostic_context.diagnostics if d.level.name == "ERROR"]
    assert (error.rule.id, error.properties["cause"]) == ("FXE0017", "torchscript-module")
    assert error.message.startswith(start) and "without torch.jit.script/trace" in error.message
    if make is HoldsScript:
        line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# MARK: scripted" in text)
        assert (error.stack[0].path, error.stack[0].line) == (os.path.realpath(__file__), line)


class TakesKwargs(torch.nn.Module):
    def forward(self, x: torch.Tensor, **kwargs) -> torch.Tensor:
        return x * kwargs["scale"]


def test_a_tensor_through_var_keyword_arguments_with_dynamic_shapes_is_explained():
    """torch.export fails on any dynamic_shapes for a tensor in **kwargs ('Must provide a tree_name when there might
    be a mismatch'): the error names the argument and what to do; static shapes export."""
    x, scale = torch.randn(2, 3), torch.randn(2, 3)
    with pytest.raises(exporter.OnnxExporterError) as raised:
        exporter.dynamo_export(
            TakesKwargs(), x, scale=scale, export_options=exporter.ExportOptions(dynamic_shapes=True)
        )
    [error] = raised.value.export_output.diagnostic_context.errors()
    assert (error.rule.id, error.properties["cause"]) == ("FXE0017", "dynamic-var-keyword")
    assert error.message.startswith("'scale' is not among TakesKwargs.forward's parameters: it goes to its **kwargs")
    exporter.dynamo_export(TakesKwargs(), x, scale=scale)


class FakeQuantized(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fake_quantize_per_tensor_affine(x, 0.05, 3, -128, 127) * 2  # MARK: fake quantize


def test_an_operator_without_a_fake_kernel_on_dynamic_sizes_is_explained_at_its_line():
    """aten.fake_quantize_per_tensor_affine_cachemask has no meta kernel: static shapes export (the kernel runs on
    real sizes), dynamic ones fail, and the error says why and what to do instead of torch's exception name."""
    x = torch.randn(3, 4)
    exporter.dynamo_export(FakeQuantized(), x)
    with pytest.raises(exporter.OnnxExporterError) as raised:
        exporter.dynamo_export(FakeQuantized(), x, export_options=exporter.ExportOptions(dynamic_shapes=True))
    [error] = raised.value.export_output.diagnostic_context.errors()
    assert (error.rule.id, error.properties["cause"]) == ("FXE0017", "no-fake-kernel")
    assert "calls aten.fake_quantize_per_tensor_affine_cachemask.default, which has no fake" in error.message
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# MARK: fake quantize" in text)
    assert (error.stack[0].path, error.stack[0].line) == (os.path.realpath(__file__), line)
