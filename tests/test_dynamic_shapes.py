"""Dynamic shapes that say what they did (`exporter.capture.dynamic`, FXE0020): symbolic where asked, named as
asked, and every dimension the code fixed located at the line that fixed it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import sympy
import torch
from helpers import run_onnx_feeds
from torch.export import Dim
from torch.utils._sympy.functions import FloorDiv

import exporter
from exporter.capture import dynamic

HERE = __file__


class Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(x).softmax(-1)


class FixesWidth(torch.nn.Module):
    def forward(self, x):
        if x.shape[1] == 6:  # fixes dim 1
            x = x * 2
        return x.sum(1)


class SqueezesOne(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 1:  # true only at the example's size
            x = x.squeeze(0).unsqueeze(0)
        return torch.softmax(x @ x.T, -1)


class PairsFastPath(torch.nn.Module):
    """DINOv2's pattern: a table of 8 positions used as is when the pairs number 8 (``n // 2 == 8`` holds for
    n = 16 and 17, so torch.export can fix n to neither and keeps no condition), interpolated otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(8, 4))

    def forward(self, x):
        b, n, _ = x.shape
        pairs = x[:, : n - n % 2].reshape(b, n // 2, 2, 4).mean(2)
        if n // 2 == 8:  # the table's own size
            return pairs + self.table
        return pairs + torch.nn.functional.interpolate(self.table.T[None], size=n // 2).squeeze(0).T


class Doubled(torch.nn.Module):
    def forward(self, a, b):
        return torch.cat([a, a], 1) + b


def export(model, *args, spec, **options):
    return exporter.dynamo_export(model, *args, export_options=exporter.ExportOptions(dynamic_shapes=spec, **options))


def input_dims(export_output) -> dict[str, list]:
    return {
        i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
        for i in export_output.model_proto.graph.input
    }


def fxe0020(export_output) -> list:
    return [
        d for d in export_output.diagnostic_context.diagnostics if d.rule.id == "FXE0020" and "input" in d.properties
    ]


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(open(HERE).read().splitlines(), 1) if text in line)


def test_a_batch_1_example_keeps_the_batch_symbolic():
    model = Head()
    out = export(model, torch.randn(1, 4), spec=True)
    assert input_dims(out) == {"x": ["x_dim_0", 4]}
    x3 = torch.randn(3, 4)
    (actual,) = run_onnx_feeds(out.model_proto, {"x": x3.numpy()})
    np.testing.assert_allclose(
        actual, torch.softmax(x3 @ model.linear.weight.T + model.linear.bias, -1).detach().numpy(), rtol=1e-5, atol=1e-6
    )
    # The width is fixed by the weight: a note under dynamic_shapes=True, at the line that uses it.
    (note,) = fxe0020(out)
    assert note.level.name == "NOTE" and (
        note.properties["input"],
        note.properties["dim"],
        note.properties["size"],
    ) == ("x", 1, 4)
    assert (note.stack[0].path, note.stack[0].line) == (HERE, line_of("return self.linear(x).softmax(-1)"))


class SqueezesTheBatch(torch.nn.Module):
    def forward(self, x):
        return x.squeeze(0) * 2  # batch 1 in, no batch out


def test_a_squeezed_size_1_is_static_and_located():
    """Size-oblivious capture takes a symbolic size for not 1, so the squeeze would remove nothing
    even at the example's size: that dimension is captured static, as torch.export does."""
    x = torch.randn(1, 3)
    out = export(SqueezesTheBatch(), x, spec=True)
    assert input_dims(out) == {"x": [1, "x_dim_1"]}
    (actual,) = run_onnx_feeds(out.model_proto, {"x": x.numpy()})
    assert actual.shape == (3,)
    np.testing.assert_allclose(actual, (x.squeeze(0) * 2).numpy())
    (note,) = fxe0020(out)
    assert (note.properties["input"], note.properties["dim"], note.properties["size"]) == ("x", 0, 1)
    assert (note.stack[0].path, note.stack[0].line) == (HERE, line_of("return x.squeeze(0) * 2"))


def test_a_dimension_the_code_fixes_is_a_warning_at_that_line():
    out = export(FixesWidth(), torch.randn(2, 6), spec={"x": {0: Dim("batch"), 1: Dim.AUTO}})
    assert input_dims(out) == {"x": ["batch", 6]}
    (warning,) = fxe0020(out)
    assert warning.level.name == "WARNING"
    assert warning.message == (
        "`if x.shape[1] == 6:` fixes dimension 1 of input 'x' to 6: the exported graph "
        "accepts only that size there, though the dimension was asked to be dynamic."
    )
    assert (warning.stack[0].path, warning.stack[0].line) == (HERE, line_of("if x.shape[1] == 6:"))
    assert warning.properties["requested"] == "DimHint(AUTO)"


def test_an_equality_torch_export_drops_is_a_warning_at_its_line():
    model = PairsFastPath()
    with pytest.raises(exporter.OnnxExporterError, match="FXE0020 The exported graph fails in onnxruntime at"):
        export(model, torch.randn(2, 17, 4), spec=True)  # the second-size check finds what it means
    out = export(model, torch.randn(2, 17, 4), spec=True, second_size_check=False)
    assert input_dims(out) == {"x": ["x_dim_0", "x_dim_1", 4]}  # n symbolic, though the graph needs n // 2 == 8
    (warning,) = [d for d in out.diagnostic_context.diagnostics if "assumption" in d.properties]
    assert warning.level.name == "WARNING" and (warning.stack[0].path, warning.stack[0].line) == (
        HERE,
        line_of("if n // 2 == 8:"),
    )
    assert warning.message.startswith(
        "`if n // 2 == 8:` assumes (x_dim_1//2) == 8, which torch.export neither keeps nor checks: the exported "
        "graph is right only at sizes where it holds."
    )
    every_size = export(
        model, torch.randn(2, 21, 4), spec=True
    )  # an example where it is false: the second-size check passes
    assert not [d for d in every_size.diagnostic_context.diagnostics if "assumption" in d.properties]


def test_strict_capture_locates_the_fixing_line_too():
    model, x = FixesWidth(), torch.randn(2, 6)
    with dynamic.capturing(True, False) as fixed:
        torch.export.export(model, (x,), dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}}, strict=True)
    (found,) = [s for s in fixed if s.matches("x", 0, 1)]
    assert found.value == 6 and (found.stack[0].path, found.stack[0].line) == (HERE, line_of("if x.shape[1] == 6:"))


