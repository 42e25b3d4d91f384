"""``torch.linalg.solve``, ``inv``, ``slogdet`` and ``cholesky``, which torchlib does not translate (ONNX has
no solver).

LAPACK's algorithms, unrolled over the matrix size (which must be static; the batch may be dynamic): an LU
factorization with partial pivoting (at step k the row with the largest magnitude in column k is swapped
up), then forward and back substitution, or the determinant's sign and log from the factors; Cholesky's
factor column by column. ``_linalg_solve_ex`` and ``_linalg_slogdet`` also give the packed LU factors and
LAPACK's 1-based pivots, as PyTorch does; ``info`` is 0 (a singular or indefinite matrix gives inf/NaN where
PyTorch's check raises: the graph drops ``_linalg_check_errors``, as it does the other runtime assertions).
"""

from __future__ import annotations

import math

from onnxscript import INT32, INT64, values
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.ops import core

from exporter.constants import DOMAIN_COMPOSITES
from exporter.translate.opname import OpName

_TAYLOR_DEGREE = 18
_MAX_SQUARINGS = 16


def _traced(fn):
    return values.TracedOnnxFunction(values.Opset(DOMAIN_COMPOSITES, 1), fn)


@_traced
def linalg_inv_ex(A, check_errors: bool = False):
    """The inverse of each matrix of `A` (``[..., n, n]``) and ``info`` (0)."""
    n = _size(A)
    identity = op.CastLike(op.EyeLike(op.ConstantOfShape(op.Constant(value_ints=[n, n]))), A)
    lu, pivots, rows = _lu(A, n)
    return _substitute(lu, _permuted(op.Expand(identity, op.Shape(A)), rows), n, len(A.shape)), _info(A)


@_traced
def linalg_solve_ex(A, B, left: bool = True, check_errors: bool = False):
    """X with ``A X = B`` (``X A = B`` unless `left`); B a matrix or a batch of vectors (``[..., n]``, one fewer
    axis than A); then the packed LU factors of A, its pivots (int32, from 1) and ``info`` (0)."""
    rank, n = len(A.shape), _size(A)
    vector = len(B.shape) == rank - 1
    if not left:  # X A = B  <=>  Aᵀ Xᵀ = Bᵀ
        A = op.Transpose(A, perm=[*range(rank - 2), rank - 1, rank - 2])
    if vector:
        B = op.Unsqueeze(B, op.Constant(value_ints=[-1]))
    elif not left:
        B = op.Transpose(B, perm=[*range(rank - 2), rank - 1, rank - 2])
    lu, pivots, rows = _lu(A, n)
    X = _substitute(lu, _permuted(B, rows), n, rank)
    if vector:
        X = op.Squeeze(X, op.Constant(value_ints=[-1]))
    elif not left:
        X = op.Transpose(X, perm=[*range(rank - 2), rank - 1, rank - 2])
    return X, lu, pivots, _info(A)


@_traced
def linalg_slogdet(A):
    """The sign and the log of the absolute value of each determinant of `A` (``[..., n, n]``), from LU factors:
    the product of the signs of U's diagonal, negated once per row swap, and the sum of the logs of its
    magnitudes; then the factors and pivots, which PyTorch gives of Aᵀ (LAPACK reads A's memory column-major)."""
    n, rank = _size(A), len(A.shape)
    lu, pivots, _ = _lu(op.Transpose(A, perm=[*range(rank - 2), rank - 1, rank - 2]), n)
    identity = op.CastLike(op.EyeLike(op.ConstantOfShape(op.Constant(value_ints=[n, n]))), A)
    last = op.Constant(value_ints=[-1])
    diagonal = op.ReduceSum(op.Mul(lu, identity), last, keepdims=0)
    steps = op.Cast(
        op.Range(op.Constant(value_int=1), op.Constant(value_int=n + 1), op.Constant(value_int=1)), to=INT32.dtype
    )
    swaps = op.ReduceSum(op.Cast(op.Not(op.Equal(pivots, steps)), to=INT64.dtype), last, keepdims=0)
    parity = op.CastLike(
        op.Sub(op.Constant(value_int=1), op.Mul(op.Mod(swaps, op.Constant(value_int=2)), op.Constant(value_int=2))), A
    )
    sign = op.Mul(op.ReduceProd(op.Sign(diagonal), last, keepdims=0), parity)
    return sign, op.ReduceSum(op.Log(op.Abs(diagonal)), last, keepdims=0), lu, pivots


