"""PT2E's quantize/dequantize operators (``quantized_decomposed::*``) and torchao's int8 matrix product
(``aten._int_mm``) where torchlib lacks them or computes something else: dynamic quantization's ``choose_qparams`` (scale and zero point from the tensor's range, as
``torch.ao.quantization.utils.determine_qparams`` computes them), and quantization with a scale and zero point
given as tensors (``choose_qparams``' outputs: float64 and int64 of shape [1]) or with a range narrower than
its type (``reduce_range=True``: 0…127 in uint8).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import FLOAT, values
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.ops import common

from exporter.constants import DOMAIN_COMPOSITES, DOMAIN_CORRECTIONS
from exporter.translate.opname import OpName


def _composite(fn):
    return values.TracedOnnxFunction(values.Opset(DOMAIN_COMPOSITES, 1), fn)


def _correction(fn):
    return values.TracedOnnxFunction(values.Opset(DOMAIN_CORRECTIONS, 1), fn)


@_composite
def choose_qparams(input, quant_min: int, quant_max: int, eps: float, dtype: int):
    """Affine: the range of `input` widened to hold 0, over the quantized range (at least `eps`); the zero
    point maps the range's low end to `quant_min`."""
    low, high = _range_with_zero(input)
    scale = op.Max(op.Div(op.Sub(high, low), _float(quant_max - quant_min)), _float(eps))
    zero_point = op.Sub(_float(quant_min), op.Round(op.Div(low, scale)))
    zero_point = op.Clip(zero_point, _float(quant_min), _float(quant_max))
    return _qparams(scale, zero_point)


@_composite
def choose_qparams_symmetric(input, quant_min: int, quant_max: int, eps: float, dtype: int):
    """Symmetric: the larger of the range's ends over half the quantized range (at least `eps`); the zero point
    is 128 in uint8, else 0."""
    low, high = _range_with_zero(input)
    scale = op.Max(op.Div(op.Max(op.Neg(low), high), _float((quant_max - quant_min) / 2)), _float(eps))
    zero_point = _float(128 if dtype == ir.DataType.UINT8 else 0)
    return _qparams(scale, zero_point)


def _range_with_zero(input):
    low = op.Min(op.ReduceMin(input, keepdims=0), op.CastLike(0, input))
    high = op.Max(op.ReduceMax(input, keepdims=0), op.CastLike(0, input))
    return op.Cast(low, to=FLOAT.dtype), op.Cast(high, to=FLOAT.dtype)


def _float(value: float):
    return op.Constant(value=ir.tensor(np.float32(value)))


def _qparams(scale, zero_point):
    """As PyTorch returns them: float64 and int64, of shape [1]."""
    one = op.Constant(value_ints=[1])
    return op.Reshape(op.Cast(scale, to=ir.DataType.DOUBLE), one), op.Reshape(
        op.Cast(zero_point, to=ir.DataType.INT64), one
    )


@_correction
def quantize_per_tensor(input, scale, zero_point, quant_min: int, quant_max: int, dtype: int):
    """``clamp(round(input * (1 / scale)) + zero_point, quant_min, quant_max)``.

    A number `scale` (static quantization) is ONNX's QuantizeLinear, which onnxruntime fuses with the
    DequantizeLinear after it into its int8 kernels (it divides by the scale: a value exactly half a step from
    two may round the other way), then a Clip in integers for a range narrower than `dtype`'s, as torchlib's
    per-channel quantization does. A tensor `scale` (dynamic quantization: nothing to fuse) is PyTorch's
    arithmetic, to the rounding: symmetric quantization puts the extreme value exactly half a step out.
    """
    limits = np.iinfo(ir.DataType(dtype).numpy())
    if isinstance(scale, (int, float)):
        quantized = op.QuantizeLinear(input, op.CastLike(_float(scale), input), _zero_point(zero_point, dtype))
        if (quant_min, quant_max) == (limits.min, limits.max):
            return quantized
        return op.Clip(quantized, common.constant(quant_min, dtype=dtype), common.constant(quant_max, dtype=dtype))
    inverse = op.CastLike(op.Div(op.CastLike(1.0, scale), _scalar(scale)), input)  # 1.0 / scale.item()
    shifted = op.Add(op.Round(op.Mul(input, inverse)), op.CastLike(_scalar(zero_point), input))
    clipped = op.Clip(shifted, op.CastLike(quant_min, input), op.CastLike(quant_max, input))
    return op.Cast(clipped, to=dtype)


@_correction
def dequantize_per_tensor(
    input, scale, zero_point, quant_min: int, quant_max: int, dtype: int, out_dtype: int | None = None
):
    """``(input - zero_point) * scale``, in float32 (or `out_dtype`) whatever type the scale has."""
    dequantized = op.DequantizeLinear(input, _scale(scale), _zero_point(zero_point, dtype))
    return dequantized if out_dtype in (None, -1) else op.Cast(dequantized, to=out_dtype)


def _scalar(tensor):
    """A tensor of one element as a scalar (``.item()``)."""
    return op.Reshape(tensor, op.Constant(value_ints=[]))


def _scale(scale):
    """A float32 scalar: a number, or a tensor of one element."""
    return _float(scale) if isinstance(scale, (int, float)) else op.Cast(_scalar(scale), to=FLOAT.dtype)


def _zero_point(zero_point, dtype: int):
    if isinstance(zero_point, (int, float)):
        return common.constant(int(zero_point), dtype=dtype)
    return op.Cast(_scalar(zero_point), to=dtype)


@_composite
def int_mm(self, mat2):
    """``torch._int_mm``: int8 matrices multiplied with int32 sums (torchao's int8 dynamic quantization)."""
    return op.MatMulInteger(self, mat2)


FUNCTIONS = {
    OpName("aten", "_int_mm"): int_mm,
    OpName("quantized_decomposed", "choose_qparams", "tensor"): choose_qparams,
    OpName("quantized_decomposed", "choose_qparams_symmetric", "tensor"): choose_qparams_symmetric,
}
CORRECTIONS = {
    **{
        OpName("quantized_decomposed", "quantize_per_tensor", o): quantize_per_tensor
        for o in ("default", "tensor", "tensor2")
    },
    **{
        OpName("quantized_decomposed", "dequantize_per_tensor", o): dequantize_per_tensor
        for o in ("default", "tensor", "tensor2")
    },
}
