"""The ops torchlib does not translate (issue 31): cdist, searchsorted/bucketize, cumprod, erfinv,
cummax/cummin, signbit, adaptive max pooling, masked_select, lgamma/digamma, i0 and the Kaiser window. Each is exported whole (no decomposition), static and
with dynamic shapes, and compared with eager PyTorch in onnxruntime over edge values (zeros, negatives,
ties, ±inf, NaN where the op defines them, empty tensors), the dynamic export also at a second size."""

from __future__ import annotations

import inspect
import math

import onnx.inliner
import pytest
import torch
from helpers import assert_case_matches_eager, assert_matches_eager, run_onnx_feeds

import exporter
from exporter.capture.extractor import FXGraphExtractor
from exporter.diagnostics import DiagnosticContext
from exporter.passes import decompose
from exporter.translate.registry import default_registry

INF, NAN = math.inf, math.nan


def _points(rows: int, features: int = 3) -> torch.Tensor:
    """Points with zeros, negatives and a repeated row (distance 0 to its twin)."""
    x = torch.randn(2, rows, features)
    x[:, 0] = 0.0
    x[:, -1] = x[:, 1]
    return x


def _sorted(shape) -> torch.Tensor:
    """A sorted sequence (sorted rows) of integers, with repeats."""
    return torch.sort(torch.randint(-4, 5, shape if isinstance(shape, tuple) else (shape,)).float(), dim=-1).values


def _probes(shape) -> torch.Tensor:
    """Values to look up: exact ties with the sequence (integers), between them, ±inf and NaN."""
    v = torch.randint(-5, 6, shape).float() + torch.randint(0, 2, shape) * 0.5
    v.view(-1)[:3] = torch.tensor([INF, -INF, NAN])
    return v


def _ragged(shape) -> torch.Tensor:
    """Zeros, negatives, ties and ±inf."""
    x = torch.randint(-3, 4, shape).float()
    x.view(-1)[:2] = torch.tensor([INF, -INF])
    return x


