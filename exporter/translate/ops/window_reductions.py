"""Reductions over a window of each position along an axis, which torchlib does not translate:
cumulative ops (the window is the prefix ``[0, i]``: ``cumprod``, ``cummax``, ``cummin``) and adaptive
max pooling (window i is ``[floor(i*n/o), ceil((i+1)*n/o))``).

Each is one masked reduction: the input is broadcast against a ``[windows, n]`` mask built from its size
at run time (so dynamic sizes stay right) and reduced along ``n``. That costs ``windows × n`` elements per
row, exact on zeros, negatives and infinities (no log/exp), where ONNX offers no scan of its own. Adaptive
max pooling's values are reduced apart from its indices (a global or tiling pool without a mask), NaN kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir
from onnxscript import INT64, values
from onnxscript import opset18 as op

from exporter.constants import DOMAIN_COMPOSITES
from exporter.translate.opname import OpName

_FLOATS = {ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16}
_NOT_INT64 = {ir.DataType.BOOL, ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.UINT8}


def _traced(fn):
    return values.TracedOnnxFunction(values.Opset(DOMAIN_COMPOSITES, 1), fn)


@_traced
def cumprod(self, dim: int, dtype: int = -1):
    """Running products along `dim`, each window multiplied out (zeros and negatives exact); integers
    and booleans accumulate in int64 as in PyTorch, `dtype` casts first."""
    rank = len(self.shape)  # read before a cast: the cast's result has no shape yet
    if dtype not in (None, -1):
        self = op.Cast(self, to=dtype)
    elif self.dtype in _NOT_INT64:
        self = op.Cast(self, to=INT64.dtype)
    if rank == 0:
        return op.Identity(self)
    axis = dim % rank
    inside = _prefixes(_size(self, axis))
    spread, inside = _spread(self, inside, axis, rank)
    return op.ReduceProd(op.Where(inside, spread, op.CastLike(1, self)), op.Constant(value_ints=[axis + 1]), keepdims=0)


@_traced
def cummax(self, dim: int):
    """Running maxima along `dim` and their indices: of ties the last (PyTorch's ``>=``), of a NaN
    the last NaN so far (which then stays the value)."""
    return _cumulative_extreme(self, dim, largest=True)


@_traced
def cummin(self, dim: int):
    """Running minima along `dim` and their indices (ties and NaN as `cummax`)."""
    return _cumulative_extreme(self, dim, largest=False)


def _cumulative_extreme(self, dim: int, largest: bool):
    rank = len(self.shape)
    if rank == 0:
        return op.Identity(self), op.Constant(value=ir.tensor(0, dtype=ir.DataType.INT64))
    axis = dim % rank
    prefixes = _prefixes(_size(self, axis))
    indices = _window_arg_extreme(self, axis, rank, prefixes, largest, last=True, floating=_floating(self))
    return op.GatherElements(self, indices, axis=axis), indices


@_traced
def adaptive_max_pool2d(self, output_size: Sequence[int]):
    """The maximum of each adaptive window over the last two axes and its index in the flattened
    ``H × W`` plane (ties: the first in row-major order; NaN: the last NaN), as PyTorch. Separable:
    each row's window maxima along the width, then the maxima of those along the height. The values
    are reduced on their own (`_pooled_max`), so unused indices leave nothing in the graph."""
    rank = len(self.shape)
    height, width, floating = rank - 2, rank - 1, _floating(self)
    columns = _window_arg_extreme(
        self, width, rank, adaptive_windows(_size(self, width), output_size[1]), True, False, floating
    )
    row_maxima = op.GatherElements(self, columns, axis=width)
    rows = _window_arg_extreme(
        row_maxima, height, rank, adaptive_windows(_size(self, height), output_size[0]), True, False, floating
    )
    flat = op.Add(op.Mul(rows, _size(self, width)), op.GatherElements(columns, rows, axis=height))
    return _pooled_max(self, list(output_size[:2])), flat


@_traced
def adaptive_max_pool1d(self, output_size: Sequence[int]):
    """The maximum of each adaptive window along the last axis and its index (ties and NaN as 2-D)."""
    axis = len(self.shape) - 1
    indices = _window_arg_extreme(
        self, axis, axis + 1, adaptive_windows(_size(self, axis), output_size[0]), True, False, _floating(self)
    )
    return _pooled_max(self, [output_size[0]]), indices


def _pooled_max(x, outs: list[int]):
    """The maxima of adaptive pooling's windows over the last ``len(outs)`` axes of `x`, NaN for a window
    with a NaN (as PyTorch; onnxruntime's reductions drop a NaN depending on its position). Output size 1
    everywhere: the largest of the flattened axes (any size, `_global_max`); static sizes that `outs` divide: windows of
    equal size that tile each axis, a ``MaxPool`` of batched floats (5x faster than a reshaped reduction
    in onnxruntime) or else reduced after a reshape; otherwise a masked reduction per axis."""
    rank, floating = len(x.shape), _floating(x)
    axes = list(range(rank - len(outs), rank))
    sizes = [x.shape[axis] for axis in axes]
    if all(out == 1 for out in outs):
        return _global_max(x, len(outs)) if floating else _max_over(axes, keepdims=True)(x)
    if all(isinstance(n, int) and n % out == 0 for n, out in zip(sizes, outs)):
        kernel = [n // out for n, out in zip(sizes, outs)]
        if floating and axes[0] == 2:
            return _nan_kept(lambda v: op.MaxPool(v, kernel_shape=kernel, strides=kernel)[0], x, floating)
        tiled = op.Reshape(x, op.Constant(value_ints=[0] * axes[0] + [d for t in zip(outs, kernel) for d in t]))
        reduced = [axes[0] + 2 * i + 1 for i in range(len(outs))]
        return _nan_kept(_max_over(reduced, keepdims=False), tiled, floating)
    for axis, out in zip(reversed(axes), reversed(outs)):
        if out == 1:
            x = _nan_kept(_max_over([axis], keepdims=True), x, floating)
            continue
        spread, inside = _spread(x, adaptive_windows(_size(x, axis), out), axis, rank)
        masked = op.Where(inside, spread, _fill(x, axis, True, floating))
        x = _nan_kept(_max_over([axis + 1], keepdims=False), masked, floating)
    return x


def _global_max(x, trailing: int):
    """The maximum over the last `trailing` axes of floating `x`, kept as size-1 axes, NaN if any: a
    ``TopK`` of the flattened axes (onnxruntime's TopK propagates a NaN anywhere; its reductions do not,
    and ``IsNaN`` beside a ``ReduceMax`` costs twice as much)."""
    lead = len(x.shape) - trailing
    largest = op.TopK(op.Flatten(x, axis=lead), op.Constant(value_ints=[1]), axis=-1)[0]  # an empty batch too
    return op.Reshape(largest, op.Concat(op.Shape(x, end=lead), op.Constant(value_ints=[1] * trailing), axis=0))


def _max_over(axes: list[int], keepdims: bool):
    """``ReduceMax`` over `axes`, as a function of its input."""
    return lambda x: op.ReduceMax(x, op.Constant(value_ints=axes), keepdims=int(keepdims))


def _nan_kept(reduce, x, floating: bool):
    """``reduce(x)``, a max reduction, NaN where it reduces a NaN (for `floating` values)."""
    largest = reduce(x)
    if not floating:
        return largest
    nans = reduce(op.Cast(op.IsNaN(x), to=ir.DataType.FLOAT))
    return op.Where(op.Cast(nans, to=ir.DataType.BOOL), op.CastLike(float("nan"), largest), largest)


def adaptive_windows(size, out: int):
    """The ``[out, size]`` mask of adaptive pooling's windows: row i is ``[floor(i*n/o), ceil((i+1)*n/o))``."""
    zero, one, count = op.Constant(value_int=0), op.Constant(value_int=1), op.Constant(value_int=out)
    n = op.Squeeze(size)
    cells = op.Range(zero, count, one)
    start = op.Div(op.Mul(cells, n), count)  # non-negative: integer division floors
    end = op.Div(op.Add(op.Mul(op.Add(cells, one), n), op.Sub(count, one)), count)
    positions = op.Unsqueeze(op.Range(zero, n, one), op.Constant(value_ints=[0]))
    start, end = (op.Unsqueeze(v, op.Constant(value_ints=[1])) for v in (start, end))
    return op.And(op.GreaterOrEqual(positions, start), op.Less(positions, end))


def _prefixes(size):
    """The ``[n, n]`` mask whose row i is the prefix ``[0, i]``."""
    positions = op.Range(op.Constant(value_int=0), op.Squeeze(size), op.Constant(value_int=1))
    row = op.Unsqueeze(positions, op.Constant(value_ints=[0]))
    return op.LessOrEqual(row, op.Unsqueeze(positions, op.Constant(value_ints=[1])))


def _size(x, axis: int):
    """The 1-element size of `x` along a non-negative `axis`."""
    return op.Shape(x, start=axis, end=axis + 1)


def _spread(x, inside, axis: int, rank: int):
    """`x` with a window axis inserted before `axis`, and the ``[windows, n]`` mask shaped to broadcast
    against it (``[windows, n, 1, …]``)."""
    trailing = list(range(2, rank - axis + 1))
    if trailing:
        inside = op.Unsqueeze(inside, op.Constant(value_ints=trailing))
    return op.Unsqueeze(x, op.Constant(value_ints=[axis])), inside


def _floating(x) -> bool:
    return x.dtype in _FLOATS


def _window_arg_extreme(x, axis: int, rank: int, inside, largest: bool, last: bool, floating: bool):
    """The index along `axis` of each window's maximum (or minimum) in `x` (of rank `rank`, `floating`
    or not: an intermediate value has no type yet): of equal ones the `last` or the first; a window
    with a NaN gives its last NaN (PyTorch's rule for cummax and max pooling). Shaped as `x`, with the
    windows along `axis`."""
    spread, inside = _spread(x, inside, axis, rank)
    reduced = op.Constant(value_ints=[axis + 1])
    reduce = op.ReduceMax if largest else op.ReduceMin
    extreme = reduce(op.Where(inside, spread, _fill(x, axis, largest, floating)), reduced, keepdims=1)
    positions = op.Range(op.Constant(value_int=0), op.Squeeze(_size(x, axis)), op.Constant(value_int=1))
    positions = op.Unsqueeze(positions, op.Constant(value_ints=[0, *range(2, rank - axis + 1)]))
    hits = op.And(inside, op.Equal(spread, extreme))
    if last:
        index = op.ReduceMax(op.Where(hits, positions, op.Constant(value_int=-1)), reduced, keepdims=0)
    else:
        index = op.ReduceMin(op.Where(hits, positions, op.Squeeze(_size(x, axis))), reduced, keepdims=0)
    if floating:
        nans = op.And(inside, op.IsNaN(spread))
        last_nan = op.ReduceMax(op.Where(nans, positions, op.Constant(value_int=-1)), reduced, keepdims=0)
        index = op.Where(op.GreaterOrEqual(last_nan, op.Constant(value_int=0)), last_nan, index)
    return index


def _fill(x, axis: int, largest: bool, floating: bool):
    """What a masked reduction of `x` along `axis` puts outside a window: below (above) every element,
    ``-inf`` (``inf``) for floats; otherwise the row's own minimum (maximum), spread as `_spread`'s `x`."""
    if floating:
        return op.CastLike(float("-inf") if largest else float("inf"), x)
    bound = (op.ReduceMin if largest else op.ReduceMax)(x, op.Constant(value_ints=[axis]), keepdims=1)
    return op.Unsqueeze(bound, op.Constant(value_ints=[axis]))


FUNCTIONS = {
    OpName("aten", "cumprod"): cumprod,
    OpName("aten", "cummax"): cummax,
    OpName("aten", "cummin"): cummin,
    OpName("aten", "adaptive_max_pool2d"): adaptive_max_pool2d,
    OpName("aten", "adaptive_max_pool1d"): adaptive_max_pool1d,
}
"""ONNX functions for window reductions torchlib does not translate."""