def test_a_size_1_the_code_fixes_is_static_and_located_not_kept_symbolic():
    """Size-oblivious capture takes the branch of ``x.shape[0] == 1`` yet keeps the dim symbolic: the
    graph would be wrong at any other batch. The capture falls back to torch.export's, which fixes it."""
    out = export(SqueezesOne(), torch.randn(1, 6), spec=True)
    assert input_dims(out) == {"x": [1, "x_dim_1"]}
    (note,) = fxe0020(out)
    assert note.properties == {"input": "x", "dim": 0, "size": 1, "requested": "dynamic_shapes=True", "argument": 0}
    assert (note.stack[0].path, note.stack[0].line) == (HERE, line_of("if x.shape[0] == 1:"))
    assert note.message.startswith("`if x.shape[0] == 1:` fixes dimension 0 of input 'x' to 1, the example's size")
    x = torch.randn(1, 9)
    (actual,) = run_onnx_feeds(out.model_proto, {"x": x.numpy()})
    np.testing.assert_allclose(actual, SqueezesOne()(x).numpy(), rtol=1e-5, atol=1e-6)


class AttendsToPast(torch.nn.Module):
    """Eager attention over a cache: PyTorch's own matmul reshapes the transposed query and guards
    "seq != 1" under size-oblivious capture (a past of 1 in the example), which a named Dim whose
    range holds 1 turned into a refusal, though the graph is right at every size."""

    def forward(self, x, past):
        q = x.view(x.shape[0], x.shape[1], 4, 8).transpose(1, 2)
        k = torch.cat([past, q], dim=2)
        return torch.matmul(q, k.transpose(2, 3)).softmax(-1)


