"""Special functions torchlib does not translate: ``torch.special.erfinv`` (``torch.erfinv``), ``torch.lgamma``
(``torch.special.gammaln``), ``torch.digamma`` (``torch.special.psi``), ``torch.special.i0`` (``torch.i0``) and
``torch.kaiser_window``, which is made of it.

The gamma functions are computed in float64: shifted up by 8 (their recurrences) to where Stirling's series
converges, reflected below 1/2, with PyTorch's values at the poles, zeros of either sign and infinities.
``i0`` is Abramowitz and Stegun's 9.8.1/9.8.2 (relative error below 2e-7), also in float64.
"""

from __future__ import annotations

import math

import onnx_ir as ir
from onnxscript import DOUBLE, values
from onnxscript import opset18 as op

from exporter.constants import DOMAIN_COMPOSITES
from exporter.translate.opname import OpName

# M. Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single precision: the central
# polynomial in w - 2.5 (w < 5), the tail's in sqrt(w) - 3, w = -log(1 - x²); highest degree first.
_CENTRAL = (
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
)
_TAIL = (
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
)


def _traced(fn):
    return values.TracedOnnxFunction(values.Opset(DOMAIN_COMPOSITES, 1), fn)


@_traced
def erfinv(self):
    """The inverse error function, within 3e-7 relative of PyTorch's over (-1, 1) (in float32; float64
    inputs get the same accuracy); ±1 → ±inf, outside [-1, 1] and NaN → NaN."""
    one = op.CastLike(1.0, self)
    w = op.Neg(op.Log(op.Mul(op.Sub(one, self), op.Add(one, self))))  # NaN outside [-1, 1], inf at ±1
    central = _polynomial(_CENTRAL, op.Sub(w, op.CastLike(2.5, self)))
    tail = _polynomial(_TAIL, op.Sub(op.Sqrt(w), op.CastLike(3.0, self)))
    y = op.Mul(op.Where(op.Less(w, op.CastLike(5.0, self)), central, tail), self)
    infinite = op.Mul(op.Sign(self), op.CastLike(float("inf"), self))
    return op.Where(op.Equal(op.Abs(self), one), infinite, y)


_SHIFT = 8  # the recurrences' steps up to where the series converge (within float64 rounding at 8)
# Stirling's series of log Γ(z) - ((z - 1/2) log z - z + log(2π)/2), in 1/z: B_2k / (2k (2k - 1) z^(2k - 1))
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188)
# the asymptotic series of ψ(z) - (log z - 1/(2z)), over 1/z² and in 1/z²: -B_2k / (2k z^2k)
_PSI = (-1 / 12, 1 / 120, -1 / 252, 1 / 240, -1 / 132)
# Abramowitz and Stegun 9.8.1 (|x| <= 3.75, in (x/3.75)², highest degree first) and 9.8.2 (|x| > 3.75, in 3.75/|x|)
_I0_SMALL = (0.0045813, 0.0360768, 0.2659732, 1.2067492, 3.0899424, 3.5156229, 1.0)
_I0_LARGE = (
    0.00392377,
    -0.01647633,
    0.02635537,
    -0.02057706,
    0.00916281,
    -0.00157565,
    0.00225319,
    0.01328592,
    0.39894228,
)


@_traced
def lgamma(self):
    """log |Γ(x)|: +inf at 0, at the negative integers and at ±inf, NaN for NaN."""
    x = op.Cast(self, to=DOUBLE.dtype)
    reflected = op.Less(x, _f64(0.5))
    z = op.Where(reflected, op.Sub(_f64(1.0), x), x)  # z >= 1/2
    shifted, small = _shifted(z)
    product = z
    for i in range(1, _SHIFT):
        product = op.Mul(product, op.Add(z, _f64(float(i))))
    inverse = op.Reciprocal(shifted)
    series = op.Mul(_series(_STIRLING, op.Mul(inverse, inverse)), inverse)
    stirling = op.Add(
        op.Sub(op.Mul(op.Sub(shifted, _f64(0.5)), op.Log(shifted)), shifted),
        op.Add(_f64(0.5 * math.log(2 * math.pi)), series),
    )
    result = op.Sub(stirling, op.Where(small, op.Log(product), _f64(0.0)))
    sine = op.Abs(op.Sin(op.Mul(x, _f64(math.pi))))
    result = op.Where(reflected, op.Sub(op.Sub(_f64(math.log(math.pi)), op.Log(sine)), result), result)
    pole = op.Or(op.And(op.LessOrEqual(x, _f64(0.0)), op.Equal(op.Floor(x), x)), op.IsInf(x))
    return op.CastLike(op.Where(pole, _f64(math.inf), result), self)


