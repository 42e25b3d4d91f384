"""Translations that replace torchlib's where torchlib computes something other than PyTorch.

Each wraps torchlib's own function and corrects only what differs; found by the optional-argument
sweep (tests/test_optional_args.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import onnx_ir as ir
from onnxscript import INT64, values
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.ops import common as common_ops
from onnxscript.function_libs.torch_lib.ops import core, nn

from exporter.constants import DOMAIN_CORRECTIONS
from exporter.translate.opname import OpName
from exporter.translate.ops import linalg, quantization

_OPSET = values.Opset(DOMAIN_CORRECTIONS, 1)


def _traced(fn):
    return values.TracedOnnxFunction(_OPSET, fn)


@_traced
def hamming_window(window_length: int, dtype: int = 1, layout: str = "", device: str = "", pin_memory: bool = False):
    """PyTorch's Hamming window, 0.54 - 0.46 cos(2πn/N) = 0.08 + 0.92 · Hann (torchlib uses ONNX's
    HammingWindow, whose coefficients are 25/46 and 21/46)."""
    hann = core.aten_hann_window(window_length, dtype)
    return op.Add(op.Mul(hann, op.CastLike(0.92, hann)), op.CastLike(0.08, hann))


def _avg_pool(torchlib_pool, dims: int):
    def pool(
        self,
        kernel_size: Sequence[int],
        stride: Sequence[int] = (),
        padding: Sequence[int] = (0,) * dims,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ):
        """torchlib ignores `divisor_override`: the window sum is the padded average times the
        kernel size, then divided by the override."""
        if divisor_override is None:
            return torchlib_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad)
        if ceil_mode:
            raise NotImplementedError("avg_pool with both divisor_override and ceil_mode=True")
        kernel = list(kernel_size) * dims if len(kernel_size) == 1 else list(kernel_size)
        average = torchlib_pool(self, kernel_size, stride, padding, False, True)
        return op.Mul(average, op.CastLike(math.prod(kernel) / divisor_override, average))

    pool.__name__ = f"avg_pool{dims}d"
    return _traced(pool)


@_traced
def native_batch_norm_legit_functional(
    input,
    weight=None,
    bias=None,
    running_mean=None,
    running_var=None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    """In training, torchlib normalizes with the running statistics: PyTorch normalizes with the
    batch's, and moves the running ones towards them by `momentum` (with the unbiased variance)."""
    if not training:
        return core.aten__native_batch_norm_legit_functional(
            input, weight, bias, running_mean, running_var, False, momentum, eps
        )
    # Without running statistics torchlib normalizes with the batch's and returns them (variance biased).
    norm, save_mean, save_rstd, mean, variance = core.aten__native_batch_norm_legit_functional(
        input, weight, bias, None, None, False, momentum, eps
    )
    count = op.CastLike(op.Div(op.Size(input), op.Shape(input, start=1, end=2)), variance)  # per channel
    unbiased = op.Mul(variance, op.Div(count, op.Sub(count, op.CastLike(1.0, variance))))
    keep, step = op.CastLike(1.0 - momentum, variance), op.CastLike(momentum, variance)
    new_mean = op.Add(op.Mul(running_mean, keep), op.Mul(mean, step))
    new_variance = op.Add(op.Mul(running_var, keep), op.Mul(unbiased, step))
    return norm, save_mean, save_rstd, new_mean, new_variance


@_traced
def squeeze_dims(self, dim):
    """PyTorch squeezes only those of the given axes whose size is 1 and leaves the others (ONNX's
    Squeeze fails on them; torchlib squeezes every axis it is given). A symbolic size is never 1:
    torch.export specializes sizes 0 and 1, so the static shape decides."""
    rank = len(self.shape)
    if rank == 0:
        return op.Identity(self)
    axes = sorted({d % rank for d in (dim if isinstance(dim, Sequence) else [dim])})
    ones = [a for a in axes if isinstance(self.shape[a], int) and self.shape[a] == 1]
    return op.Squeeze(self, op.Constant(value_ints=ones)) if ones else op.Identity(self)