def _with_nan(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x.view(-1)[x.numel() // 2] = NAN
    return x


def _cases():
    """name → (function, export inputs, second-size inputs, atol)."""
    torch.manual_seed(0)
    erfinv_edges = torch.tensor([-1.5, -1.0, -0.9999999, -0.5, -0.0, 0.0, 1e-30, 0.3, 0.999, 1.0, 2.0, NAN])
    # poles and zeros of either sign, the reflection's and the shift's edges, the zero of ψ, ±inf, NaN, huge
    gamma_edges = torch.tensor(
        [0.0, -0.0, -1.0, -2.0, -2.5, 0.4999, 0.5, 1.0, 1.4616321, 2.0, 7.99, 8.0, 1e-30, 1e30, -30.5, INF, -INF, NAN]
    )
    i0_edges = torch.tensor([0.0, -0.0, 3.75, -3.7499, 3.7501, 20.0, -88.0, 100.0, 1e30, INF, -INF, NAN])
    return {
        "cdist_p2_direct": (lambda a, b: torch.cdist(a, b), (_points(5), _points(4)), (_points(7), _points(6)), 1e-4),
        "cdist_p2_mm": (
            lambda a, b: torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
            (torch.randn(2, 5, 3), torch.randn(2, 4, 3)),
            (torch.randn(3, 8, 3), torch.randn(3, 2, 3)),
            1e-4,
        ),
        "cdist_p2_large": (
            lambda a, b: torch.cdist(a, b),
            (torch.randn(1, 30, 4), torch.randn(1, 27, 4)),
            (torch.randn(2, 33, 4), torch.randn(2, 26, 4)),
            1e-4,
        ),
        "cdist_p2_no_mm": (
            lambda a, b: torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist"),
            (_points(30), _points(4)),
            (_points(31), _points(6)),
            1e-5,
        ),
        "cdist_p1": (lambda a, b: torch.cdist(a, b, p=1), (_points(5), _points(4)), (_points(7), _points(6)), 1e-5),
        "cdist_pinf": (lambda a, b: torch.cdist(a, b, p=INF), (_points(5), _points(4)), (_points(7), _points(6)), 1e-5),
        "cdist_p0": (lambda a, b: torch.cdist(a, b, p=0), (_points(5), _points(4)), (_points(7), _points(6)), 1e-5),
        "cdist_p3_5": (lambda a, b: torch.cdist(a, b, p=3.5), (_points(5), _points(4)), (_points(7), _points(6)), 1e-5),
        "searchsorted_left_1d": (
            lambda s, v: torch.searchsorted(s, v),
            (_sorted(9), _probes((3, 4))),
            (_sorted(12), _probes((2, 5))),
            0,
        ),
        "searchsorted_right_rows": (
            lambda s, v: torch.searchsorted(s, v, right=True, out_int32=True),
            (_sorted((3, 8)), _probes((3, 5))),
            (_sorted((2, 11)), _probes((2, 3))),
            0,
        ),
        "searchsorted_side_sorter": (
            lambda s, v, order: torch.searchsorted(s, v, side="right", sorter=order),
            (torch.tensor([[3.0, -1.0, 2.0, 2.0, 0.0]] * 2), _probes((2, 6)), torch.tensor([[1, 4, 2, 3, 0]] * 2)),
            (torch.tensor([[5.0, 1.0, -2.0, 1.0]] * 3), _probes((3, 2)), torch.tensor([[2, 1, 3, 0]] * 3)),
            0,
        ),
        "searchsorted_scalar": (lambda s: torch.searchsorted(s, 0.5), (_sorted(7),), (_sorted(10),), 0),
        "bucketize": (
            lambda v, b: (torch.bucketize(v, b), torch.bucketize(v, b, right=True, out_int32=True)),
            (_probes((4, 3)), _sorted(6)),
            (_probes((2, 7)), _sorted(9)),
            0,
        ),
        "cumprod_zeros_negatives": (
            lambda x: torch.cumprod(x, 1),
            (_ragged((2, 6, 3)),),
            (_ragged((3, 4, 2)),),
            1e-5,
        ),
        "cumprod_last_dim_dtype": (
            lambda x: torch.cumprod(x, -1, dtype=torch.float64),
            (_with_nan(_ragged((3, 5))),),
            (_ragged((2, 7)),),
            1e-5,
        ),
        "cumprod_int32": (
            lambda x: torch.cumprod(x, 0),
            (torch.randint(-3, 4, (5, 2), dtype=torch.int32),),
            (torch.randint(-3, 4, (7, 3), dtype=torch.int32),),
            0,
        ),
        "erfinv": (lambda x: torch.special.erfinv(x), (erfinv_edges,), (torch.linspace(-1, 1, 41),), 1e-5),
        "gamma_functions": (
            lambda x: (torch.lgamma(x), torch.special.gammaln(x), torch.digamma(x), torch.special.psi(x)),
            (gamma_edges,),
            (torch.linspace(-9.75, 30, 160),),
            1e-5,
        ),
        "i0": (lambda x: (torch.special.i0(x), x.i0()), (i0_edges,), (torch.linspace(-40, 40, 161),), 1e-5),
        "kaiser_window": (
            lambda x: (
                x * torch.kaiser_window(8, True, 6.0),
                torch.kaiser_window(7, periodic=False),
                torch.kaiser_window(1),
            ),
            (torch.randn(3, 8),),
            (torch.randn(5, 8),),
            1e-6,
        ),
        "erfinv_tensor_method": (
            lambda x: x.erfinv() * 2,
            (torch.rand(3, 4) * 2 - 1,),
            (torch.rand(5, 2) * 2 - 1,),
            1e-5,
        ),
        "cummax_ties_nan": (lambda x: torch.cummax(x, 1), (_with_nan(_ragged((2, 7))),), (_ragged((3, 9)),), 0),
        "cummin_ties_nan": (lambda x: torch.cummin(x, 0), (_with_nan(_ragged((6, 3))),), (_ragged((8, 2)),), 0),
        "cummax_int": (
            lambda x: torch.cummax(x, -1),
            (torch.randint(-2, 3, (3, 8)),),
            (torch.randint(-2, 3, (2, 5)),),
            0,
        ),
        "signbit": (
            lambda x, n: (torch.signbit(x), torch.signbit(n)),
            (torch.tensor([-0.0, 0.0, -1.5, 2.0, -INF, INF, NAN, 1e-40, -1e-40]), torch.tensor([-3, 0, 4])),
            (torch.tensor([0.0, -0.0, -2.0, 3.0, -INF]), torch.tensor([5, -1, 0, -7])),
            0,
        ),
        "masked_select_broadcast": (
            lambda x, m, s: (torch.masked_select(x, m), torch.masked_select(x, x > 0), torch.masked_select(s, m)),
            (_with_nan(_ragged((3, 4))), torch.rand(4) > 0.5, torch.tensor(2.5)),
            (_ragged((5, 2)), torch.tensor([True, False]), torch.tensor(-1.0)),
            0,
        ),
        "masked_select_none_and_all": (
            lambda x: (
                torch.masked_select(x, x > INF),
                torch.masked_select(x, x == x),
                torch.masked_select(x[:0], x[:0] > 0),
            ),
            (_ragged((2, 3, 4)),),
            (_ragged((3, 1, 2)),),
            0,
        ),
        "adaptive_max_pool2d": (
            torch.nn.AdaptiveMaxPool2d((2, 3), return_indices=True),
            (_with_nan(_ragged((1, 2, 7, 9))),),
            (_ragged((2, 2, 10, 5)),),
            0,
        ),
        "adaptive_max_pool2d_unbatched": (
            torch.nn.AdaptiveMaxPool2d((3, 3)),
            (_ragged((2, 6, 8)),),
            (_ragged((2, 11, 4)),),
            0,
        ),
        "adaptive_max_pool1d": (
            torch.nn.AdaptiveMaxPool1d(4, return_indices=True),
            (_with_nan(_ragged((2, 3, 10))),),
            (_ragged((1, 3, 13)),),
            0,
        ),
    }


CASES = _cases()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", list(CASES))
def test_matches_eager_over_edge_values(name, dynamic):
    assert_case_matches_eager(CASES[name], dynamic)


@pytest.mark.parametrize(
    "name",
    [
        "cdist_p2_direct",
        "searchsorted_side_sorter",
        "cumprod_zeros_negatives",
        "erfinv",
        "cummax_ties_nan",
        "signbit",
        "adaptive_max_pool2d",
        "masked_select_broadcast",
        "gamma_functions",
        "i0",
    ],
)
def test_kept_whole(name):
    """The ops are translated as the user called them: nothing is left to decompose."""
    fn, args, _, _ = CASES[name]
    program = FXGraphExtractor().generate_fx(fn, args, {}, dynamic_shapes=True, ctx=DiagnosticContext())
    assert decompose.untranslatable_targets(program, default_registry()) == set()


def _nan_planes(shape, plane_axes: int) -> torch.Tensor:
    """`_ragged` values (ties) whose first planes (the last `plane_axes` axes) hold a NaN first, inner
    and last (onnxruntime's max reductions keep or drop a NaN by its position) and +inf beside -inf."""
    x = _ragged(shape)
    planes = x.view(-1, math.prod(shape[-plane_axes:]))
    planes[0, 0] = planes[1, planes.shape[1] // 2] = planes[2, -1] = NAN
    planes[3, :2] = torch.tensor([INF, -INF])
    return x


VALUES_ONLY = {
    "divisible": (torch.nn.AdaptiveMaxPool2d((2, 3)), (2, 3, 8, 9), (2, 3, 7, 10)),
    "global": (torch.nn.AdaptiveMaxPool2d(1), (2, 3, 5, 6), (3, 3, 4, 9)),
    "global_rows": (torch.nn.AdaptiveMaxPool2d((1, 3)), (2, 3, 5, 9), (2, 3, 6, 7)),
    "uneven": (torch.nn.AdaptiveMaxPool2d((3, 2)), (2, 2, 7, 5), (2, 2, 9, 4)),
    "unbatched": (torch.nn.AdaptiveMaxPool2d((2, 2)), (4, 6, 4), (4, 5, 7)),
    "1d_divisible": (torch.nn.AdaptiveMaxPool1d(4), (2, 3, 12), (2, 3, 10)),
    "1d_global": (torch.nn.AdaptiveMaxPool1d(1), (2, 3, 12), (3, 2, 7)),
}
INDEX_OPS = {"GatherElements", "GatherND", "ArgMax", "ArgMin", "Equal"}  # picking the maximum's position


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", list(VALUES_ONLY))
def test_adaptive_max_pool_values_alone_leave_no_index_computation(name, dynamic):
    """Pooled values without their indices (``nn.AdaptiveMaxPool2d(1)(h)``) are PyTorch's, NaN, ±inf and
    ties included, and the exported graph holds none of the indices' ops."""
    pool, shape, other = VALUES_ONLY[name]
    torch.manual_seed(1)
    planes = 1 if isinstance(pool, torch.nn.AdaptiveMaxPool1d) else 2
    args = (_nan_planes(shape, planes),)
    export_output = exporter.dynamo_export(pool, *args, export_options=exporter.ExportOptions(dynamic_shapes=dynamic))
    assert torch.isnan(pool(*args)).any() and not torch.isnan(pool(*args)).all()
    assert_matches_eager(export_output, pool, args, atol=0)
    if dynamic:
        assert_matches_eager(export_output, pool, args, atol=0, run_args=(_nan_planes(other, planes),))
    model = onnx.inliner.inline_local_functions(export_output.model_proto)
    assert {node.op_type for node in model.graph.node} & INDEX_OPS == set()


@pytest.mark.parametrize("pool", [torch.nn.AdaptiveMaxPool2d(1), torch.nn.AdaptiveMaxPool1d(1)], ids=["2d", "1d"])
def test_global_adaptive_max_pool_of_an_empty_batch(pool):
    """A dynamic global max pool runs on a batch of none, as PyTorch's does."""
    shape = (2, 3, 5, 6)[: 3 if isinstance(pool, torch.nn.AdaptiveMaxPool1d) else 4]
    export_output = exporter.dynamo_export(
        pool, torch.randn(shape), export_options=exporter.ExportOptions(dynamic_shapes=True)
    )
    empty = torch.randn((0, *shape[1:]))
    assert_matches_eager(export_output, pool, (torch.randn(shape),), atol=0, run_args=(empty,))


def test_empty_tensors():
    """Empty lookups, scans over an empty axis and an empty sequence, as PyTorch allows them."""

    def fn(s, v, e, x):
        return torch.searchsorted(s, v), torch.searchsorted(e, x), torch.cumprod(x[:, :0], 1), torch.cummax(x[:0], 0)

    args = (_sorted(5), torch.zeros(0), torch.zeros(0), _ragged((3, 4)))
    assert_matches_eager(exporter.dynamo_export(fn, *args), fn, args)


def test_unsorted_sequence_gives_pytorchs_answer():
    """A sequence that is not sorted has no defined insertion point; the result is still PyTorch's (the
    same binary search), so a dynamic export's check at a second size with random inputs agrees."""
    fn = torch.searchsorted
    s, v = torch.randn(2, 13), torch.randn(2, 6)
    export_output = exporter.dynamo_export(fn, s, v, export_options=exporter.ExportOptions(dynamic_shapes=True))
    assert_matches_eager(export_output, fn, (s, v), run_args=(torch.randn(3, 40), torch.randn(3, 9)))


@pytest.mark.parametrize("fn", [torch.lgamma, torch.digamma, torch.special.i0], ids=["lgamma", "digamma", "i0"])
def test_gamma_functions_and_i0_are_accurate_on_a_dense_grid(fn):
    """Within 1e-6 of PyTorch, relative (absolute below 1), over [-20, 60] in steps of 0.004: the reflection,
    the shift, Stirling's and the asymptotic series, and both of i0's approximations."""
    grid = torch.linspace(-20, 60, 20001)
    grid = grid[(grid > 0) | (grid != grid.floor())]  # not the poles, where both are ±inf or NaN (tested apart)
    expected = fn(grid)
    proto = exporter.dynamo_export(fn, grid).model_proto
    actual = torch.from_numpy(run_onnx_feeds(proto, {proto.graph.input[0].name: grid.numpy()})[0])
    finite = expected.isfinite()
    assert torch.equal(actual.isfinite(), finite)
    error = (actual[finite] - expected[finite]).abs() / expected[finite].abs().clamp(min=1)
    assert error.max() < 1e-6


def test_erfinv_is_accurate_over_the_open_interval():
    """Within float32 tolerance of PyTorch on a dense grid of (-1, 1), including the tails."""
    fn = torch.special.erfinv
    tails = torch.logspace(-7, -1, 200)
    grid = torch.cat([torch.linspace(-1, 1, 20001)[1:-1], 1 - tails, tails - 1])
    assert_matches_eager(exporter.dynamo_export(fn, grid), fn, (grid,), atol=1e-6, rtol=1e-6)


class Untranslatable(torch.nn.Module):
    """``torch.special.bessel_j0`` decomposes to ``prims.bessel_j0``, which nothing translates; ``torch.polygamma``
    has no translation as called."""

    def __init__(self, mutate: bool):
        super().__init__()
        self.mutate = mutate

    def forward(self, x):
        if self.mutate:  # an in-place op on an input: the whole program is decomposed by torch.export
            x.mul_(2)
        y = torch.special.bessel_j0(x)
        return torch.polygamma(2, y)


def _line_of(code: str) -> int:
    lines, first = inspect.getsourcelines(Untranslatable.forward)
    return first + next(i for i, line in enumerate(lines) if code in line)


@pytest.mark.parametrize("mutate", [False, True], ids=["spliced", "whole_program"])
def test_untranslatable_decomposition_names_the_users_call(mutate):
    """FXE0011/FXE0012 and the error name what the user wrote and the primitive it became."""
    with pytest.raises(exporter.OnnxExporterError) as raised:
        exporter.dynamo_export(Untranslatable(mutate), torch.rand(3, 4) + 0.5)
    j0_line, polygamma_line = _line_of("torch.special.bessel_j0("), _line_of("torch.polygamma(")
    assert (
        f"Unsupported operators: aten.polygamma.default, prims.bessel_j0.default (from torch.special.bessel_j0 at "
        f"test_ops_round3.py:{j0_line})." in str(raised.value)
    )
    diagnostics = raised.value.export_output.diagnostic_context.diagnostics
    errors = {d.properties["fxTarget"]: d for d in diagnostics if d.rule.id == "FXE0011" and d.level.name == "ERROR"}
    j0, polygamma = errors["prims.bessel_j0.default"], errors["aten.polygamma.default"]
    assert j0.message.startswith(
        f"torch.special.bessel_j0 at test_ops_round3.py:{j0_line} became prims.bessel_j0.default, "
        "which has no ONNX translation."
    )
    assert (j0.location.line, j0.properties["userCall"], j0.properties["originalOperator"]) == (
        j0_line,
        "torch.special.bessel_j0",
        "aten.special_bessel_j0.default",
    )
    assert "became" not in polygamma.message and "userCall" not in polygamma.properties  # called as it is
    assert polygamma.location.line == polygamma_line
    (analysis,) = [d for d in diagnostics if d.rule.id == "FXE0012"]
    assert f"prims.bessel_j0.default (from torch.special.bessel_j0 at test_ops_round3.py:{j0_line})" in analysis.message