@_traced
def logdet(A):
    """log det(A) from the LU factors (torchlib's log of ONNX's ``Det`` overflows where the determinant leaves
    float range and its log does not): NaN for a negative determinant, -inf for zero. A dynamic matrix size
    keeps torchlib's."""
    if not isinstance(A.shape[-1], int):
        return core.aten_logdet(A)
    sign, log_magnitude, _, _ = linalg_slogdet(A)
    zero = op.CastLike(0.0, sign)
    return op.Where(
        op.Less(sign, zero),
        op.CastLike(float("nan"), sign),
        op.Where(op.Equal(sign, zero), op.CastLike(float("-inf"), sign), log_magnitude),
    )


@_traced
def linalg_cholesky_ex(A, upper: bool = False, check_errors: bool = False):
    """The lower triangular L with ``L Lᵀ = A`` (its transpose if `upper`) of each matrix of `A`, column by
    column (Cholesky–Banachiewicz), and ``info`` (0). Only A's lower triangle is read, as LAPACK does."""
    n, rank = _size(A), len(A.shape)
    rows = op.Reshape(
        op.Range(op.Constant(value_int=0), op.Constant(value_int=n), op.Constant(value_int=1)),
        op.Constant(value_ints=[n, 1]),
    )
    columns = []
    for j in range(n):
        c = op.Slice(
            A, op.Constant(value_ints=[j]), op.Constant(value_ints=[j + 1]), op.Constant(value_ints=[-1])
        )  # [..., n, 1]
        if columns:
            done = op.Concat(*columns, axis=-1)  # [..., n, j]
            row = op.Slice(
                done, op.Constant(value_ints=[j]), op.Constant(value_ints=[j + 1]), op.Constant(value_ints=[-2])
            )
            c = op.Sub(c, op.MatMul(done, op.Transpose(row, perm=[*range(rank - 2), rank - 1, rank - 2])))
        pivot = op.Sqrt(
            op.Slice(c, op.Constant(value_ints=[j]), op.Constant(value_ints=[j + 1]), op.Constant(value_ints=[-2]))
        )
        j_ = op.Constant(value_int=j)
        column = op.Where(op.Greater(rows, j_), op.Div(c, pivot), op.CastLike(0.0, A))
        columns.append(op.Where(op.Equal(rows, j_), op.Expand(pivot, op.Shape(column)), column))
    L = op.Concat(*columns, axis=-1)
    if upper:
        L = op.Transpose(L, perm=[*range(rank - 2), rank - 1, rank - 2])
    return L, _info(A)


@_traced
def linalg_matrix_exp(A):
    """exp(A) of each matrix of `A` (``[..., n, n]``; ``torch.nn.utils.parametrizations.orthogonal``'s default map),
    by scaling and squaring: A divided by 2^s, s from its 1-norm at run time so that the scaled norm is at most 1,
    where a Taylor polynomial of degree 18 is within float64 rounding (1/19! < 1e-17), then squared s times. s is
    at most 16: a matrix of 1-norm above 65536 (whose exponential overflows unless it is, say, skew-symmetric)
    is not scaled enough."""
    n = _size(A)
    identity = op.CastLike(op.EyeLike(op.ConstantOfShape(op.Constant(value_ints=[n, n]))), A)
    norm = op.ReduceMax(
        op.ReduceSum(op.Abs(A), op.Constant(value_ints=[-2]), keepdims=1), op.Constant(value_ints=[-1]), keepdims=1
    )
    squarings = op.Ceil(op.Div(op.Log(op.Max(norm, op.CastLike(1.0, norm))), op.CastLike(math.log(2.0), norm)))
    squarings = op.Min(squarings, op.CastLike(float(_MAX_SQUARINGS), norm))  # [..., 1, 1]
    X = op.Div(A, op.Pow(op.CastLike(2.0, A), squarings))
    result = identity
    for k in range(_TAYLOR_DEGREE, 0, -1):  # Horner: I + X/1 (I + X/2 (I + …))
        result = op.Add(identity, op.Div(op.MatMul(X, result), op.CastLike(float(k), A)))
    for step in range(_MAX_SQUARINGS):
        result = op.Where(op.Less(op.CastLike(float(step), squarings), squarings), op.MatMul(result, result), result)
    return result


