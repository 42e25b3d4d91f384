"""``torch.linalg.solve``, ``inv``, ``slogdet`` and ``cholesky`` (`exporter.translate.ops.linalg`): LU with
partial pivoting and Cholesky's factor unrolled over a static matrix size, matching eager PyTorch (LAPACK) in
onnxruntime, with a dynamic batch."""

from __future__ import annotations

import pytest
import torch
from helpers import assert_matches_eager
from torch.export import Dim

import exporter


class Solves(torch.nn.Module):
    def forward(self, a, b, v):
        return (
            torch.linalg.solve(a, b),
            torch.linalg.inv(a),
            torch.linalg.solve(a, v),  # a batch of vectors
            torch.linalg.solve(a, b.mT, left=False),  # X A = B
            *torch.linalg.solve_ex(a, b),
        )


class Factors(torch.nn.Module):
    """The packed LU factors and LAPACK's pivots that ``_linalg_solve_ex`` gives beside the solution."""

    def forward(self, a, b):
        return torch.ops.aten._linalg_solve_ex(a, b)


def _matrices(batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a = torch.randn(batch, 4, 4)
    a[0, 0, 0] = 0.0  # a zero first pivot: only a row swap gets past it
    a[-1] = torch.tensor([[1e-3, 2.0, 0, 0], [1.0, 1.0, 0, 0], [0, 0, 3.0, 1.0], [0, 0, 1.0, 3.0]])  # pivots far apart
    return a, torch.randn(batch, 4, 2), torch.randn(batch, 4)


BATCH = {"a": {0: Dim("batch")}, "b": {0: Dim("batch")}, "v": {0: Dim("batch")}}


def test_solutions_and_inverses_match_eager_with_a_dynamic_batch():
    torch.manual_seed(0)
    args = _matrices(3)
    options = exporter.ExportOptions(dynamic_shapes=BATCH)
    export_output = exporter.dynamo_export(Solves(), *args, export_options=options)
    assert_matches_eager(export_output, Solves(), args, atol=1e-5, rtol=1e-4)
    assert_matches_eager(export_output, Solves(), args, atol=1e-5, rtol=1e-4, run_args=_matrices(6))


def test_the_lu_factors_and_pivots_are_lapacks():
    torch.manual_seed(1)
    a, b, _ = _matrices(3)
    export_output = exporter.dynamo_export(Factors(), a, b)
    assert_matches_eager(export_output, Factors(), (a, b), atol=1e-5, rtol=1e-4)  # pivots (int32) exactly


def test_an_unbatched_camera_matrix():
    """Unprojecting pixels with the inverse intrinsics, as 3-D vision models do."""
    intrinsics = torch.tensor([[500.0, 0.0, 320.0], [0.0, 480.0, 240.0], [0.0, 0.0, 1.0]])

    def unproject(k, pixels):
        return (torch.linalg.inv(k) @ pixels.T).T

    pixels = torch.tensor([[0.0, 0.0, 1.0], [640.0, 480.0, 1.0], [320.0, 240.0, 1.0]])
    assert_matches_eager(exporter.dynamo_export(unproject, intrinsics, pixels), unproject, (intrinsics, pixels))


class Determinants(torch.nn.Module):
    def forward(self, a):
        return (*torch.linalg.slogdet(a), torch.logdet(a @ a.mT), torch.ops.aten._linalg_slogdet(a)[2:])


def _signed(batch: int) -> torch.Tensor:
    """Matrices whose determinants have either sign, reached by an odd or an even number of row swaps, one
    of them with a determinant far beyond float32's range (its log is not)."""
    a = _matrices(batch)[0]
    a[1] = torch.tensor([[0.0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 2], [0, 0, 3, 0]])  # two swaps: det (-1)(-6) = 6
    a[2] = torch.diag(torch.tensor([1e12, -1e12, 1e12, 1e12]))  # det -1e48
    return a


def test_slogdet_signs_logs_factors_and_pivots_match_eager():
    torch.manual_seed(2)
    expected_signs = torch.linalg.slogdet(_signed(4)).sign
    assert {-1.0, 1.0} <= set(expected_signs.tolist())  # both signs are exercised
    options = exporter.ExportOptions(dynamic_shapes={"a": {0: Dim("batch")}})
    export_output = exporter.dynamo_export(Determinants(), _signed(4), export_options=options)
    assert_matches_eager(export_output, Determinants(), (_signed(4),), atol=1e-4, rtol=1e-4)
    assert_matches_eager(export_output, Determinants(), (_signed(4),), atol=1e-4, rtol=1e-4, run_args=(_signed(7),))


class Cholesky(torch.nn.Module):
    def forward(self, a):
        spd = a @ a.mT + 0.1 * torch.eye(a.shape[-1])
        return torch.linalg.cholesky(spd), torch.linalg.cholesky(spd, upper=True), torch.linalg.cholesky_ex(spd)


def test_cholesky_factors_match_eager_with_a_dynamic_batch():
    torch.manual_seed(3)
    options = exporter.ExportOptions(dynamic_shapes={"a": {0: Dim("batch")}})
    export_output = exporter.dynamo_export(Cholesky(), torch.randn(2, 5, 5), export_options=options)
    assert_matches_eager(export_output, Cholesky(), (torch.randn(2, 5, 5),), atol=1e-4, rtol=1e-4)
    assert_matches_eager(
        export_output, Cholesky(), (torch.randn(2, 5, 5),), atol=1e-4, rtol=1e-4, run_args=(torch.randn(5, 5, 5),)
    )


def test_a_dynamic_matrix_size_is_refused_with_what_to_do():
    with pytest.raises(
        exporter.OnnxExporterError, match="must be static: leave the matrices. last two axes out of dynamic_shapes"
    ):
        exporter.dynamo_export(Solves(), *_matrices(2), export_options=exporter.ExportOptions(dynamic_shapes=True))


class Exponentials(torch.nn.Module):
    def forward(self, a):
        skew = a - a.mT  # exp of a skew-symmetric matrix is orthogonal, whatever its norm
        return torch.linalg.matrix_exp(a), torch.linalg.matrix_exp(20 * skew), torch.matrix_exp(a * 0)


def test_matrix_exponentials_match_eager_at_small_and_large_norms():
    torch.manual_seed(4)
    a = torch.randn(3, 4, 4)
    a[1] = torch.triu(torch.ones(4, 4), diagonal=1)  # nilpotent: its exponential is a finite sum
    a[2] = torch.diag(torch.tensor([3.0, -5.0, 0.5, 8.0]))  # exp(8) = 2981: squared three times
    options = exporter.ExportOptions(dynamic_shapes={"a": {0: Dim("batch")}})
    export_output = exporter.dynamo_export(Exponentials(), a, export_options=options)
    assert_matches_eager(export_output, Exponentials(), (a,), atol=1e-4, rtol=1e-4)
    assert_matches_eager(export_output, Exponentials(), (a,), atol=1e-4, rtol=1e-4, run_args=(torch.randn(5, 4, 4),))


@pytest.mark.parametrize(
    "orthogonal_map, shape",
    [("matrix_exp", (4, 4)), ("householder", (4, 4)), ("householder", (6, 3))],
    ids=["matrix_exp", "householder_square", "householder_tall"],
)
def test_orthogonally_parametrized_layers_verify(orthogonal_map, shape):
    """``torch.nn.utils.parametrizations.orthogonal`` computes its weight in forward: by matrix_exp (its default
    for square weights) or by Householder reflections (linalg_householder_product, its default otherwise)."""
    torch.manual_seed(5)
    layer = torch.nn.utils.parametrizations.orthogonal(torch.nn.Linear(*shape), orthogonal_map=orthogonal_map)
    x = torch.randn(2, shape[0])
    options = exporter.ExportOptions(verify=True, dynamic_shapes={"input": {0: Dim("batch")}})
    export_output = exporter.dynamo_export(layer, x, export_options=options)
    (verified,) = [d for d in export_output.diagnostic_context.diagnostics if d.rule.id == "FXE0021"]
    assert verified.level.name == "NOTE" and "divergingOutputs" not in verified.properties
    assert_matches_eager(export_output, layer, (x,), atol=1e-5, run_args=(torch.randn(5, shape[0]),))


def test_householder_products_match_eager():
    def product(a, tau):
        return torch.linalg.householder_product(a, tau)

    torch.manual_seed(6)
    a, tau = torch.randn(2, 5, 3), torch.randn(2, 2)  # fewer reflections than columns
    assert_matches_eager(exporter.dynamo_export(product, a, tau), product, (a, tau), atol=1e-5)
