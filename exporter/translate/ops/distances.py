"""``torch.cdist`` and ``torch.pdist``, which torchlib does not translate (PyTorch's decompositions call
``_cdist_forward`` and ``_pdist_forward``, which it lacks too)."""

from __future__ import annotations

import math

from onnxscript import opset18 as op
from onnxscript import values

from exporter.constants import DOMAIN_COMPOSITES
from exporter.translate.opname import OpName

_MM_IF_NECESSARY, _MM, _NO_MM = 0, 1, 2  # cdist's compute_mode, as ATen numbers them


def _traced(fn):
    return values.TracedOnnxFunction(values.Opset(DOMAIN_COMPOSITES, 1), fn)


@_traced
def cdist(x1, x2, p: float = 2.0, compute_mode: int = _MM_IF_NECESSARY):
    """p-norm distances between the rows of `x1` ``[..., P, M]`` and `x2` ``[..., R, M]``: ``[..., P, R]``.

    For p=2 PyTorch computes ``‖a‖² + ‖b‖² - 2a·b`` with a matrix product when asked, or by default
    when P or R exceeds 25; otherwise, and for every other p, from the differences (``P × R × M``
    elements). With a dynamic P or R the matrix product is used, as PyTorch does for large inputs.
    """
    if p == 2 and _uses_matrix_product(x1, x2, compute_mode):
        return _euclidean_by_matrix_product(x1, x2)
    rows, columns = op.Unsqueeze(x1, op.Constant(value_ints=[-2])), op.Unsqueeze(x2, op.Constant(value_ints=[-3]))
    diff = op.Abs(op.Sub(rows, columns))
    last = op.Constant(value_ints=[-1])
    if p == 0:
        return op.ReduceSum(op.CastLike(op.Not(op.Equal(diff, op.CastLike(0, diff))), diff), last, keepdims=0)
    if p == 1:
        return op.ReduceSum(diff, last, keepdims=0)
    if p == 2:
        return op.Sqrt(op.ReduceSum(op.Mul(diff, diff), last, keepdims=0))
    if math.isinf(p):
        return op.ReduceMax(diff, last, keepdims=0)
    return op.Pow(op.ReduceSum(op.Pow(diff, op.CastLike(p, diff)), last, keepdims=0), op.CastLike(1.0 / p, diff))


@_traced
def pdist(self, p: float = 2.0):
    """p-norm distances between the rows i < j of `self` ``[N, M]``, in row-major order of the pairs
    (``[N (N - 1) / 2]``), from the differences as PyTorch computes them."""
    distances = cdist(self, self, p, _NO_MM)
    n = op.Squeeze(op.Shape(self, start=0, end=1), op.Constant(value_ints=[0]))
    rows = op.Range(op.Constant(value_int=0), n, op.Constant(value_int=1))
    above = op.Less(op.Unsqueeze(rows, op.Constant(value_ints=[1])), op.Unsqueeze(rows, op.Constant(value_ints=[0])))
    flat = op.Constant(value_ints=[-1])
    return op.Compress(op.Reshape(distances, flat), op.Reshape(above, flat), axis=0)


def _uses_matrix_product(x1, x2, compute_mode: int) -> bool:
    if compute_mode == _NO_MM:
        return False
    if compute_mode == _MM:
        return True
    rows = (x1.shape[-2], x2.shape[-2])
    return not all(isinstance(n, int) for n in rows) or max(rows) > 25


def _euclidean_by_matrix_product(x1, x2):
    """PyTorch's ``_euclidean_dist``: ``[-2a, ‖a‖², 1] · [b, 1, ‖b‖²]``, clamped at 0, square-rooted."""
    last = op.Constant(value_ints=[-1])
    norm1 = op.ReduceSum(op.Mul(x1, x1), last, keepdims=1)
    norm2 = op.ReduceSum(op.Mul(x2, x2), last, keepdims=1)
    ones1, ones2 = op.Expand(op.CastLike(1, x1), op.Shape(norm1)), op.Expand(op.CastLike(1, x2), op.Shape(norm2))
    left = op.Concat(op.Mul(x1, op.CastLike(-2, x1)), norm1, ones1, axis=-1)
    right = op.Concat(x2, ones2, norm2, axis=-1)
    rank = len(x2.shape)
    product = op.MatMul(left, op.Transpose(right, perm=[*range(rank - 2), rank - 1, rank - 2]))
    return op.Sqrt(op.Max(product, op.CastLike(0, product)))


FUNCTIONS = {
    OpName("aten", "cdist"): cdist,
    OpName("aten", "_cdist_forward"): cdist,
    OpName("aten", "pdist"): pdist,
    OpName("aten", "_pdist_forward"): pdist,
}
"""ONNX functions for distances torchlib does not translate."""
