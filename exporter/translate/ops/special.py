"""Special functions torchlib does not translate: ``torch.special.erfinv`` (``torch.erfinv``)."""

from __future__ import annotations

from onnxscript import opset18 as op
from onnxscript import values

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


def _polynomial(coefficients, t):
    result = op.CastLike(coefficients[0], t)
    for c in coefficients[1:]:
        result = op.Add(op.Mul(result, t), op.CastLike(c, t))
    return result


FUNCTIONS = {
    OpName("aten", "erfinv"): erfinv,
    OpName("aten", "special_erfinv"): erfinv,
}
"""ONNX functions for special functions torchlib does not translate."""