@_traced
def linalg_householder_product(A, tau):
    """The first n columns of H₁ H₂ … H_k, Hᵢ = I - τᵢ vᵢ vᵢᵀ with vᵢ column i of `A` (``[..., m, n]``) below its
    diagonal and 1 on it (LAPACK's orgqr; ``orthogonal``'s Householder map)."""
    n = _size(A)
    m, k = A.shape[-2], tau.shape[-1]
    rank = len(A.shape)
    rows = op.Reshape(
        op.Range(op.Constant(value_int=0), op.Constant(value_int=m), op.Constant(value_int=1)),
        op.Constant(value_ints=[m, 1]),
    )
    Q = op.Expand(
        op.CastLike(op.EyeLike(op.ConstantOfShape(op.Constant(value_ints=[m, m]))), A),
        op.Concat(op.Shape(A, start=0, end=-2), op.Constant(value_ints=[m, m]), axis=0),
    )
    for i in range(k):
        column = op.Slice(
            A, op.Constant(value_ints=[i]), op.Constant(value_ints=[i + 1]), op.Constant(value_ints=[-1])
        )  # [..., m, 1]
        i_ = op.Constant(value_int=i)
        v = op.Where(op.Greater(rows, i_), column, op.CastLike(op.Cast(op.Equal(rows, i_), to=INT64.dtype), A))
        t = op.Unsqueeze(
            op.Slice(tau, op.Constant(value_ints=[i]), op.Constant(value_ints=[i + 1]), op.Constant(value_ints=[-1])),
            op.Constant(value_ints=[-1]),
        )
        v_row = op.Transpose(v, perm=[*range(rank - 2), rank - 1, rank - 2])
        Q = op.Sub(Q, op.Mul(t, op.MatMul(op.MatMul(Q, v), v_row)))
    return op.Slice(Q, op.Constant(value_ints=[0]), op.Constant(value_ints=[n]), op.Constant(value_ints=[-1]))


def _size(A) -> int:
    """The number of columns of the matrices `A`, whose size must be static."""
    if not all(isinstance(d, int) for d in A.shape[-2:]):
        raise NotImplementedError(
            "the computation is unrolled over the matrix size, which must be static: leave the matrices' last "
            "two axes out of dynamic_shapes (the batch may vary)"
        )
    return A.shape[-1]