@_traced
def digamma(self):
    """ψ(x), the logarithmic derivative of Γ: -inf at +0, +inf at -0, NaN at the negative integers and -inf."""
    x = op.Cast(self, to=DOUBLE.dtype)
    reflected = op.Less(x, _f64(0.5))
    z = op.Where(reflected, op.Sub(_f64(1.0), x), x)
    shifted, small = _shifted(z)
    steps = op.Reciprocal(z)
    for i in range(1, _SHIFT):
        steps = op.Add(steps, op.Reciprocal(op.Add(z, _f64(float(i)))))
    inverse = op.Reciprocal(shifted)
    squared = op.Mul(inverse, inverse)
    asymptotic = op.Add(op.Sub(op.Log(shifted), op.Mul(_f64(0.5), inverse)), op.Mul(_series(_PSI, squared), squared))
    result = op.Sub(asymptotic, op.Where(small, steps, _f64(0.0)))
    angle = op.Mul(x, _f64(math.pi))
    cotangent = op.Div(op.Mul(_f64(math.pi), op.Cos(angle)), op.Sin(angle))  # onnxruntime has no float64 Tan
    result = op.Where(reflected, op.Sub(result, cotangent), result)
    negative_integer = op.And(op.Less(x, _f64(0.0)), op.Equal(op.Floor(x), x))  # -inf too
    result = op.Where(negative_integer, _f64(math.nan), result)
    zero = op.Equal(x, _f64(0.0))
    return op.CastLike(op.Where(zero, op.Neg(op.Reciprocal(x)), result), self)  # -1/±0: ∓inf


@_traced
def i0(self):
    """The modified Bessel function of the first kind of order 0 (NaN at ±inf, as PyTorch's)."""
    return op.CastLike(_i0(op.Cast(self, to=DOUBLE.dtype)), self)


@_traced
def kaiser_window(
    window_length,
    periodic: bool = True,
    beta: float = 12.0,
    dtype: int = -1,
    layout: str = "",
    device: str = "",
    pin_memory: bool = False,
):
    """PyTorch's Kaiser window: I0(β √(1 - (2n/(N - 1) - 1)²)) / I0(β) for n < the window's length, N the length
    (one more when `periodic`); a window of length 1 is 1."""
    size = op.Cast(window_length, to=DOUBLE.dtype)
    n = op.Range(_f64(0.0), size, _f64(1.0))
    span = size if periodic else op.Sub(size, _f64(1.0))
    ratio = op.Sub(op.Div(op.Mul(n, _f64(2.0)), span), _f64(1.0))
    argument = op.Mul(_f64(beta), op.Sqrt(op.Max(op.Sub(_f64(1.0), op.Mul(ratio, ratio)), _f64(0.0))))
    window = op.Div(_i0(argument), _i0(_f64(beta)))
    window = op.Where(op.Equal(size, _f64(1.0)), _f64(1.0), window)
    return op.Cast(window, to=dtype if dtype not in (None, -1) else ir.DataType.FLOAT)


def _i0(x):
    """`i0` of float64 `x`."""
    x = op.Abs(x)
    t = op.Div(x, _f64(3.75))
    small = _polynomial(_I0_SMALL, op.Mul(t, t))
    large = op.Div(op.Mul(_polynomial(_I0_LARGE, op.Reciprocal(t)), op.Exp(x)), op.Sqrt(x))
    return op.Where(op.LessOrEqual(x, _f64(3.75)), small, large)


def _shifted(z):
    """`z`, or `z` + 8 where it is below 8 (whether it is: the recurrence's steps then count)."""
    small = op.Less(z, _f64(float(_SHIFT)))
    return op.Where(small, op.Add(z, _f64(float(_SHIFT))), z), small


def _series(coefficients, t):
    """c0 + c1 t + c2 t² + … (lowest degree first)."""
    return _polynomial(coefficients[::-1], t)


def _f64(value: float):
    return op.Constant(value=ir.tensor(value, dtype=ir.DataType.DOUBLE))


def _polynomial(coefficients, t):
    result = op.CastLike(coefficients[0], t)
    for c in coefficients[1:]:
        result = op.Add(op.Mul(result, t), op.CastLike(c, t))
    return result


FUNCTIONS = {
    OpName("aten", "erfinv"): erfinv,
    OpName("aten", "special_erfinv"): erfinv,
    OpName("aten", "lgamma"): lgamma,
    OpName("aten", "special_gammaln"): lgamma,
    OpName("aten", "digamma"): digamma,
    OpName("aten", "special_digamma"): digamma,
    OpName("aten", "special_psi"): digamma,
    OpName("aten", "i0"): i0,
    OpName("aten", "special_i0"): i0,
    OpName("aten", "kaiser_window"): kaiser_window,
    OpName("aten", "kaiser_window", "periodic"): kaiser_window,
    OpName("aten", "kaiser_window", "beta"): kaiser_window,
}
"""ONNX functions for special functions torchlib does not translate."""
