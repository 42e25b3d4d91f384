"""Composite operators torch.export keeps whole (``x.to(...)``, ``mask_a & mask_b``, ``torch.min(a, b)``),
translated without a decomposition trace and compared with eager PyTorch in onnxruntime."""

from __future__ import annotations

import onnx.inliner
import pytest
import torch
from helpers import assert_matches_eager

import exporter
from exporter.capture.extractor import FXGraphExtractor
from exporter.diagnostics import DiagnosticContext
from exporter.passes import decompose
from exporter.translate.registry import default_registry


class Conversions(torch.nn.Module):
    """Every overload of ``Tensor.to`` torch.export keeps, with and without a dtype."""

    def forward(self, x, n):
        return (
            x.to(torch.int32),
            n.to(x.device, torch.float16),
            n.to(dtype=torch.float64, device=x.device),
            x.to(device=x.device) * 2,  # no dtype: the tensor itself
            n.to(x.dtype) + x,
        )


class Logic(torch.nn.Module):
    """Python's operators on tensors (``&``, ``|``, ``^``) and the two-tensor min/max overloads."""

    def forward(self, a, b, i, j):
        return a & b, a | b, a ^ b, i & j, i | j, i ^ j, torch.min(i, j), torch.max(i.float(), j.float())


def _cases():
    x, n = torch.randn(3, 4) * 10, torch.randint(-9, 9, (3, 4))
    a, b = torch.rand(2, 5) > 0.5, torch.rand(2, 5) > 0.5
    i, j = torch.randint(-8, 8, (2, 5)), torch.randint(-8, 8, (2, 5))
    return {
        "conversions": (Conversions(), (x, n), (torch.randn(5, 2) * 10, torch.randint(-9, 9, (5, 2)))),
        "logic": (
            Logic(),
            (a, b, i, j),
            (
                torch.rand(4, 1) > 0.5,
                torch.rand(4, 1) > 0.5,
                torch.randint(-8, 8, (4, 1)),
                torch.randint(-8, 8, (4, 1)),
            ),
        ),
    }


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("case", ["conversions", "logic"])
def test_composites_match_eager_without_decomposition(case, dynamic):
    model, args, other = _cases()[case]
    program = FXGraphExtractor().generate_fx(model, args, {}, dynamic_shapes=dynamic, ctx=DiagnosticContext())
    targets = {
        n.target._schema.name for n in program.graph.nodes if n.op == "call_function" and hasattr(n.target, "_schema")
    }
    assert (
        {"aten::to"} <= targets
        if case == "conversions"
        else {"aten::__and__", "aten::__or__", "aten::__xor__", "aten::min", "aten::max"} <= targets
    )
    assert decompose.untranslatable_targets(program, default_registry()) == set()
    export_output = exporter.dynamo_export(model, *args, export_options=exporter.ExportOptions(dynamic_shapes=dynamic))
    assert_matches_eager(export_output, model, args)
    if dynamic:
        assert_matches_eager(export_output, model, args, run_args=other)