def test_guards_of_sizes_0_and_1_that_hold_at_the_example_are_assumptions_noted_and_checked():
    x, past = torch.randn(2, 3, 32), torch.randn(2, 4, 1, 8)
    out = export(AttendsToPast(), x, past, spec={"x": {1: Dim("seq", min=1)}, "past": {2: Dim("past", min=0)}})
    assumptions = [
        d.message for d in out.diagnostic_context.diagnostics if d.rule.id == "FXE0020" and "assumption" in d.properties
    ]
    assert (
        "The graph assumes seq >= 2: torch.export could not show that the model's code allows every size the dynamic shapes do, and the exported graph does not check it."
        in assumptions  # "seq != 1" of a Dim from 1 on
    )
    for seq, length in [(1, 0), (1, 5), (4, 0), (7, 2)]:  # right where the assumptions do not hold too
        run = torch.randn(2, seq, 32), torch.randn(2, 4, length, 8)
        actual = run_onnx_feeds(out.model_proto, {"x": run[0].numpy(), "past": run[1].numpy()})[0]
        np.testing.assert_allclose(actual, AttendsToPast()(*run).numpy(), rtol=1e-4, atol=1e-5)


def test_assumptions_that_keep_sizes_to_a_set_are_no_bounds():
    h, w, past, new, total = sympy.symbols("h w past new total", integer=True, positive=True)
    assert dynamic.bounds_only([sympy.Ge(h, 33), sympy.Ne(new, 1), sympy.Le(new, total)])
    assert not dynamic.bounds_only([sympy.Ge(h, 33), sympy.Eq(h, 224)])
    assert not dynamic.bounds_only([sympy.Eq(FloorDiv(h, 2) * FloorDiv(w, 2), 16)])  # LeViT's patches
    # a KV cache's sizes kept symbolic at 0/1 relate the dimensions (BLOOM's mask, MPT's context bound) …
    assert dynamic.bounds_only([sympy.Eq(total, past + new)], relations=True)
    assert dynamic.bounds_only([sympy.Eq(past + new + sympy.Max(0, 256 - past - new), 256)], relations=True)
    window = sympy.Max(0, sympy.Min(256, past + new) - past)
    assert dynamic.bounds_only([sympy.Eq(sympy.Mod(64 * past * window, 64 * new), 0)], relations=True)  # GPT-Neo's
    # … but still keep no one dimension to a set (LongT5's blocks)
    assert not dynamic.bounds_only([sympy.Ge(h, 5), sympy.Eq(sympy.Mod(h, 5), 0)], relations=True)


