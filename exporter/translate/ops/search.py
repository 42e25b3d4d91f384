"""``torch.searchsorted`` and ``torch.bucketize``, which torchlib does not translate.

PyTorch's own binary search, unrolled: one step per bit of the row length (31 steps, rows below 2^31
elements, where the length is dynamic), each value's ``[start, end)`` halved on ``not (s[mid] >= v)``
(``not (s[mid] > v)`` for the right side). So the result is PyTorch's even for a NaN value (it goes to
the end) and for a sequence that is not sorted, as a second-size check's random inputs are.
"""

from __future__ import annotations

from onnxscript import INT32, values
from onnxscript import opset18 as op

from exporter.constants import DOMAIN_COMPOSITES
from exporter.translate.opname import OpName


def _traced(fn):
    return values.TracedOnnxFunction(values.Opset(DOMAIN_COMPOSITES, 1), fn)


@_traced
def searchsorted(sorted_sequence, self, out_int32: bool = False, right: bool = False, side: str = "", sorter=None):
    """Indices at which `self` would be inserted in the last axis of `sorted_sequence` (1-D: for every
    value; N-D: row by row), after equal elements if `right` or ``side="right"``; `sorter` sorts it."""
    shape = sorted_sequence.shape  # read before the gather: its result has no shape yet
    if sorter is not None:
        sorted_sequence = op.GatherElements(sorted_sequence, sorter, axis=-1)
    return _insertion_indices(sorted_sequence, shape, self, right or side == "right", out_int32)


@_traced
def bucketize(self, boundaries, out_int32: bool = False, right: bool = False):
    """The bucket of each value of `self` among the sorted 1-D `boundaries` (`searchsorted` with the
    arguments swapped)."""
    return _insertion_indices(boundaries, boundaries.shape, self, right, out_int32)


def _insertion_indices(sequence, shape, values, right: bool, out_int32: bool):
    """PyTorch's binary search for `values` in the last axis of `sequence` (of `shape`)."""
    values = op.CastLike(values, sequence)  # a Python number for the Scalar overloads
    length = shape[-1]
    size = op.Shape(sequence, start=-1)
    start = op.Expand(op.Constant(value_int=0), op.Shape(values))
    end = op.Expand(op.Squeeze(size), op.Shape(values))
    steps = length.bit_length() if isinstance(length, int) else _DYNAMIC_STEPS
    last, two = op.Sub(op.Squeeze(size), op.Constant(value_int=1)), op.Constant(value_int=2)
    for _ in range(steps):
        middle = op.Div(op.Add(start, end), two)
        middle_index = op.Min(middle, last)  # in range where the search is over (start == end == N)
        if len(shape) == 1:
            middle_value = op.Gather(sequence, middle_index, axis=0)
        else:
            middle_value = op.GatherElements(sequence, middle_index, axis=-1)
        after = op.Not((op.Greater if right else op.GreaterOrEqual)(middle_value, values))
        searching = op.Less(start, end)
        start = op.Where(op.And(searching, after), op.Add(middle, op.Constant(value_int=1)), start)
        end = op.Where(op.And(searching, op.Not(after)), middle, end)
    return op.Cast(start, to=INT32.dtype) if out_int32 else start


_DYNAMIC_STEPS = 31


FUNCTIONS = {
    OpName("aten", "searchsorted", "Tensor"): searchsorted,
    OpName("aten", "searchsorted", "Scalar"): searchsorted,
    OpName("aten", "bucketize", "Tensor"): bucketize,
    OpName("aten", "bucketize", "Scalar"): bucketize,
}
"""ONNX functions for sorted-sequence searches torchlib does not translate."""