@pytest.mark.parametrize("output_size", [(1, 1), (3, 3), (2, 5), (6, 4)], ids=str)
def test_adaptive_average_pooling_is_right_at_every_size(output_size):
    """Global, divisible and uneven windows; the dynamic export is run at a size whose windows differ."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.AdaptiveAvgPool2d(output_size))
    x = torch.randn(2, 3, 12, 10)
    program = FXGraphExtractor().generate_fx(model, (x,), {}, dynamic_shapes=True, ctx=DiagnosticContext())
    assert decompose.untranslatable_targets(program, default_registry()) == set()
    for dynamic in (False, True):
        export_output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(dynamic_shapes=dynamic))
        assert_matches_eager(export_output, model, (x,))
    assert_matches_eager(export_output, model, (x,), run_args=(torch.randn(3, 3, 15, 7),))


@pytest.mark.parametrize("output_size", [1, 3, 5], ids=str)
def test_adaptive_average_pooling_1d_is_right_at_every_size(output_size):
    """The pooling of Swin's and audio models' heads; batched and unbatched (channels, length) inputs."""
    model = torch.nn.AdaptiveAvgPool1d(output_size)
    for x, other in ((torch.randn(2, 4, 12), torch.randn(3, 4, 17)), (torch.randn(4, 12), torch.randn(4, 17))):
        program = FXGraphExtractor().generate_fx(model, (x,), {}, dynamic_shapes=True, ctx=DiagnosticContext())
        assert decompose.untranslatable_targets(program, default_registry()) == set()
        export_output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(dynamic_shapes=True))
        assert_matches_eager(export_output, model, (x,))
        assert_matches_eager(export_output, model, (x,), run_args=(other,))


class SizeArithmetic(torch.nn.Module):
    """Functions of symbolic sizes: a square window as large as the smaller side (Swin's
    ``min(window, resolution)``) padded to the larger, a mean by ``numel()``, a scale by ``float(h)``,
    the min and max of a size and a number."""

    def forward(self, x):
        h, w = x.shape[-2], x.shape[-1]
        side, pad = torch.sym_min(h, w), torch.sym_max(h, w)
        window = torch.nn.functional.pad(x[..., :side, :side], (0, pad - side, 0, pad - side))
        at_least_4, at_most_4 = torch.sym_max(h, 4), torch.sym_min(4, w)  # a size and a number (MPT)
        return window, x.sum() / x.numel(), x * torch.sym_float(h), x.new_zeros(at_least_4, at_most_4)


def test_functions_of_symbolic_sizes_translate():
    model, x = SizeArithmetic(), torch.randn(2, 5, 7)
    program = FXGraphExtractor().generate_fx(model, (x,), {}, dynamic_shapes=True, ctx=DiagnosticContext())
    assert {torch.sym_min, torch.sym_max, torch.sym_float, torch.ops.aten.sym_numel.default} <= {
        n.target for n in program.graph.nodes
    }
    export_output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(dynamic_shapes=True))
    for other in (x, torch.randn(3, 6, 4), torch.randn(1, 3, 3)):
        assert_matches_eager(export_output, model, (x,), run_args=(other,))


class Squeezes(torch.nn.Module):
    """``squeeze`` of given axes removes only those of size 1 (torchlib's fails on the others)."""

    def forward(self, x):
        return x.squeeze((0, 1)), x.squeeze(1), x.squeeze(-1), torch.atleast_3d(x[0]).squeeze(0), x.squeeze()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_squeeze_removes_only_axes_of_size_1(dynamic):
    x = torch.randn(1, 3, 1)
    export_output = exporter.dynamo_export(Squeezes(), x, export_options=exporter.ExportOptions(dynamic_shapes=dynamic))
    assert_matches_eager(export_output, Squeezes(), (x,))
    if dynamic:
        assert_matches_eager(export_output, Squeezes(), (x,), run_args=(torch.randn(1, 5, 1),))


class OrderStatistics(torch.nn.Module):
    """``median`` (the lower one, with its index) and ``kthvalue``, which torchlib does not translate."""

    def forward(self, x):
        by_row, third = x.median(1), x.kthvalue(3, 0, keepdim=True)
        return by_row.values, by_row.indices, x.median(), third.values, third.indices, x.median(-1, keepdim=True).values


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_order_statistics_match_eager(dynamic):
    x = torch.randn(4, 7)  # odd and even lengths: the lower median of an even count
    export_output = exporter.dynamo_export(
        OrderStatistics(), x, export_options=exporter.ExportOptions(dynamic_shapes=dynamic)
    )
    assert_matches_eager(export_output, OrderStatistics(), (x,))
    if dynamic:
        for other in (torch.randn(5, 8), torch.randn(3, 9)):
            assert_matches_eager(export_output, OrderStatistics(), (x,), run_args=(other,))


class GroupedMatmul(torch.nn.Module):
    """Mixture-of-experts matmul: rows sorted by expert, expert ``e``'s rows ending at ``offs[e]``."""

    def forward(self, x, weights, offs):
        return torch._grouped_mm(x, weights, offs=offs)


class GroupedMatmulFallback(torch.nn.Module):
    """transformers' own operator for the same (float32 on CPU and under torch.export)."""

    def forward(self, x, weights, offs):
        import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)

        return torch.ops.transformers.grouped_mm_fallback(x, weights, offs)


def _expected_grouped_mm(x, weights, offs):
    """Each expert's rows times its weights, by slicing; rows after the last offset are zeros."""
    rows, start = [], 0
    for e, end in enumerate(offs.tolist()):
        rows.append(x[start:end] @ weights[e])
        start = end
    return torch.cat([*rows, torch.zeros(x.shape[0] - start, weights.shape[2])])