class StridedResidual(torch.nn.Module):
    """ResNet's downsampling block: PyTorch checks that the strided sizes, ``(n - 1) // 2 + 1``, are not 1
    before adding the branches, which refused a named Dim of the height of any CNN with strides ("fixes
    dimension 2 … torch.export suggests: make the dimension static", a suggestion torch never made)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.skip = torch.nn.Conv2d(3, 4, 1, stride=2)
        self.norm = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)) + self.skip(x)).mean((2, 3))


def assumed(export_output) -> list[str]:
    return [
        d.message.split(":")[0]
        for d in export_output.diagnostic_context.diagnostics
        if d.rule.id == "FXE0020" and "assumption" in d.properties
    ]


def test_a_cnn_with_strides_exports_with_dynamic_height_and_width_its_bounds_noted():
    model = StridedResidual().eval()
    out = export(model, torch.randn(2, 3, 20, 24), spec={"x": {2: "height", 3: "width"}}, verify=True)
    assert input_dims(out) == {"x": [2, 3, "height", "width"]}
    # (n - 1) // 2 + 1 != 1 holds from n = 3 on: one bound per dimension, not PyTorch's five conditions each
    assert sorted(assumed(out)) == ["The graph assumes height >= 3", "The graph assumes width >= 3"]
    assert not out.diagnostic_context.errors()
    for height, width in [(3, 3), (5, 40), (64, 7), (2, 1)]:  # right below the bound too
        x = torch.randn(2, 3, height, width)
        (actual,) = run_onnx_feeds(out.model_proto, {"x": x.numpy()})
        np.testing.assert_allclose(actual, model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


class BranchesOnLength(torch.nn.Module):
    def forward(self, x):
        if x.shape[1] > 100:  # narrows the length to 101 and more
            return x * 2
        return x - 1


def test_a_branch_on_a_size_that_narrows_its_range_is_a_warning_at_the_line():
    """torch.export keeps the length symbolic from 101 on: the graph computes ``x * 2`` at every length, which the
    second-size check (at sizes in the range) cannot see."""
    out = export(BranchesOnLength(), torch.randn(2, 128), spec=True)
    (warning,) = [d for d in out.diagnostic_context.diagnostics if d.rule.id == "FXE0020" and d.level.name == "WARNING"]
    assert warning.message == (
        "`if x.shape[1] > 100:` narrows x_dim_1 to sizes >= 101: the exported graph is right only for those, "
        "and does not check it."
    )
    assert (warning.stack[0].path, warning.stack[0].line) == (HERE, line_of("if x.shape[1] > 100:"))
    assert warning.properties["range"] == ">= 101"
    wide = export(BranchesOnLength(), torch.randn(2, 128), spec={"x": {1: Dim("length", min=101)}})
    assert not [d for d in wide.diagnostic_context.diagnostics if d.level.name == "WARNING"]  # the range asked for


def test_a_named_dim_the_code_narrows_is_refused_with_the_range_torch_suggests():
    with pytest.raises(exporter.OnnxExporterError) as info:
        export(BranchesOnLength(), torch.randn(2, 128), spec={"x": {1: "length"}})
    (error,) = [d for d in info.value.export_output.diagnostic_context.errors() if d.rule.id == "FXE0020"]
    assert error.message == (
        "`if x.shape[1] > 100:` allows only some sizes of dimension 1 of input 'x', but it is declared dynamic as "
        "Dim('length'). torch.export suggests: length = Dim('length', min=101)."
    )
    assert (error.stack[0].path, error.stack[0].line) == (HERE, line_of("if x.shape[1] > 100:"))


class StridedKernels(torch.nn.Module):
    """A 5x5 convolution of stride 2, then a 3x3 pooling: PyTorch's checks of their sizes need 9 pixels and more."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 5, stride=2)
        self.pool = torch.nn.MaxPool2d(3)

    def forward(self, x):
        return self.pool(self.conv(x)).mean((2, 3))