@_traced
def grouped_mm(self, mat2, offs=None, bias=None, out_dtype: int = -1):
    """``torch._grouped_mm`` with offsets, as mixture-of-experts layers call it (torchlib refuses
    them): rows of `self` sorted by expert, expert ``e``'s rows ending at ``offs[e]``, multiplied by
    ``mat2[e]``. One MatMul per expert (their number is static) on its rows, gathered by a Range as
    transformers' own ONNX exporter does; rows after the last offset are zeros. Also translates
    ``transformers::grouped_mm_fallback`` (input, weight, offs), which computes the same."""
    if offs is None:
        return core.aten_grouped_mm(self, mat2, offs, bias, out_dtype)
    if len(self.shape) != 2 or len(mat2.shape) != 3:
        raise NotImplementedError(
            "grouped_mm with offsets is translated for a 2-D input and 3-D weights (mixture of experts)"
        )
    experts = mat2.shape[0]
    axis_0, one = op.Constant(value_ints=[0]), op.Constant(value_int=1)
    offs = op.Cast(offs, to=INT64.dtype)
    ends = op.Split(offs, axis=0, num_outputs=experts) if experts > 1 else [offs]
    weights = op.Split(mat2, axis=0, num_outputs=experts) if experts > 1 else [mat2]
    biases = (op.Split(bias, axis=0, num_outputs=experts) if experts > 1 else [bias]) if bias is not None else None
    start, parts = op.Constant(value_int=0), []
    for e in range(experts):
        end = op.Squeeze(ends[e], axis_0)
        product = op.MatMul(op.Gather(self, op.Range(start, end, one), axis=0), op.Squeeze(weights[e], axis_0))
        parts.append(op.Add(product, op.Squeeze(biases[e], axis_0)) if biases is not None else product)
        start = end
    rest = op.Unsqueeze(op.Sub(op.Squeeze(op.Shape(self, start=0, end=1), axis_0), start), axis_0)
    parts.append(
        op.Expand(
            op.CastLike(op.Constant(value_float=0.0), parts[0]), op.Concat(rest, op.Shape(mat2, start=2, end=3), axis=0)
        )
    )
    result = op.Concat(*parts, axis=0)
    return op.Cast(result, to=out_dtype) if out_dtype not in (None, -1) else result


@_traced
def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
):
    """Attention of any rank ``(..., L, E)``, as PyTorch takes it (Hiera's 5-D windows); torchlib's takes
    4-D tensors only. The leading dimensions (the query's; key, value and mask are expanded to them)
    become one batch axis, with one head. Grouped-query attention repeats the key and value heads here
    where torchlib's cannot: head counts not known at export (``dynamic_shapes=True``), other ranks."""
    if enable_gqa and not (len(query.shape) == 4 and isinstance(query.shape[1], int) and isinstance(key.shape[1], int)):
        key, value, enable_gqa = _repeat_heads(key, query), _repeat_heads(value, query), False
    if len(query.shape) == 4:
        return nn.aten_scaled_dot_product_attention(
            query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa
        )
    leading = op.Shape(query, start=0, end=-2)

    def as_4d(tensor, last_two, dims):
        """`tensor` expanded to the query's leading dimensions and `last_two`, then made 4-D."""
        expanded = op.Expand(tensor, op.Concat(leading, last_two, axis=0))
        flat = op.Reshape(expanded, op.Concat(op.Constant(value_ints=[-1, 1]), last_two, axis=0))
        flat.dtype, flat.shape = tensor.dtype, ir.Shape([None, 1, *dims])  # torchlib's function reads them
        return flat

    q, k, v = (as_4d(t, op.Shape(t, start=-2), t.shape[-2:]) for t in (query, key, value))
    if attn_mask is not None and len(attn_mask.shape) > 2:  # (L, S) broadcasts as it is
        lengths = op.Concat(op.Shape(query, start=-2, end=-1), op.Shape(key, start=-2, end=-1), axis=0)
        attn_mask = as_4d(attn_mask, lengths, [query.shape[-2], key.shape[-2]])
    if scale is None:  # from the query's last dimension, which the reshape may leave unknown
        scale = 1.0 / math.sqrt(query.shape[-1]) if isinstance(query.shape[-1], int) else None
    out = nn.aten_scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return op.Reshape(out, op.Concat(op.Shape(query, start=0, end=-1), op.Shape(value, start=-1), axis=0))


def _repeat_heads(tensor, query):
    """Key or value heads ``(..., Hk, S, E)`` each repeated ``Hq / Hk`` times, in place (PyTorch's
    ``repeat_interleave`` over dimension -3), to the query's ``Hq``."""
    groups = op.Div(op.Shape(query, start=-3, end=-2), op.Shape(tensor, start=-3, end=-2))
    before, after = op.Shape(tensor, start=0, end=-2), op.Shape(tensor, start=-2)
    expanded = op.Expand(op.Unsqueeze(tensor, op.Constant(value_ints=[-3])), op.Concat(before, groups, after, axis=0))
    repeated = op.Reshape(
        expanded, op.Concat(op.Shape(tensor, start=0, end=-3), op.Shape(query, start=-3, end=-2), after, axis=0)
    )
    repeated.dtype, repeated.shape = tensor.dtype, ir.Shape([*tensor.shape[:-3], query.shape[-3], *tensor.shape[-2:]])
    return repeated


@_traced
def signbit(self):
    """PyTorch's sign bit, which -0.0 has too (torchlib tests ``x < 0``): a zero's sign shows in its
    reciprocal, -inf. ONNX cannot read a NaN's sign bit before opset 26's BitCast: NaN gives False."""
    if self.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        return core.aten_signbit(self)
    zero = op.CastLike(0.0, self)
    negative_zero = op.And(op.Equal(self, zero), op.Less(op.Reciprocal(self), zero))
    return op.Or(op.Less(self, zero), negative_zero)