@pytest.mark.parametrize(
    "model, dtype",
    [(GroupedMatmul(), torch.bfloat16), (GroupedMatmulFallback(), torch.float32)],
    ids=["aten", "transformers"],
)
def test_grouped_matmul_of_experts_follows_the_offsets_given_at_run_time(model, dtype):
    """torch.export takes ``_grouped_mm`` in bfloat16 only: onnx's reference evaluator runs that one
    (onnxruntime's CPU provider has no bfloat16 MatMul)."""
    torch.manual_seed(0)
    x, weights = torch.randn(7, 8, dtype=dtype), torch.randn(3, 8, 8, dtype=dtype)
    offs = torch.tensor([2, 2, 7], dtype=torch.int32)  # the middle expert gets no row
    assert torch.allclose(
        model(x, weights, offs).float(), _expected_grouped_mm(x.float(), weights.float(), offs), atol=5e-2
    )
    export_output = exporter.dynamo_export(
        model,
        x,
        weights,
        offs,
        export_options=exporter.ExportOptions(
            dynamic_shapes={"x": {0: torch.export.Dim("rows")}, "weights": None, "offs": None}
        ),
    )
    for run in [
        (x, weights, offs),
        (torch.randn(9, 8, dtype=dtype), weights, torch.tensor([0, 5, 9], dtype=torch.int32)),
    ]:
        assert_matches_eager(
            export_output,
            model,
            (x, weights, offs),
            run_args=run,
            reference=dtype == torch.bfloat16,
            atol=5e-2,
            rtol=2e-2,
        )
    if isinstance(
        model, GroupedMatmulFallback
    ):  # rows after the last offset are zeros (eager _grouped_mm leaves them unset)
        short = torch.tensor([1, 3, 5], dtype=torch.int32)
        assert_matches_eager(export_output, model, (x, weights, offs), run_args=(x, weights, short))


class AttentionOfAnyRank(torch.nn.Module):
    """``scaled_dot_product_attention`` on 5-D windows (Hiera's), 3-D and 4-D tensors, with a Boolean
    mask that broadcasts over the leading dimensions and a float (L, S) one; torchlib's takes 4-D only."""

    def forward(self, q, k, v, mask, bias):
        attention = torch.nn.functional.scaled_dot_product_attention
        return (
            attention(q, k, v),
            attention(q[0], k[0], v[0], is_causal=True),
            attention(q[:, 0, 0], k[:, 0, 0], v[:, 0, 0]),
            attention(q, k, v, attn_mask=mask),
            attention(q, k, v, attn_mask=bias, scale=0.3),
        )


def _attention_inputs(batch: int, queries: int, keys: int):
    torch.manual_seed(queries)
    q, k, v = torch.randn(batch, 3, 4, queries, 8), torch.randn(batch, 3, 4, keys, 8), torch.randn(batch, 3, 4, keys, 7)
    mask = torch.rand(3, 1, queries, keys) > 0.3
    mask[..., 0] = True  # no fully masked row
    return q, k, v, mask, torch.randn(queries, keys)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_attention_of_any_rank_matches_eager(dynamic):
    inputs = _attention_inputs(2, 5, 6)
    export_output = exporter.dynamo_export(
        AttentionOfAnyRank(), *inputs, export_options=exporter.ExportOptions(dynamic_shapes=dynamic)
    )
    assert_matches_eager(export_output, AttentionOfAnyRank(), inputs)
    if dynamic:
        assert_matches_eager(export_output, AttentionOfAnyRank(), inputs, run_args=_attention_inputs(3, 7, 9))


class GroupedQueryAttention(torch.nn.Module):
    """``enable_gqa``: each key/value head serves ``Hq / Hk`` query heads, 4-D and 5-D."""

    def forward(self, q, k, v):
        attention = torch.nn.functional.scaled_dot_product_attention
        return attention(q, k, v, enable_gqa=True, is_causal=True), attention(
            q[None], k[None], v[None], enable_gqa=True
        )


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_grouped_query_attention_with_head_counts_known_only_at_run_time(dynamic):
    """Under ``dynamic_shapes=True`` the head counts are symbolic too (torchlib's needs them known)."""
    q, k, v = torch.randn(2, 8, 5, 16), torch.randn(2, 2, 5, 16), torch.randn(2, 2, 5, 16)
    export_output = exporter.dynamo_export(
        GroupedQueryAttention(), q, k, v, export_options=exporter.ExportOptions(dynamic_shapes=dynamic)
    )
    assert_matches_eager(export_output, GroupedQueryAttention(), (q, k, v))
    if dynamic:  # 6 query heads on 3 key/value heads
        other = torch.randn(3, 6, 7, 16), torch.randn(3, 3, 7, 16), torch.randn(3, 3, 7, 16)
        assert_matches_eager(export_output, GroupedQueryAttention(), (q, k, v), run_args=other)


def test_adaptive_average_pooling_of_equal_windows_is_one_average_pool():
    """A static 12x12 map pooled to 3x3 or 4x6 is an AveragePool (as torch.onnx writes it), the same numbers."""
    for output_size in ((3, 3), (4, 6)):
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.AdaptiveAvgPool2d(output_size))
        x = torch.randn(2, 3, 12, 12)
        export_output = exporter.dynamo_export(model, x)
        graph = onnx.inliner.inline_local_functions(export_output.model_proto).graph
        assert [n.op_type for n in graph.node if "Pool" in n.op_type or n.op_type == "MatMul"] == ["AveragePool"]
        assert_matches_eager(export_output, model, (x,))
