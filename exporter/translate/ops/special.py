"""Special functions torchlib does not translate: ``torch.special.erfinv`` (``torch.erfinv``), ``torch.lgamma``
(``torch.special.gammaln``), ``torch.digamma`` (``torch.special.psi``), the modified Bessel functions
``torch.special.i0``/``i0e``/``i1``/``i1e`` (and ``torch.kaiser_window``, made of ``i0``) and the normal quantile
``torch.special.ndtri``.

The gamma functions are computed in float64: shifted up by 8 (their recurrences) to where Stirling's series
converges, reflected below 1/2, with PyTorch's values at the poles, zeros of either sign and infinities.
The Bessel functions and ``ndtri`` are the Cephes library's approximations PyTorch's own kernels use, in
float64.
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
# Cephes' Chebyshev series (chbevl) of exp(-x) I0(x) and exp(-x) I1(x) on [0, 8], in x/2 - 2 (the _A tables), and of
# exp(-x) √x I0(x) and exp(-x) √x I1(x) above 8, in 32/x - 2 (_B), as PyTorch's float64 kernels use them
_I0E_A = (
    -4.41534164647933937950e-18, 3.33079451882223809783e-17, -2.43127984654795469359e-16, 1.71539128555513303061e-15,
    -1.16853328779934516808e-14, 7.67618549860493561688e-14, -4.85644678311192946090e-13, 2.95505266312963983461e-12,
    -1.72682629144155570723e-11, 9.67580903537323691224e-11, -5.18979560163526290666e-10, 2.65982372468238665035e-9,
    -1.30002500998624804212e-8, 6.04699502254191894932e-8, -2.67079385394061173391e-7, 1.11738753912010371815e-6,
    -4.41673835845875056359e-6, 1.64484480707288970893e-5, -5.75419501008210370398e-5, 1.88502885095841655729e-4,
    -5.76375574538582365885e-4, 1.63947561694133579842e-3, -4.32430999505057594430e-3, 1.05464603945949983183e-2,
    -2.37374148058994688156e-2, 4.93052842396707084878e-2, -9.49010970480476444210e-2, 1.71620901522208775349e-1,
    -3.04682672343198398683e-1, 6.76795274409476084995e-1,
)  # fmt: skip
_I0E_B = (
    -7.23318048787475395456e-18, -4.83050448594418207126e-18, 4.46562142029675999901e-17, 3.46122286769746109310e-17,
    -2.82762398051658348494e-16, -3.42548561967721913462e-16, 1.77256013305652638360e-15, 3.81168066935262242075e-15,
    -9.55484669882830764870e-15, -4.15056934728722208663e-14, 1.54008621752140982691e-14, 3.85277838274214270114e-13,
    7.18012445138366623367e-13, -1.79417853150680611778e-12, -1.32158118404477131188e-11, -3.14991652796324136454e-11,
    1.18891471078464383424e-11, 4.94060238822496958910e-10, 3.39623202570838634515e-9, 2.26666899049817806459e-8,
    2.04891858946906374183e-7, 2.89137052083475648297e-6, 6.88975834691682398426e-5, 3.36911647825569408990e-3,
    8.04490411014108831608e-1,
)  # fmt: skip
_I1E_A = (
    2.77791411276104639959e-18, -2.11142121435816608115e-17, 1.55363195773620046921e-16, -1.10559694773538630805e-15,
    7.60068429473540693410e-15, -5.04218550472791168711e-14, 3.22379336594557470981e-13, -1.98397439776494371520e-12,
    1.17361862988909016308e-11, -6.66348972350202774223e-11, 3.62559028155211703701e-10, -1.88724975172282928790e-9,
    9.38153738649577178388e-9, -4.44505912879632808065e-8, 2.00329475355213526229e-7, -8.56872026469545474066e-7,
    3.47025130813767847674e-6, -1.32731636560394358279e-5, 4.78156510755005422638e-5, -1.61760815825896745588e-4,
    5.12285956168575772895e-4, -1.51357245063125314899e-3, 4.15642294431288815669e-3, -1.05640848946261981558e-2,
    2.47264490306265168283e-2, -5.29459812080949914269e-2, 1.02643658689847095384e-1, -1.76416518357834055153e-1,
    2.52587186443633654823e-1,
)  # fmt: skip
_I1E_B = (
    7.51729631084210481353e-18, 4.41434832307170791151e-18, -4.65030536848935832153e-17, -3.20952592199342395980e-17,
    2.96262899764595013876e-16, 3.30820231092092828324e-16, -1.88035477551078244854e-15, -3.81440307243700780478e-15,
    1.04202769841288027642e-14, 4.27244001671195135429e-14, -2.10154184277266431302e-14, -4.08355111109219731823e-13,
    -7.19855177624590851209e-13, 2.03562854414708950722e-12, 1.41258074366137813316e-11, 3.25260358301548823856e-11,
    -1.89749581235054123450e-11, -5.58974346219658380687e-10, -3.83538038596423702205e-9, -2.63146884688951950684e-8,
    -2.51223623787020892529e-7, -3.88256480887769039346e-6, -1.10588938762623716291e-4, -9.76109749136146840777e-3,
    7.78576235018280120474e-1,
)  # fmt: skip
# Cephes' ndtri: P0/Q0 for |y - 1/2| <= 3/8 (in (y - 1/2)²); P1/Q1 for z = √(-2 log y) in [2, 8), P2/Q2 from 8 (in 1/z)
_NDTRI_P0 = (
    -5.99633501014107895267e1, 9.80010754185999661536e1, -5.66762857469070293439e1, 1.39312609387279679503e1,
    -1.23916583867381258016e0,
)  # fmt: skip
_NDTRI_Q0 = (
    1.0, 1.95448858338141759834e0, 4.67627912898881538453e0, 8.63602421390890590575e1, -2.25462687854119370527e2,
    2.00260212380060660359e2, -8.20372256168333339912e1, 1.59056225126211695515e1, -1.18331621121330003142e0,
)  # fmt: skip
_NDTRI_P1 = (
    4.05544892305962419923e0, 3.15251094599893866154e1, 5.71628192246421288162e1, 4.40805073893200834700e1,
    1.46849561928858024014e1, 2.18663306850790267539e0, -1.40256079171354495875e-1, -3.50424626827848203418e-2,
    -8.57456785154685413611e-4,
)  # fmt: skip
_NDTRI_Q1 = (
    1.0, 1.57799883256466749731e1, 4.53907635128879210584e1, 4.13172038254672030440e1, 1.50425385692907503408e1,
    2.50464946208309415979e0, -1.42182922854787788574e-1, -3.80806407691578277194e-2, -9.33259480895457427372e-4,
)  # fmt: skip
_NDTRI_P2 = (
    3.23774891776946035970e0, 6.91522889068984211695e0, 3.93881025292474443415e0, 1.33303460815807542389e0,
    2.01485389549179081538e-1, 1.23716634817820021358e-2, 3.01581553508235416007e-4, 2.65806974686737550832e-6,
    6.23974539184983293730e-9,
)  # fmt: skip
_NDTRI_Q2 = (
    1.0, 6.02427039364742014255e0, 3.67983563856160859403e0, 1.37702099489081330271e0, 2.16236993594496635890e-1,
    1.34204006088543189037e-2, 3.28014464682127739104e-4, 2.89247864745380683936e-6, 6.79019408009981274425e-9,
)  # fmt: skip
_EXP_MINUS_2 = 0.13533528323661269189


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
def i0e(self):
    """``i0`` scaled by exp(-|x|) (0 at ±inf)."""
    return op.CastLike(_scaled_bessel(op.Abs(op.Cast(self, to=DOUBLE.dtype)), 0), self)


@_traced
def i1(self):
    """The modified Bessel function of the first kind of order 1, odd (NaN at ±inf, as PyTorch's)."""
    x = op.Cast(self, to=DOUBLE.dtype)
    magnitude = op.Abs(x)
    return op.CastLike(op.Mul(op.Sign(x), op.Mul(op.Exp(magnitude), _scaled_bessel(magnitude, 1))), self)


@_traced
def i1e(self):
    """``i1`` scaled by exp(-|x|)."""
    x = op.Cast(self, to=DOUBLE.dtype)
    return op.CastLike(op.Mul(op.Sign(x), _scaled_bessel(op.Abs(x), 1)), self)


@_traced
def ndtri(self):
    """The standard normal quantile (Cephes' rational approximations, in float64): ∓inf at 0 and 1, NaN
    outside [0, 1]."""
    y0 = op.Cast(self, to=DOUBLE.dtype)
    upper = op.Greater(y0, _f64(1.0 - _EXP_MINUS_2))
    y = op.Where(upper, op.Sub(_f64(1.0), y0), y0)  # the tail nearer y: 1 - y for the upper one
    centred = op.Sub(y0, _f64(0.5))
    squared = op.Mul(centred, centred)
    central = op.Mul(
        op.Add(
            centred,
            op.Mul(centred, op.Div(op.Mul(squared, _polynomial(_NDTRI_P0, squared)), _polynomial(_NDTRI_Q0, squared))),
        ),
        _f64(math.sqrt(2 * math.pi)),
    )
    safe = op.Where(op.Greater(y, _f64(0.0)), y, _f64(0.5))
    z = op.Sqrt(op.Mul(_f64(-2.0), op.Log(safe)))
    inverse = op.Reciprocal(z)
    near = op.Div(_polynomial(_NDTRI_P1, inverse), _polynomial(_NDTRI_Q1, inverse))
    far = op.Div(_polynomial(_NDTRI_P2, inverse), _polynomial(_NDTRI_Q2, inverse))
    tail = op.Sub(op.Sub(z, op.Div(op.Log(z), z)), op.Mul(inverse, op.Where(op.Less(z, _f64(8.0)), near, far)))
    tail = op.Where(upper, tail, op.Neg(tail))
    result = op.Where(op.Greater(y, _f64(_EXP_MINUS_2)), central, tail)
    result = op.Where(op.Equal(y0, _f64(0.0)), _f64(-math.inf), result)
    result = op.Where(op.Equal(y0, _f64(1.0)), _f64(math.inf), result)
    inside = op.And(op.GreaterOrEqual(y0, _f64(0.0)), op.LessOrEqual(y0, _f64(1.0)))  # false for NaN
    return op.CastLike(op.Where(inside, result, _f64(math.nan)), self)


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
    return op.Mul(op.Exp(x), _scaled_bessel(x, 0))


def _scaled_bessel(x, order: int):
    """exp(-x) I0(x) or exp(-x) I1(x) of float64 `x` >= 0 (Cephes' i0e/i1e)."""
    a, b = (_I0E_A, _I0E_B) if order == 0 else (_I1E_A, _I1E_B)
    small = _chebyshev(a, op.Sub(op.Div(x, _f64(2.0)), _f64(2.0)))
    if order == 1:
        small = op.Mul(small, x)
    large = op.Div(_chebyshev(b, op.Sub(op.Div(_f64(32.0), x), _f64(2.0))), op.Sqrt(x))
    return op.Where(op.LessOrEqual(x, _f64(8.0)), small, large)


def _chebyshev(coefficients, x):
    """Cephes' ``chbevl``: the Chebyshev series of `coefficients` (highest order first, the first term halved) at `x`."""
    b0, b1, b2 = _f64(coefficients[0]), _f64(0.0), _f64(0.0)
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = op.Add(op.Sub(op.Mul(x, b1), b2), _f64(c))
    return op.Mul(_f64(0.5), op.Sub(b0, b2))


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
    OpName("aten", "special_i0e"): i0e,
    OpName("aten", "special_i1"): i1,
    OpName("aten", "special_i1e"): i1e,
    OpName("aten", "special_ndtri"): ndtri,
    OpName("aten", "kaiser_window"): kaiser_window,
    OpName("aten", "kaiser_window", "periodic"): kaiser_window,
    OpName("aten", "kaiser_window", "beta"): kaiser_window,
}
"""ONNX functions for special functions torchlib does not translate."""