def _lu(A, n: int):
    """A's rows permuted and factored, L (unit diagonal, below it) and U packed in one matrix; LAPACK's pivots; the
    row order (the original row of each row of the factors)."""
    rows = op.Range(op.Constant(value_int=0), op.Constant(value_int=n), op.Constant(value_int=1))
    order = op.Expand(rows, op.Shape(A, start=0, end=-1))  # [..., n]
    column_index = op.Reshape(rows, op.Constant(value_ints=[1, n]))
    row_index = op.Reshape(rows, op.Constant(value_ints=[n, 1]))
    pivots = []
    for k in range(n):
        column = op.Slice(
            A, op.Constant(value_ints=[k, k]), op.Constant(value_ints=[n, k + 1]), op.Constant(value_ints=[-2, -1])
        )
        pivot = op.Add(op.ArgMax(op.Abs(column), axis=-2, keepdims=1), op.Constant(value_int=k))  # [..., 1, 1]
        pivots.append(pivot)
        k_ = op.Constant(value_int=k)
        swapped = op.Where(
            op.Equal(row_index, k_), pivot, op.Where(op.Equal(row_index, pivot), k_, row_index)
        )  # [..., n, 1]: the row each row comes from
        A = op.GatherElements(A, op.Expand(swapped, op.Shape(A)), axis=-2)
        order = op.GatherElements(order, op.Squeeze(swapped, op.Constant(value_ints=[-1])), axis=-1)
        top = op.Slice(A, op.Constant(value_ints=[k]), op.Constant(value_ints=[k + 1]), op.Constant(value_ints=[-2]))
        column = op.Slice(A, op.Constant(value_ints=[k]), op.Constant(value_ints=[k + 1]), op.Constant(value_ints=[-1]))
        diagonal = op.Slice(
            top, op.Constant(value_ints=[k]), op.Constant(value_ints=[k + 1]), op.Constant(value_ints=[-1])
        )
        below = op.Greater(row_index, k_)  # [n, 1]
        multipliers = op.Where(below, op.Div(column, diagonal), op.CastLike(0.0, A))  # [..., n, 1]
        right = op.Greater(column_index, k_)  # [1, n]
        A = op.Sub(A, op.Where(right, op.Mul(multipliers, top), op.CastLike(0.0, A)))
        A = op.Where(op.And(below, op.Equal(column_index, k_)), multipliers, A)
    lapack = op.Cast(op.Add(op.Concat(*pivots, axis=-1), op.Constant(value_int=1)), to=INT32.dtype)  # [..., 1, n]
    return A, op.Squeeze(lapack, op.Constant(value_ints=[-2])), order


def _permuted(B, order):
    """B's rows in the factors' order."""
    index = op.Unsqueeze(order, op.Constant(value_ints=[-1]))
    return op.GatherElements(B, op.Expand(index, op.Shape(B)), axis=-2)


def _substitute(lu, B, n: int, rank: int):
    """X with L U X = B (of `rank` axes): forward substitution with L (unit diagonal), then back substitution
    with U."""

    def row(M, i):
        return op.Slice(M, op.Constant(value_ints=[i]), op.Constant(value_ints=[i + 1]), op.Constant(value_ints=[-2]))

    def entries(i, start, end):  # lu[..., i, start:end] as a column [..., end - start, 1]
        block = op.Slice(
            lu,
            op.Constant(value_ints=[i, start]),
            op.Constant(value_ints=[i + 1, end]),
            op.Constant(value_ints=[-2, -1]),
        )
        return op.Transpose(block, perm=[*range(rank - 2), rank - 1, rank - 2])

    forward = []
    for i in range(n):
        y = row(B, i)
        if forward:
            y = op.Sub(
                y,
                op.ReduceSum(
                    op.Mul(entries(i, 0, i), op.Concat(*forward, axis=-2)), op.Constant(value_ints=[-2]), keepdims=1
                ),
            )
        forward.append(y)
    backward = [None] * n
    for i in reversed(range(n)):
        x = forward[i]
        if i < n - 1:
            solved = op.Concat(*backward[i + 1 :], axis=-2)
            x = op.Sub(x, op.ReduceSum(op.Mul(entries(i, i + 1, n), solved), op.Constant(value_ints=[-2]), keepdims=1))
        backward[i] = op.Div(x, entries(i, i, i + 1))
    return op.Concat(*backward, axis=-2)


def _info(A):
    """LAPACK's ``info`` per matrix: 0."""
    return op.Cast(op.ConstantOfShape(op.Shape(A, start=0, end=-2)), to=INT32.dtype)


FUNCTIONS = {
    OpName("aten", "linalg_inv_ex"): linalg_inv_ex,
    OpName("aten", "_linalg_solve_ex"): linalg_solve_ex,
    OpName("aten", "_linalg_slogdet"): linalg_slogdet,
    OpName("aten", "linalg_cholesky_ex"): linalg_cholesky_ex,
    OpName("aten", "linalg_matrix_exp"): linalg_matrix_exp,
    OpName("aten", "linalg_householder_product"): linalg_householder_product,
}
"""ONNX functions for the linear algebra torchlib does not translate."""
