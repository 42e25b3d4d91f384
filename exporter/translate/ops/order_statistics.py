"""``torch.nanmedian``, which torchlib does not translate: the lower median of the values that are not NaN."""

from __future__ import annotations

from onnxscript import INT64, values
from onnxscript import opset18 as op

from exporter.constants import DOMAIN_COMPOSITES
from exporter.translate.opname import OpName


def _traced(fn):
    return values.TracedOnnxFunction(values.Opset(DOMAIN_COMPOSITES, 1), fn)


@_traced
def nanmedian_dim(self, dim: int = 0, keepdim: bool = False):
    """The lower median along `dim` of the values that are not NaN, and its index; NaN (and the first
    NaN's index) where all are NaN."""
    if len(self.shape) == 0:
        return op.Identity(self), op.Constant(value_int=0)
    axis = dim % len(self.shape)
    values, indices = _nanmedian(self, axis)
    if not keepdim:
        values, indices = (op.Squeeze(t, op.Constant(value_ints=[axis])) for t in (values, indices))
    return values, indices


@_traced
def nanmedian(self):
    """The lower median of all values that are not NaN (NaN if all are)."""
    flat = op.Reshape(self, op.Constant(value_ints=[-1]))
    flat.dtype = self.dtype
    values, _ = _nanmedian(flat, 0)
    return op.Reshape(values, op.Constant(value_ints=[]))


def _nanmedian(x, axis: int):
    """Median values and indices along `axis`, kept as an axis of size 1. NaN sorts as +inf, after every
    number (ONNX's TopK puts equal values in index order, so a NaN comes after an infinity before it)."""
    present = op.Equal(x, x)  # not NaN
    keys = op.Where(present, x, op.CastLike(float("inf"), x)) if x.dtype.is_floating_point() else x
    _, order = op.TopK(keys, op.Shape(x, start=axis, end=axis + 1), axis=axis, largest=0, sorted=1)
    count = op.ReduceSum(op.Cast(present, to=INT64.dtype), op.Constant(value_ints=[axis]), keepdims=1)
    middle = op.Div(op.Sub(op.Max(count, op.Constant(value_int=1)), op.Constant(value_int=1)), op.Constant(value_int=2))
    index = op.GatherElements(order, middle, axis=axis)
    return op.GatherElements(x, index, axis=axis), index


FUNCTIONS = {
    OpName("aten", "nanmedian", "dim"): nanmedian_dim,
    OpName("aten", "nanmedian"): nanmedian,
}
"""ONNX functions for order statistics torchlib does not translate."""
