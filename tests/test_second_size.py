"""The second-size check (FXE0020) against graphs that are right at some sizes only: a branch on how two
sizes relate (their order, their ratio) that torch.export does not keep, so that the graph is right at
any size of the example's ratio and wrong, or failing in onnxruntime, at others; and sizes seen only
through a derived dimension. Each model is small and torchvision-free; torchvision's detection transform
(``GeneralizedRCNNTransform``) has the same resize and padding."""

from __future__ import annotations

import re

import numpy as np
import onnxscript
import pytest
import torch
import torch.nn.functional as F
from helpers import run_onnx_feeds
from onnxscript import opset18 as op
from torch.export import Dim

import exporter
from exporter import outcome

IMAGE = {"x": {2: "height", 3: "width"}}
EXAMPLE = (1, 3, 20, 18)  # height 20, width 18: the height is the longer side
# About 1.5 times the example's size, by an odd step (the first probe): the example's ratio, nearly
KEEPS_RATIO = (20 + (20 // 2 | 1), 18 + (18 // 2 | 1))
TALLER, WIDER = (KEEPS_RATIO[0], 18 + 1), (20 + 1, KEEPS_RATIO[1])  # one side by that step, the other by one


def _scale(h: int, w: int) -> float:
    """torchvision's resize: the shorter side to 16 pixels unless the longer one then exceeds 20."""
    return min(16 / min(h, w), 20 / max(h, w))


class Resize(torch.nn.Module):
    """Resized as torchvision's detection models resize: torch.export keeps the branch of ``min`` taken
    at the example (the shorter side to 16) without a check."""

    def forward(self, x):
        h, w = x.shape[-2:]
        y = F.interpolate(x, scale_factor=_scale(h, w), mode="bilinear", recompute_scale_factor=True)
        return y.mean((2, 3)), y


class ResizeAndPad(torch.nn.Module):
    """Resized, then pasted into a 20x20 canvas, as a detection batch is padded: eager's resized image
    always fits, the graph's does not at another ratio (onnxruntime fails)."""

    def forward(self, x):
        h, w = x.shape[-2:]
        y = F.interpolate(x, scale_factor=_scale(h, w), mode="bilinear", recompute_scale_factor=True)
        canvas = y.new_zeros(y.shape[0], y.shape[1], 20, 20)
        canvas[:, :, : y.shape[2], : y.shape[3]] = y
        return canvas


class TallerOrWider(torch.nn.Module):
    """A branch on which side is longer: torch.export drops the guard ``height > width``."""

    def forward(self, x):
        h, w = x.shape[-2:]
        return x * 2 if h > w else x.flip(-1) * 3


class Centered(torch.nn.Module):
    def forward(self, x):
        return (x - x.mean((2, 3), keepdim=True)).softmax(-1)


class Pairs(torch.nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0] // 2, 2, x.shape[1]).sum(1)


def unchecked(model: torch.nn.Module, x: torch.Tensor, spec) -> exporter.ExportOutput:
    options = exporter.ExportOptions(dynamic_shapes=spec, second_size_check=False)
    return exporter.dynamo_export(model, x, export_options=options)


def failed_check(model: torch.nn.Module, x: torch.Tensor, spec):
    """The second-size check's error of an export that must fail, and the export's outcome."""
    with pytest.raises(exporter.OnnxExporterError) as info:
        exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(dynamic_shapes=spec))
    diagnostics = info.value.export_output.diagnostic_context.diagnostics
    (error,) = [d for d in diagnostics if "secondSizeCheck" in d.properties]
    assert (
        error.rule.id == "FXE0020" and error.level.name == "ERROR" and error.properties["secondSizeCheck"] == "failed"
    )
    return error, outcome.decide(diagnostics, model=False)


def spelled(size: tuple[int, int]) -> str:
    return f"height={size[0]}, width={size[1]}"


def matches_eager(model: torch.nn.Module, proto, size: tuple[int, int]) -> bool:
    x = torch.randn(*EXAMPLE[:2], *size)
    actual = run_onnx_feeds(proto, {"x": x.numpy()})
    expected = [t.numpy() for t in torch.utils._pytree.tree_leaves(model(x))]
    return all(a.shape == e.shape and np.allclose(a, e, atol=1e-4, rtol=1e-3) for a, e in zip(actual, expected))


def test_a_resize_traced_at_one_aspect_ratio_fails_at_another():
    model, x = Resize(), torch.randn(EXAMPLE)
    proto = unchecked(model, x, IMAGE).model_proto
    # the graph's sizes: 16 / min(h, w) whatever the ratio, so it is right at the example's ratio only
    assert matches_eager(model, proto, KEEPS_RATIO) and not matches_eager(model, proto, TALLER)
    assert _scale(*TALLER) == 20 / TALLER[0] != 16 / min(TALLER)

    error, result = failed_check(model, x, IMAGE)
    assert error.properties["sizes"] == spelled(TALLER) and error.properties["matched"] == [spelled(KEEPS_RATIO)]
    assert error.message.startswith(
        f"The exported graph is only right at the example's sizes: at {spelled(TALLER)}, output 0 differs from eager"
    )
    assert f"It matched at {spelled(KEEPS_RATIO)}: the graph holds at some sizes only" in error.message
    assert result.kind == outcome.Kind.FAILED


def test_onnxruntime_failing_at_a_probed_size_fails_the_export():
    model, x = ResizeAndPad(), torch.randn(EXAMPLE)
    proto = unchecked(model, x, IMAGE).model_proto
    assert matches_eager(model, proto, KEEPS_RATIO)
    # the 16-pixel side is 27 > 20 in the graph: the paste (Expand or ScatterND, as capture spells its sizes) fails
    with pytest.raises(Exception, match="INVALID_ARGUMENT : Non-zero status code returned while running"):
        run_onnx_feeds(proto, {"x": torch.randn(*EXAMPLE[:2], *TALLER).numpy()})
    assert model(torch.randn(*EXAMPLE[:2], *TALLER)).shape == (1, 3, 20, 20)  # eager runs there

    error, result = failed_check(model, x, IMAGE)
    assert error.properties["sizes"] == spelled(TALLER)
    assert error.message.startswith(
        f"The exported graph fails in onnxruntime at {spelled(TALLER)} though the model runs eagerly there: "
        "InvalidArgument: Non-zero status code returned while running "
    )
    assert result.kind == outcome.Kind.FAILED and result.headline.startswith("Export of the model failed: FXE0020")


def test_a_branch_on_which_side_is_longer_fails_where_the_other_side_is():
    model, x = TallerOrWider(), torch.randn(EXAMPLE)
    proto = unchecked(model, x, IMAGE).model_proto
    assert matches_eager(model, proto, KEEPS_RATIO) and matches_eager(model, proto, TALLER)
    assert not matches_eager(model, proto, WIDER)

    error, _ = failed_check(model, x, IMAGE)
    assert error.properties["sizes"] == spelled(WIDER)
    assert error.properties["matched"] == [spelled(KEEPS_RATIO), spelled(TALLER)]
    assert "culprits" not in error.properties  # neither side alone: how they relate


def test_every_dimension_changes_and_the_ratio_changes_both_ways():
    """A graph right at every size: compared at all three sizes of the first family."""
    out = exporter.dynamo_export(
        Centered(), torch.randn(EXAMPLE), export_options=exporter.ExportOptions(dynamic_shapes=IMAGE)
    )
    (passed,) = [d for d in out.diagnostic_context.diagnostics if "secondSizeCheck" in d.properties]
    assert passed.level.name == "NOTE" and passed.properties["secondSizeCheck"] == "passed"
    assert passed.message == f"Second-size check passed at {'; '.join(map(spelled, (KEEPS_RATIO, TALLER, WIDER)))}."


def test_a_symbol_seen_only_through_a_derived_dimension_gets_another_size():
    """``2 * half``: the example's ``half`` is solved from the example (6 rows: 3), then probed."""
    half, x = Dim("half"), torch.randn(6, 4)
    out = exporter.dynamo_export(
        Pairs(), x, export_options=exporter.ExportOptions(dynamic_shapes={"x": {0: 2 * half, 1: Dim("c")}})
    )
    (passed,) = [d for d in out.diagnostic_context.diagnostics if "secondSizeCheck" in d.properties]
    # c (axis 1) 4 -> 4 + 3 (at least 3 more), or 5; half (axis 0) 3 -> 6 (3 more) or 4: the axes' steps differ
    assert passed.message == "Second-size check passed at c=7, half=6; c=5, half=6; c=7, half=4."
    other = torch.randn(12, 5)
    (actual,) = run_onnx_feeds(out.model_proto, {"x": other.numpy()})
    np.testing.assert_allclose(actual, other.reshape(6, 2, 5).sum(1).numpy(), rtol=1e-6, atol=1e-6)


custom = onnxscript.values.Opset("onnxlens.test", 1)


@onnxscript.script(custom)
def _relu_off_by_2e_3(self):
    """ReLU 0.002 too high: within a loose float32 tolerance, outside the default one."""
    return op.Add(op.Relu(self), op.Constant(value_float=0.002))


def test_the_check_takes_verifys_tolerances():
    registry = exporter.OnnxRegistry()
    registry.register_op(_relu_off_by_2e_3, "aten", "relu")
    x = torch.randn(4, 3)

    def export(**options):
        return exporter.dynamo_export(
            torch.nn.ReLU(),
            x,
            export_options=exporter.ExportOptions(dynamic_shapes=True, onnx_registry=registry, **options),
        )

    def second_size(export_output) -> list:
        found = export_output.diagnostic_context.diagnostics
        return [d for d in found if d.rule.id == "FXE0020" and d.level.name == "WARNING"]

    # off at every size, as a static graph is: numerics, not the dynamic shapes (a warning, not a refusal)
    (warning,) = second_size(export())
    assert "max abs error 0.002; atol 0.0001" in warning.message and warning.properties["secondSizeCheck"] == "numerics"
    assert second_size(export(verify_tolerances={"float32": (1e-2, 0.0)})) == []  # the same graph, nothing to say


class CountsPositions(torch.nn.Module):
    """Positions numbered from an attention mask, as GPT-2 numbers them, beside the tokens' values: nothing
    ties the mask's length to the sequence's for torch.export, though no caller gives them different."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(16, 4)

    def forward(self, mask, x):  # the mask first: its length is the second symbol, the sequence's the third
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        return x.mean(1) + self.table(positions).mean((1, 2))


def test_the_same_axis_of_two_inputs_is_probed_at_one_size():
    """The two lengths have a symbol each; the probes keep them equal (the same axis, equal at the example)
    and still change the ratio of a tensor's own axes."""
    torch.manual_seed(0)
    model, mask, x = CountsPositions(), torch.ones(2, 5, dtype=torch.int64), torch.randn(2, 5)
    mask[0, 3:] = 0
    out = exporter.dynamo_export(model, mask, x, export_options=exporter.ExportOptions(dynamic_shapes=True))
    (check,) = [d for d in out.diagnostic_context.diagnostics if "secondSizeCheck" in d.properties]
    assert check.properties["secondSizeCheck"] == "passed", check.message
    for probe in check.properties["sizes"].split("; "):
        sizes = dict(part.split("=") for part in probe.split(", "))
        assert sizes["mask_dim_1"] == sizes["x_dim_1"], probe
    other_mask, other_x = torch.ones(3, 8, dtype=torch.int64), torch.randn(3, 8)
    other_mask[1, 2:] = 0
    (actual,) = run_onnx_feeds(out.model_proto, {"mask": other_mask.numpy(), "x": other_x.numpy()})
    positions = torch.clamp(torch.cumsum(other_mask, 1) - 1, min=0)
    expected = other_x.mean(1) + model.table.weight.detach()[positions].mean((1, 2))
    np.testing.assert_allclose(actual, expected.numpy(), rtol=1e-5, atol=1e-6)


class FloorDivides(torch.nn.Module):
    """Floors n / 0.1 for whole numbers n >= 1: 10·n in onnxruntime, 10·n - 1 in PyTorch. No graph computes what
    eager does at any size, a static graph no more than the dynamic one (a stand-in for outputs that amplify
    float differences, as a detector's boxes rounded to whole pixels do)."""

    def forward(self, x):
        return (x.round().abs() + 1) // 0.1


def test_a_difference_a_static_graph_has_too_is_numerics_not_a_refusal():
    export_output = exporter.dynamo_export(
        FloorDivides(), torch.randn(EXAMPLE), export_options=exporter.ExportOptions(dynamic_shapes=IMAGE)
    )
    found = [
        d for d in export_output.diagnostic_context.diagnostics if d.properties.get("secondSizeCheck") == "numerics"
    ]
    (warning,) = found
    assert warning.rule.id == "FXE0020" and warning.level.name == "WARNING"
    assert re.match(
        rf"At {re.escape(spelled(KEEPS_RATIO))}, output 0 differs from eager PyTorch \(max abs error 1;",
        warning.message,
    )
    assert "A graph exported statically at those sizes differs as much" in warning.message
    assert not export_output.diagnostic_context.errors()


class ChecksOnlyEagerly(torch.nn.Module):
    """A size check that export skips (``torch.compiler.is_exporting()``, as transformers skips its checks while
    compiling): the graph comes out dynamic, and eager PyTorch refuses every length but the example's."""

    def forward(self, x):
        if not torch.compiler.is_exporting() and x.shape[1] != 8:
            raise ValueError(f"expected 8 positions, got {x.shape[1]}")
        return x.softmax(-1)


def test_a_model_eager_pytorch_runs_at_no_other_size_is_a_warning():
    """Nothing checked the dynamic dimension: a warning, where a note let the export pass for dynamic."""
    out = exporter.dynamo_export(
        ChecksOnlyEagerly(),
        torch.randn(2, 8),
        export_options=exporter.ExportOptions(dynamic_shapes={"x": {1: "length"}}),
    )
    (warning,) = [d for d in out.diagnostic_context.diagnostics if d.message.startswith("Second-size check")]
    assert warning.level.name == "WARNING"
    assert "(ValueError: expected 8 positions, got " in warning.message
    assert warning.message.endswith(
        "nor at the other sizes tried, so the dynamic dimensions are not checked: the model may take the example's "
        "sizes only."
    )
