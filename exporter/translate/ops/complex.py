"""Complex-valued variants torchlib lacks, on the real representation (a trailing dimension of 2).

Complex einsum decomposes into these (``bmm``, ``unsqueeze``, ``full_like``/``zeros_like``).
"""

from __future__ import annotations

from onnxscript import opset18 as op
from onnxscript import values

from exporter.constants import DOMAIN_COMPLEX
from exporter.translate.opname import OpName

_OPSET = values.Opset(DOMAIN_COMPLEX, 1)


def _traced(fn):
    return values.TracedOnnxFunction(_OPSET, fn)


def _part(x, index: int):
    return op.Gather(x, op.Constant(value_int=index), axis=-1)


@_traced
def complex_bmm(self, mat2):
    """(a + bi)(c + di) = (ac - bd) + (ad + bc)i, batched matmul on each part."""
    a, b, c, d = _part(self, 0), _part(self, 1), _part(mat2, 0), _part(mat2, 1)
    real = op.Sub(op.MatMul(a, c), op.MatMul(b, d))
    imag = op.Add(op.MatMul(a, d), op.MatMul(b, c))
    last = op.Constant(value_ints=[-1])
    return op.Concat(op.Unsqueeze(real, last), op.Unsqueeze(imag, last), axis=-1)


@_traced
def complex_unsqueeze(self, dim: int):
    """Negative dims count from the end of the complex shape: skip the trailing (real, imag) axis."""
    axis = dim - 1 if dim < 0 else dim
    return op.Unsqueeze(self, op.Constant(value_ints=[axis]))


@_traced
def complex_full_like(self, fill_value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    """A tensor shaped like `self` (real representation included) holding `fill_value`."""
    value = complex(fill_value)
    pair = op.CastLike(op.Constant(value_floats=[value.real, value.imag]), self)
    return op.Expand(pair, op.Shape(self))


FUNCTIONS = {
    OpName("aten", "bmm"): complex_bmm,
    OpName("aten", "unsqueeze"): complex_unsqueeze,
    OpName("aten", "full_like"): complex_full_like,
}