@_traced
def convert_element_type(a, dtype: int):
    """torchlib's cast, for every input type ONNX's Cast takes (torchlib's declares real types only, so a
    bool tensor made an integer, as masks are counted, drew FXE0014 warnings)."""
    return common_ops.cast_to(a, dtype)


@_traced
def copy(self, src, non_blocking: bool = False):
    """`src` broadcast to `self`'s shape, as PyTorch copies it (torchlib only casts it: ``torch.vander``'s
    decomposition copies a column into every column of a matrix)."""
    result = op.CastLike(src, self)
    if src.shape is not None and self.shape is not None and list(src.shape) == list(self.shape):
        return result
    return op.Expand(result, op.Shape(self))


@_traced
def index(self, indices: Sequence):
    """torchlib's ``self[indices]`` with int64 indices (see `_int64`)."""
    return core.aten_index(self, _int64(indices))


@_traced
def index_put(self, indices: Sequence, values, accumulate: bool = False):
    """torchlib's ``index_put`` with int64 indices (see `_int64`)."""
    return core.aten_index_put(self, _int64(indices), values, accumulate)


def _int64(indices: Sequence) -> list:
    """Integer indices of another type than int64 (PyTorch takes int32 ones: ``torch.istft``'s
    decomposition makes them) cast to int64: torchlib hands them to ONNX's GatherND and ScatterND, which
    take int64 only."""
    wide = []
    for index in indices:
        if index is not None and index.dtype not in (ir.DataType.INT64, ir.DataType.BOOL):
            cast = op.Cast(index, to=INT64.dtype)
            cast.dtype, cast.shape = ir.DataType.INT64, index.shape  # torchlib's function reads them
            index = cast
        wide.append(index)
    return wide


@_traced
def scatter_reduce(self, dim: int, index, src, reduce: str, include_self: bool = True):
    """PyTorch's ``scatter_reduce``: torchlib assigns for "mean" (ONNX's ScatterElements has no mean),
    and scatters all of `src` where PyTorch reads only the part as large as `index`. A mean is the sum
    over the count of values, `self`'s included when `include_self`; a position nothing is scattered to
    keeps its value; integers are floor-divided."""
    if src.shape is None or index.shape is None or list(src.shape) != list(index.shape):
        src = op.Slice(src, op.Constant(value_ints=[0] * len(index.shape)), op.Shape(index))
        src.dtype, src.shape = self.dtype, index.shape
    if reduce != "mean":
        return core.aten_scatter_reduce(self, dim, index, src, reduce, include_self)
    zeros, ones = op.ConstantOfShape(op.Shape(index)), op.Expand(op.Constant(value_float=1.0), op.Shape(index))
    if not include_self:
        self = op.ScatterElements(self, index, op.CastLike(zeros, self), axis=dim)
    total = op.ScatterElements(self, index, src, axis=dim, reduction="add")
    start = op.Expand(op.Constant(value_float=1.0 if include_self else 0.0), op.Shape(self))
    count = op.ScatterElements(start, index, ones, axis=dim, reduction="add")
    count = op.CastLike(op.Max(count, op.Constant(value_float=1.0)), self)  # nothing scattered: self / 1
    if self.dtype in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        return op.Div(total, count)
    quotient = op.Div(total, count)  # truncated; the count is positive, so floor is one less for an inexact negative
    inexact_negative = op.And(op.Less(total, op.CastLike(0, total)), op.Not(op.Equal(op.Mul(quotient, count), total)))
    return op.Sub(quotient, op.CastLike(inexact_negative, quotient))


FUNCTIONS = {
    OpName("aten", "squeeze", "dim"): squeeze_dims,
    OpName("aten", "hamming_window"): hamming_window,
    OpName("aten", "signbit"): signbit,
    OpName("aten", "logdet"): linalg.logdet,
    OpName("aten", "copy"): copy,
    OpName("prims", "convert_element_type"): convert_element_type,
    OpName("aten", "index", "Tensor"): index,
    OpName("aten", "_unsafe_index", "Tensor"): index,
    OpName("aten", "index_put"): index_put,
    OpName("aten", "_unsafe_index_put"): index_put,
    OpName("aten", "scatter_reduce", "two"): scatter_reduce,
    OpName("aten", "avg_pool2d"): _avg_pool(nn.aten_avg_pool2d, 2),
    OpName("aten", "avg_pool3d"): _avg_pool(nn.aten_avg_pool3d, 3),
    OpName("aten", "_native_batch_norm_legit_functional"): native_batch_norm_legit_functional,
    OpName("aten", "_grouped_mm"): grouped_mm,
    OpName("aten", "scaled_dot_product_attention"): scaled_dot_product_attention,
    **quantization.CORRECTIONS,
}