def test_a_named_dim_that_pytorchs_checks_bound_exports_with_the_bound_noted():
    """torch.export refuses the named Dims ("Constraints violated", suggesting ``Dim('height', min=9)``): no
    line of the model narrows them, the kernels do, so the export keeps them dynamic in that range."""
    model = StridedKernels().eval()
    out = export(model, torch.randn(2, 3, 40, 48), spec={"x": {2: "height", 3: "width"}}, verify=True)
    assert input_dims(out) == {"x": [2, 3, "height", "width"]}
    notes = sorted(d.message for d in out.diagnostic_context.diagnostics if " narrow " in d.message)
    assert notes == [
        f"PyTorch's checks of the model's code narrow {name} to sizes >= 9: the exported graph is right only for "
        "those, and does not check it."
        for name in ("height", "width")
    ]  # (n - 5) // 2 + 1 >= 3
    assert not out.diagnostic_context.errors()
    for height, width in [(9, 9), (13, 50)]:
        x = torch.randn(2, 3, height, width)
        (actual,) = run_onnx_feeds(out.model_proto, {"x": x.numpy()})
        np.testing.assert_allclose(actual, model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


class FixedPatches(torch.nn.Module):
    """LeViT's pattern: a table of 16 positions added to the patches of a strided convolution, so the patches
    must number 16 (``((h - 1)//2 + 1) * ((w - 1)//2 + 1) == 16``), which no size of height alone can say."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.positions = torch.nn.Parameter(torch.randn(1, 8, 16))

    def forward(self, x):
        return (self.embed(x).flatten(2) + self.positions).softmax(-1)


def test_guards_that_keep_sizes_to_a_set_are_no_assumptions():
    """Captured with the guards as assertions, the graph would assume the patches number 16 and come out
    "dynamic" in height and width (LeViT did, with 60 notes): the named Dims are refused instead."""
    with pytest.raises(exporter.OnnxExporterError) as info:
        export(FixedPatches(), torch.randn(2, 3, 8, 8), spec={"x": {2: "height", 3: "width"}})
    (error,) = [d for d in info.value.export_output.diagnostic_context.errors() if d.rule.id == "FXE0020"]
    assert error.message.startswith("The model's code fixes dimension 2 of input 'x', but it is declared dynamic")
    assert not [d for d in info.value.export_output.diagnostic_context.diagnostics if "assumption" in d.properties]


def test_a_guard_false_at_the_example_is_no_assumption():
    """With the example's sequence of 1, "seq != 1" would make the graph wrong at the example itself:
    torch.export fixes the dimension instead, and the named Dim is refused."""
    with pytest.raises(exporter.OnnxExporterError) as info:
        export(
            AttendsToPast(),
            torch.randn(2, 1, 32),
            torch.randn(2, 4, 3, 8),
            spec={"x": {1: Dim("seq", min=1)}, "past": {2: Dim("past", min=0)}},
        )
    diagnostics = info.value.export_output.diagnostic_context.diagnostics
    assert any(
        d.message.startswith("torch.export(strict=False) keeping sizes 0/1 symbolic, guards as assertions failed")
        for d in diagnostics
    )
    (error,) = [d for d in info.value.export_output.diagnostic_context.errors() if d.rule.id == "FXE0020"]
    assert error.message.endswith("declared dynamic as Dim('seq'). torch.export suggests: seq = 1.")


def test_where_the_example_gives_each_input():
    def f(a, b, *, mask=None):
        return a

    assert dynamic.arguments(f, (torch.ones(1), 3), {"mask": torch.ones(2)}) == {"a": 0, "mask": "mask"}
    assert dynamic.arguments(Head(), (), {"x": torch.ones(1, 4)}) == {"x": "x"}


def test_a_named_dim_the_code_fixes_is_a_located_error_with_the_suggested_fix():
    with pytest.raises(exporter.OnnxExporterError) as info:
        export(FixesWidth(), torch.randn(2, 6), spec={"x": {0: Dim("batch"), 1: Dim("seq")}})
    (error,) = [d for d in info.value.export_output.diagnostic_context.errors() if d.rule.id == "FXE0020"]
    assert error.message == (
        "`if x.shape[1] == 6:` fixes dimension 1 of input 'x' to 6, but it is declared "
        "dynamic as Dim('seq'). torch.export suggests: seq = 6."
    )
    assert error.properties["suggestedFixes"] == ["seq = 6"]
    assert error.properties["dynamicShapes"] == {"x": {"0": "batch", "1": "seq"}} and error.properties["argument"] == 0
    assert (error.stack[0].path, error.stack[0].line) == (HERE, line_of("if x.shape[1] == 6:"))


def test_named_and_derived_dims_name_the_graph_inputs_and_outputs():
    seq = Dim("seq")
    a, b = torch.randn(2, 3), torch.randn(2, 6)
    out = export(Doubled(), a, b, spec={"a": {0: Dim("batch"), 1: seq}, "b": {0: Dim("batch"), 1: 2 * seq}})
    assert input_dims(out) == {"a": ["batch", "seq"], "b": ["batch", "2*seq"]}
    assert [
        [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in out.model_proto.graph.output
    ] == [["batch", "2*seq"]]
    (summary,) = [
        d for d in out.diagnostic_context.diagnostics if d.rule.id == "FXE0020" and d.message.startswith("Symbolic")
    ]
    assert summary.message == "Symbolic dimensions of the graph: 2*seq, batch, seq."
    a5, b5 = torch.randn(3, 5), torch.randn(3, 10)
    (actual,) = run_onnx_feeds(out.model_proto, {"a": a5.numpy(), "b": b5.numpy()})
    np.testing.assert_allclose(actual, (torch.cat([a5, a5], 1) + b5).numpy(), rtol=1e-6)


def test_settings_spell_dims_as_strings():
    out = export(FixesWidth(), torch.randn(2, 6), spec={"x": {"0": "batch", "1": "static"}})
    assert input_dims(out) == {"x": ["batch", 6]} and fxe0020(out) == []  # static as asked: nothing to report
    options = exporter.ExportOptions.from_settings({"dynamic_shapes": {"x": {"0": "batch"}}})
    assert options.dynamic_shapes == {"x": {"0": "batch"}}
    with pytest.raises(ValueError, match="must be true or false or a dynamic shapes spec"):
        exporter.ExportOptions.from_settings({"dynamic_shapes": "yes"})


def test_the_onnx_model_is_valid_with_expression_dims():
    seq = Dim("seq")
    out = export(Doubled(), torch.randn(2, 3), torch.randn(2, 6), spec={"a": {1: seq}, "b": {1: 2 * seq}})
    onnx.checker.check_model(out.model_proto, full_check=True)


class AdaptivePool(torch.nn.Module):
    """PyTorch's decomposition of 3-D adaptive max pooling keeps the example's windows: right only at the
    example's size (1-D and 2-D adaptive pooling have translations of their own, right at every size)."""

    def forward(self, x):
        return torch.nn.functional.adaptive_max_pool3d(x, (3, 3, 3))


def second_size_results(export_output) -> list:
    return [d for d in export_output.diagnostic_context.diagnostics if "secondSizeCheck" in d.properties]


def test_the_second_size_check_fails_a_graph_right_only_at_the_example_size():
    with pytest.raises(exporter.OnnxExporterError) as info:
        export(AdaptivePool(), torch.randn(1, 2, 12, 12, 12), spec=True)
    (error,) = second_size_results(info.value.export_output)
    assert error.level.name == "ERROR" and error.properties["secondSizeCheck"] == "failed"
    assert error.message.startswith(
        "The exported graph is only right at the example's sizes: at x_dim_0=4, x_dim_1=5, x_dim_2=19, x_dim_3=19"
    )  # 3 more at least: 1 + 3, 2 + 3, 12 + (12 // 2 | 1)


class PatchPositions(torch.nn.Module):
    """Position embeddings of a 4x4 patch grid, interpolated only for another grid (as ViT-style models
    do): torch.export drops the branch's guard, so the graph adds the 4x4 table at any size."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = torch.nn.Conv2d(3, 8, 4, stride=4)
        self.pos = torch.nn.Parameter(torch.randn(1, 8, 4, 4))

    def forward(self, x):
        y = self.patch(x)
        if y.shape[-2:] == self.pos.shape[-2:]:
            return y + self.pos
        return y + torch.nn.functional.interpolate(self.pos, size=y.shape[-2:], mode="bilinear")


def test_the_second_size_check_changes_sizes_seen_through_a_stride():
    torch.manual_seed(0)
    model, x = PatchPositions().eval(), torch.randn(2, 3, 16, 16)
    unchecked = exporter.dynamo_export(
        model, x, export_options=exporter.ExportOptions(dynamic_shapes=True, second_size_check=False)
    )
    for size in (16, 17, 18, 19):  # one pixel more still makes a 4x4 grid: the wrong graph looks right
        other = torch.randn(2, 3, size, size)
        (actual,) = run_onnx_feeds(unchecked.model_proto, {"x": other.numpy()})
        np.testing.assert_allclose(actual, model(other).detach().numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(exporter.OnnxExporterError) as info:
        export(model, x, spec=True)
    (error,) = second_size_results(info.value.export_output)
    assert (
        error.level.name == "ERROR" and error.properties["sizes"] == "x_dim_0=5, x_dim_2=25, x_dim_3=25"
    )  # 2 + 3 (3 more at least), 16 + (16 // 2 | 1)
    # each side alone breaks the graph, the batch does not: the message says which to keep static
    assert error.properties["culprits"] == ["x_dim_2", "x_dim_3"]
    assert error.message.endswith(
        "Changed one at a time, x_dim_2, x_dim_3 make it wrong and x_dim_0 does not: "
        "keep x_dim_2, x_dim_3 at the example's size (static in dynamic_shapes)."
    )


class HalvedAndDoubled(torch.nn.Module):
    """Runs only at even heights and widths (pooled by 2, scaled back, added to the input)."""

    def forward(self, x):
        return x + torch.nn.functional.interpolate(torch.nn.functional.avg_pool2d(x, 2), scale_factor=2.0)


def test_the_second_size_check_tries_twice_the_size_where_the_model_needs_it():
    (passed,) = second_size_results(export(HalvedAndDoubled(), torch.randn(1, 2, 6, 6), spec=True))
    assert (
        passed.level.name == "NOTE"
        and passed.message
        == "Second-size check passed at x_dim_0=2, x_dim_1=4, x_dim_2=12, x_dim_3=12; "
        "x_dim_0=2, x_dim_1=6, x_dim_2=12, x_dim_3=18; x_dim_0=3, x_dim_1=4, x_dim_2=18, x_dim_3=12."
    )  # twice the example's, and twice or three times (neighbouring dimensions the other way)


def test_the_second_size_check_passes_a_dynamic_graph_and_can_be_turned_off():
    (passed,) = second_size_results(export(Head(), torch.randn(2, 4), spec=True))
    assert passed.level.name == "NOTE" and passed.message == "Second-size check passed at x_dim_0=5; x_dim_0=3."
    options = exporter.ExportOptions(dynamic_shapes=True, second_size_check=False)
    assert (
        second_size_results(
            exporter.dynamo_export(AdaptivePool(), torch.randn(1, 2, 12, 12, 12), export_options=options)
        )
        == []
    )


def test_a_size_fixed_in_a_librarys_model_code_is_named_with_its_file_and_line():
    """LongT5's local attention (transformers' code, no line of the user's) fixes the sequence length: the refusal
    names that line and its file, not "The model's code". The ids are fixed with no frame at all (torch.export
    solving the guards at the end): they share the place of the mask they are tied to."""
    import inspect

    import transformers
    from transformers.models.longt5 import modeling_longt5

    config = transformers.LongT5Config(
        d_model=32, d_ff=64, d_kv=8, num_layers=1, num_heads=4, local_radius=4, vocab_size=64
    )
    model = transformers.LongT5EncoderModel(config).eval()
    ids, mask = torch.randint(0, 64, (1, 5)), torch.ones(1, 5, dtype=torch.long)
    with pytest.raises(exporter.OnnxExporterError) as info:
        export(model, ids, mask, spec={"input_ids": {1: "length"}, "attention_mask": {1: "length"}})
    (error,) = [d for d in info.value.export_output.diagnostic_context.errors() if d.rule.id == "FXE0020"]
    lines, first = inspect.getsourcelines(modeling_longt5._get_local_attention_mask)
    (line,) = [first + i for i, text in enumerate(lines) if "= torch.logical_and(_blocked_attention_mask" in text]
    assert error.message.startswith(
        "`local_attention_mask = torch.logical_and(_blocked_attention_mask, _3blocked_attention_mask)` "
        f"(transformers/models/longt5/modeling_longt5.py:{line}) fixes dimension 1 of input 'input_ids' to 5, "
    )
    assert not error.stack  # the editor's locations stay in the user's files
