"""Elementwise arithmetic torchlib does not translate: ``torch.copysign``, ``torch.hypot``, ``torch.frexp``,
``torch.gcd`` and ``torch.lcm`` (PyTorch's decompositions of them end in primitives torchlib lacks too:
``prims.signbit``, ``prims.hypot``, ``prims.frexp``, ``prims.gcd``)."""

from __future__ import annotations

import math

import onnx_ir as ir
from onnxscript import DOUBLE, FLOAT, INT32, values
from onnxscript import opset18 as op

from exporter.constants import DOMAIN_COMPOSITES
from exporter.translate.opname import OpName
from exporter.translate.ops import corrections

_FLOATS = {ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16}
# Euclid's algorithm takes at most about 1.44 steps per bit (consecutive Fibonacci numbers are its worst case)
_EUCLID_STEPS = {
    ir.DataType.UINT8: 13,
    ir.DataType.INT8: 12,
    ir.DataType.INT16: 24,
    ir.DataType.INT32: 47,
    ir.DataType.INT64: 93,
}


def _traced(fn):
    return values.TracedOnnxFunction(values.Opset(DOMAIN_COMPOSITES, 1), fn)


@_traced
def copysign(self, other):
    """`self`'s magnitude with `other`'s sign bit (-0.0 is negative); integers give floats, as in PyTorch."""
    if self.dtype not in _FLOATS:
        self = op.Cast(self, to=FLOAT.dtype)
    magnitude = op.Abs(self)
    if isinstance(other, (int, float)):  # copysign.Scalar
        return op.Neg(magnitude) if math.copysign(1.0, other) < 0 else magnitude
    return op.Where(corrections.signbit(other), op.Neg(magnitude), magnitude)


@_traced
def hypot(self, other):
    """√(a² + b²) without overflow or underflow (C's ``hypot``): the larger magnitude times √(1 + r²), r the
    smaller over the larger; an infinity gives inf even beside NaN."""
    a, b = op.Abs(self), op.Abs(other)
    a_larger = op.Greater(a, b)
    large, small = op.Where(a_larger, a, b), op.Where(a_larger, b, a)  # a NaN ends up in either
    zero = op.CastLike(0.0, large)
    ratio = op.Where(op.Equal(large, zero), zero, op.Div(small, large))
    result = op.Mul(large, op.Sqrt(op.Add(op.CastLike(1.0, ratio), op.Mul(ratio, ratio))))
    return op.Where(op.Or(op.IsInf(a), op.IsInf(b)), op.CastLike(float("inf"), result), result)


@_traced
def frexp(self):
    """Mantissa in [0.5, 1) in magnitude and int32 exponent with ``self = mantissa · 2^exponent``; zeros,
    infinities and NaN come back whole with exponent 0. Computed in float64, where every float32
    subnormal's power of two is normal."""
    x = op.Cast(self, to=DOUBLE.dtype)
    magnitude = op.Abs(x)
    regular = op.And(op.Greater(magnitude, _f64(0.0)), op.Not(op.IsInf(magnitude)))  # false for NaN
    safe = op.Where(regular, magnitude, _f64(1.0))
    exponent = op.Add(op.Floor(op.Div(op.Log(safe), _f64(0.6931471805599453))), _f64(1.0))
    # the logarithm may be a step off next to a power of two: one correction either way
    exponent = op.Add(
        exponent, op.Cast(op.GreaterOrEqual(op.Div(safe, op.Pow(_f64(2.0), exponent)), _f64(1.0)), to=DOUBLE.dtype)
    )
    exponent = op.Sub(exponent, op.Cast(op.Less(op.Div(safe, op.Pow(_f64(2.0), exponent)), _f64(0.5)), to=DOUBLE.dtype))
    exponent = op.Where(regular, exponent, _f64(0.0))
    mantissa = op.Where(regular, op.Div(x, op.Pow(_f64(2.0), exponent)), x)
    return op.CastLike(mantissa, self), op.Cast(exponent, to=INT32.dtype)


@_traced
def gcd(self, other):
    """The greatest common divisor of the magnitudes (0 for two zeros): Euclid's algorithm unrolled for
    its worst case in the integer type."""
    a, b = op.Abs(self), op.Abs(op.CastLike(other, self))
    zero, one = op.CastLike(0, a), op.CastLike(1, a)
    for _ in range(_EUCLID_STEPS[self.dtype]):
        done = op.Equal(b, zero)
        remainder = op.Mod(a, op.Where(done, one, b))
        a, b = op.Where(done, a, b), op.Where(done, zero, remainder)
    return a


@_traced
def lcm(self, other):
    """The least common multiple of the magnitudes, |a / gcd(a, b) · b| (0 if either is 0), in PyTorch's
    order of operations (it wraps around as PyTorch's does)."""
    divisor = gcd(self, other)
    zero = op.CastLike(0, divisor)
    safe = op.Where(op.Equal(divisor, zero), op.CastLike(1, divisor), divisor)
    multiple = op.Abs(op.Mul(op.Div(self, safe), op.CastLike(other, self)))
    return op.Where(op.Equal(divisor, zero), zero, multiple)


def _f64(value: float):
    return op.Constant(value=ir.tensor(value, dtype=ir.DataType.DOUBLE))


FUNCTIONS = {
    OpName("aten", "copysign", "Tensor"): copysign,
    OpName("aten", "copysign", "Scalar"): copysign,
    OpName("aten", "hypot"): hypot,
    OpName("aten", "frexp", "Tensor"): frexp,
    OpName("aten", "gcd"): gcd,
    OpName("aten", "lcm"): lcm,
}
"""ONNX functions for elementwise arithmetic torchlib does not translate."""
