"""Ops a sweep of 110 operators found translated wrong or not at all (round 4): torchlib's ``scatter_reduce``
"mean" (it assigned), ``copy`` with a broadcast source (``torch.vander``), int32 indices (``torch.istft``),
complex arithmetic with a real operand (``c + 1.5`` added 1.5 to both parts), and the operators it lacks: copysign, hypot, frexp, gcd/lcm, ndtri, i0e/i1/i1e, pdist, nanmedian and
index_reduce. Each is compared with eager PyTorch in onnxruntime over edge values, static and with dynamic
shapes (also at a second size); the expected values are eager PyTorch's."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from helpers import assert_case_matches_eager, assert_matches_eager

import exporter
from exporter.capture.extractor import FXGraphExtractor
from exporter.diagnostics import DiagnosticContext
from exporter.passes import decompose
from exporter.translate.registry import default_registry

INF, NAN = math.inf, math.nan
FIBONACCI_91, FIBONACCI_92 = 4660046610375530309, 7540113804746346429  # Euclid's longest case in int64


def _with_edges(x: torch.Tensor, edges: list[float]) -> torch.Tensor:
    x = x.clone()
    x.view(-1)[: len(edges)] = torch.tensor(edges, dtype=x.dtype)
    return x


def _cases():
    """name → (function, export inputs, second-size inputs, atol)."""
    torch.manual_seed(0)
    bessel_edges = [0.0, -0.0, 7.99, 8.0, -8.01, 20.0, -88.0, 100.0, 1e30, INF, -INF, NAN]
    return {
        "scatter_reduce_mean": (
            lambda x, i, s: (
                x.scatter_reduce(1, i, s, "mean"),
                x.scatter_reduce(1, i, s, "mean", include_self=False),
                x.scatter_reduce(1, i, s, "sum", include_self=False),  # src wider than the index
            ),
            (torch.randn(2, 6), torch.tensor([[0, 0, 3, 5], [1, 1, 1, 2]]), torch.randn(2, 5)),
            (torch.randn(3, 8), torch.randint(0, 8, (3, 6)), torch.randn(3, 7)),
            1e-6,
        ),
        "scatter_reduce_mean_integers": (
            lambda x, i, s: x.scatter_reduce(0, i, s, "mean"),  # floor division, negatives too
            (torch.tensor([-7, 3, 0, 5, -1]), torch.tensor([0, 0, 1, 3, 3, 3]), torch.tensor([2, -4, 9, -8, 1, 1])),
            (torch.randint(-9, 9, (8,)), torch.randint(0, 8, (10,)), torch.randint(-9, 9, (10,))),
            0,
        ),
        "index_reduce": (
            lambda x, i, s, n, m: (
                x.index_reduce(1, i, s, "mean", include_self=False),
                x.index_reduce(1, i, s, "prod"),
                n.index_reduce(0, i, m, "amin"),
            ),
            (
                torch.randn(3, 5),
                torch.tensor([0, 4, 4, 2]),
                torch.randn(3, 4),
                torch.randint(-9, 9, (5, 2)),
                torch.randint(-9, 9, (4, 2)),
            ),
            (
                torch.randn(2, 7),
                torch.tensor([6, 0, 6, 1, 1]),
                torch.randn(2, 5),
                torch.randint(-9, 9, (7, 3)),
                torch.randint(-9, 9, (5, 3)),
            ),
            1e-6,
        ),
        "int32_indices": (
            lambda x, i, v: (x[i.int()], x.index_put((i.int(),), v, accumulate=True)),
            (torch.randn(5, 3), torch.tensor([4, 0, 4, -1]), torch.randn(4, 3)),
            (torch.randn(7, 2), torch.tensor([6, 1, -2, 1]), torch.randn(4, 2)),
            1e-6,
        ),
        "copysign": (
            lambda x, s, n: (torch.copysign(x, s), torch.copysign(n, s), torch.copysign(x, -0.0), torch.copysign(n, 2)),
            (
                torch.tensor([1.5, -2.0, 0.0, -0.0, INF, -INF, 3.0, -4.0]),
                torch.tensor([-0.0, 0.0, -1.0, 1.0, -INF, 2.0, -1e-40, 5.0]),
                torch.tensor([3, -1, 0, 7, -2, 4, 0, -5]),
            ),
            (torch.randn(5), torch.randn(5), torch.randint(-5, 5, (5,))),
            0,
        ),
        "hypot": (
            lambda a, b: torch.hypot(a, b),
            (
                torch.tensor([INF, NAN, 3e30, 3e-30, 0.0, -3.0, NAN, -INF]),
                torch.tensor([NAN, -INF, 4e30, -4e-30, 0.0, 4.0, 1.0, 2.0]),
            ),
            (torch.randn(11) * 100, torch.randn(11)),
            0,
        ),
        "frexp": (
            lambda x, d: (*torch.frexp(x), *torch.frexp(d)),
            (
                torch.tensor([0.0, -0.0, INF, -INF, NAN, 1e-40, -3e-45, 0.5, 1.0, 2.0, 3.0, -0.75, 1e38, 6.0]),
                torch.tensor([1e-310, -5e-324, 1e300, 0.1, -1.0], dtype=torch.float64),
            ),
            (torch.randn(9) * 1e4, torch.randn(3, dtype=torch.float64)),
            0,
        ),
        "gcd_lcm": (
            lambda a, b, c, d: (torch.gcd(a, b), torch.lcm(c, d), torch.gcd(c, d)),
            (
                torch.tensor([FIBONACCI_92, 0, 0, -12, 18, 7, -(2**40)]),
                torch.tensor([FIBONACCI_91, 0, -5, 18, -12, 0, 2**20 * 3]),
                torch.tensor([0, -4, 6, 21, 1, -1000], dtype=torch.int32),
                torch.tensor([0, 6, 0, -14, 1, 999], dtype=torch.int32),
            ),
            (
                torch.randint(-100, 100, (9,)),
                torch.randint(-100, 100, (9,)),
                torch.randint(-50, 50, (4,), dtype=torch.int32),
                torch.randint(-50, 50, (4,), dtype=torch.int32),
            ),
            0,
        ),
        "ndtri": (
            lambda p, d: (torch.special.ndtri(p), torch.special.ndtri(d)),
            (
                torch.tensor([0.0, 1.0, -0.1, 1.1, 1e-30, 1e-10, 0.135, 0.136, 0.5, 0.9, 0.99999988, NAN]),
                torch.tensor([1e-300, 1e-20, 0.3, 1 - 1e-15], dtype=torch.float64),
            ),
            (torch.rand(15), torch.rand(2, dtype=torch.float64)),
            1e-5,
        ),
        "bessel": (
            lambda x, d: (
                torch.special.i0e(x),
                torch.special.i1(x),
                torch.special.i1e(x),
                torch.special.i0(d),
                torch.special.i1(d),
                torch.special.i1e(d),
            ),
            (torch.tensor(bessel_edges), torch.tensor([*bessel_edges, 700.0], dtype=torch.float64)),
            (torch.linspace(-40, 40, 161), torch.linspace(-40, 40, 81, dtype=torch.float64)),
            1e-6,
        ),
        "pdist": (
            lambda x: (
                torch.pdist(x),
                torch.pdist(x, p=1),
                torch.pdist(x, p=INF),
                torch.pdist(x, p=0),
                torch.pdist(x, 3.5),
            ),
            (_with_edges(torch.randn(5, 3), [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),),  # two equal (zero) rows
            (torch.randn(8, 3),),
            1e-5,
        ),
        "complex_with_real_operands": (
            lambda angle, r: tuple(
                torch.view_as_real(z)
                for z in (
                    torch.polar(r, angle) * 0.5,  # a rotary table scaled (DeepSeek-V2's, Llama 4's)
                    2 * torch.polar(r, angle),
                    torch.polar(r, angle) / 4,
                    torch.polar(r, angle) + 1.5,  # the real part only
                    torch.polar(r, angle) - r,
                    torch.polar(r, angle) * r,
                    torch.polar(r, angle) / (r + 1),
                    torch.polar(r, angle) * 1j,
                )
            ),
            (torch.randn(3, 4), torch.rand(3, 4)),
            (torch.randn(5, 2), torch.rand(5, 2)),
            1e-6,
        ),
        "nanmedian": (
            lambda x, n, empty: (
                torch.nanmedian(x, 1),
                torch.nanmedian(x, 0, keepdim=True),
                torch.nanmedian(x),
                torch.nanmedian(n, 1),
                torch.nanmedian(empty, 1).values,  # which NaN's index PyTorch gives for a row of NaN varies
            ),
            (
                torch.tensor([[NAN, 2.0, NAN, NAN], [1.0, NAN, 3.0, 2.0], [INF, NAN, -INF, 0.0], [5.0, 4.0, NAN, 4.0]]),
                torch.tensor([[3, 1, 2, 2], [0, -1, 5, 7]]),
                torch.tensor([[NAN, NAN, NAN], [1.0, NAN, 0.0]]),
            ),
            (torch.randn(3, 6), torch.randint(-3, 3, (4, 5)), torch.full((3, 2), NAN)),
            0,
        ),
    }


CASES = _cases()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", list(CASES))
def test_matches_eager_over_edge_values(name, dynamic):
    assert_case_matches_eager(CASES[name], dynamic)


@pytest.mark.parametrize("name", ["copysign", "hypot", "frexp", "gcd_lcm", "ndtri", "bessel", "pdist", "nanmedian"])
def test_kept_whole(name):
    """The ops are translated as the user called them: nothing is left to decompose."""
    fn, args, _, _ = CASES[name]
    program = FXGraphExtractor().generate_fx(fn, args, {}, dynamic_shapes=True, ctx=DiagnosticContext())
    assert decompose.untranslatable_targets(program, default_registry()) == set()


def test_an_istft_round_trip_matches_eager():
    """``torch.istft``'s decomposition scatters its frames with int32 indices (ONNX's ScatterND takes int64)."""

    def round_trip(x):
        window = torch.hann_window(16)
        spectrum = torch.stft(x, 16, hop_length=4, window=window, return_complex=True)
        return torch.istft(spectrum, 16, hop_length=4, window=window, length=x.shape[-1])

    x = torch.randn(2, 80)
    assert_matches_eager(exporter.dynamo_export(round_trip, x), round_trip, (x,), atol=1e-5)


def test_vander_copies_a_broadcast_column():
    """``torch.vander``'s decomposition copies a column into every column of a matrix (torchlib's ``copy``
    only cast it); PyTorch fixes its size, so this export is static."""

    def vander(x):
        return torch.vander(x), torch.vander(x, N=3, increasing=True)

    x = torch.tensor([0.0, -1.5, 2.0, 0.5])
    assert_matches_eager(exporter.dynamo_export(vander, x), vander, (x,), atol=1e-5)


def test_a_large_logdet_does_not_overflow():
    """torchlib's log of ONNX's ``Det`` overflows where the determinant leaves float range; its log does not."""

    def logdet(a):
        return torch.logdet(a), torch.logdet(-a)  # det(-a) < 0 for odd n: NaN

    a = torch.diag(torch.tensor([1e20, 1e20, 1e20])) + 0.1 * torch.randn(3, 3)
    assert_matches_eager(exporter.dynamo_export(logdet, a), logdet, (a,), rtol=1e-5)


class CTCLoss(torch.nn.Module):
    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return torch.nn.functional.ctc_loss(log_probs.log_softmax(2), targets, input_lengths, target_lengths)


def test_an_operator_whose_output_size_only_running_it_tells_is_explained_at_its_line():
    """``F.ctc_loss`` sizes its work from the target lengths' values: torch.export raises its internal
    DynamicOutputShapeException; the user gets the operator, why, and what to do, at their line."""
    args = (torch.randn(6, 2, 5), torch.randint(1, 5, (2, 3)), torch.tensor([6, 5]), torch.tensor([3, 2]))
    with pytest.raises(exporter.OnnxExporterError) as raised:
        exporter.dynamo_export(CTCLoss(), *args)
    diagnostics = raised.value.export_output.diagnostic_context.diagnostics
    (error,) = [d for d in diagnostics if d.rule.id == "FXE0017" and d.level.name == "ERROR"]
    line = inspect.getsourcelines(CTCLoss.forward)[1] + 1
    assert (error.location.path.endswith("test_ops_round4.py"), error.location.line) == (True, line)
    assert error.message.startswith("`return torch.nn.functional.ctc_loss(")
    assert "calls aten._ctc_loss.Tensor, whose output size PyTorch computes from the input's values" in error.message
    assert "torch.library.register_fake" in error.message and "DynamicOutputShapeException" not in error.message


def test_a_mask_cast_to_numbers_matches_eager_without_a_warning():
    """torchlib's cast declares real input types only: a bool mask made integers or floats (counted, as
    Llama 4's and Mamba's masks are) drew an FXE0014 warning that no function accepts its input types."""

    def counts(x):
        mask = x > 0
        return mask.long().cumsum(-1) + mask.sum(-1, keepdim=True), mask.to(torch.float64) * x.double()

    x = torch.randn(3, 5)
    export_output = exporter.dynamo_export(counts, x)
    assert_matches_eager(export_output, counts, (x,))
    assert not [d for d in export_output.diagnostic_context.diagnostics if d.rule.id == "FXE0014"]
