"""Grad-mode regions inside ``forward`` (``with torch.no_grad():``, ``@torch.no_grad()`` helpers, as
in sinusoidal position embeddings): inlined, right in onnxruntime, located at their lines."""

from __future__ import annotations

import inspect

import onnx
import onnx.inliner
import pytest
import torch
from helpers import assert_matches_eager

import exporter
from exporter.capture.extractor import FXGraphExtractor
from exporter.diagnostics import DiagnosticContext
from exporter.diagnostics.locations import stack_of
from exporter.passes import inline_grad_regions


@torch.no_grad()
def positions(x: torch.Tensor) -> torch.Tensor:
    steps = torch.arange(x.shape[-1], dtype=x.dtype)
    return torch.sin(steps / 10.0)  # sinusoidal positions


class GradRegions(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(6, 6)

    def forward(self, x):
        with torch.no_grad():
            scale = x.abs().amax(-1, keepdim=True) + 1.0  # in a no_grad region
            with torch.enable_grad():
                shift = scale * 0.5  # nested: grad enabled again
        return self.proj(x / scale + shift) + positions(x)


def _line(text: str) -> int:
    lines, start = inspect.getsourcelines(GradRegions.forward)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_regions_are_inlined_with_their_lines():
    program = FXGraphExtractor().generate_fx(
        GradRegions(), (torch.randn(2, 6),), {}, dynamic_shapes=False, ctx=DiagnosticContext()
    )
    wrapper = torch.ops.higher_order.wrap_with_set_grad_enabled
    assert any(n.target is wrapper for n in program.graph.nodes)
    assert inline_grad_regions.inline_grad_regions(program) >= 2  # the region, and the one nested in it
    nodes = [n for m in program.graph_module.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes]
    assert not any(n.target is wrapper for n in nodes)
    lines = {stack_of(n)[0].line for n in program.graph.nodes if n.op == "call_function" and stack_of(n)}
    assert {_line("x.abs().amax("), _line("scale * 0.5")} <= lines


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_regions_compute_what_eager_computes(dynamic):
    torch.manual_seed(0)
    model, x = GradRegions().eval(), torch.randn(2, 6)
    export_output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(dynamic_shapes=dynamic))
    assert_matches_eager(export_output, model, (x,))
    if dynamic:
        assert_matches_eager(export_output, model, (x,), run_args=(torch.randn(5, 6),))


class AutocastRegions(torch.nn.Module):
    """EfficientViT's pattern: attention kept in float32 with autocast turned off inside ``forward``."""

    def forward(self, x):
        with torch.autocast(device_type="cuda", enabled=False):
            scores = (x @ x.transpose(-1, -2)).float().softmax(-1)  # autocast off
        with torch.autocast(device_type="cpu", enabled=False):
            return scores @ x


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_regions_that_turn_autocast_off_are_inlined(dynamic):
    model, x = AutocastRegions(), torch.randn(2, 5, 4)
    program = FXGraphExtractor().generate_fx(model, (x,), {}, dynamic_shapes=False, ctx=DiagnosticContext())
    assert inline_grad_regions.inline_grad_regions(program) == 2
    assert not any(n.target is torch.ops.higher_order.wrap_with_autocast for n in program.graph.nodes)
    export_output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(dynamic_shapes=dynamic))
    assert_matches_eager(export_output, model, (x,))
    if dynamic:
        assert_matches_eager(export_output, model, (x,), run_args=(torch.randn(3, 7, 4),))


class AutocastOn(torch.nn.Module):
    """A region in a lower precision than the rest (mixed-precision inference written into ``forward``)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.autocast(device_type="cpu", dtype=self.dtype):
            scores = self.proj(x) @ x.T  # autocast on
        return scores.float().softmax(-1)


def _cast_types(export_output) -> set[int]:
    nodes = onnx.inliner.inline_local_functions(export_output.model_proto).graph.node
    return {onnx.helper.get_attribute_value(n.attribute[0]) for n in nodes if n.op_type == "Cast"}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_region_that_turns_autocast_on_exports_with_its_casts(dynamic):
    """Exported as PyTorch runs it: the region in float16 (its casts in the graph), matching eager PyTorch."""
    torch.manual_seed(0)
    model, x = AutocastOn(torch.float16), torch.randn(3, 4)
    export_output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(dynamic_shapes=dynamic))
    assert _cast_types(export_output) == {onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT}
    # float16 products round differently in onnxruntime's kernels than in PyTorch's: ~2e-4 after the softmax
    assert_matches_eager(export_output, model, (x,), atol=1e-3)
    if dynamic:
        assert_matches_eager(export_output, model, (x,), atol=1e-3, run_args=(torch.randn(5, 4),))


def test_a_bfloat16_region_keeps_its_casts():
    """onnxruntime's CPU provider has no bfloat16 matrix product to run it with: the graph is checked."""
    export_output = exporter.dynamo_export(AutocastOn(torch.bfloat16), torch.randn(3, 4))
    assert _cast_types(export_output) == {onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT}
