"""Composite PyTorch operators that torch.export keeps whole and torchlib does not translate (and
functions of symbolic sizes: ``torch.sym_min``, ``sym_max``, ``sym_float``, ``x.numel()``).

Each is built from torchlib's own functions. Without them the exporter decomposes every such node
with a ``make_fx`` trace (~5 ms per distinct signature), most of a CNN export's passes stage.
"""

from __future__ import annotations

from collections.abc import Sequence

from onnxscript import FLOAT, INT64, values
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.ops import core

from exporter.constants import DOMAIN_COMPOSITES
from exporter.translate.opname import OpName
from exporter.translate.ops import corrections, window_reductions


def _traced(fn):
    return values.TracedOnnxFunction(values.Opset(DOMAIN_COMPOSITES, 1), fn)


@_traced
def batch_norm(
    input,
    weight=None,
    bias=None,
    running_mean=None,
    running_var=None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
    cudnn_enabled: bool = True,
):
    """``F.batch_norm``: the running statistics normalize in evaluation, the batch's in training
    (whose update of the running statistics an inference model drops, as PyTorch's decomposition
    does when nothing reads them)."""
    if training or running_mean is None or running_var is None:
        running_mean = running_var = None  # torchlib then normalizes with the batch's statistics
    return core.aten_native_batch_norm(input, weight, bias, running_mean, running_var, False, momentum, eps)[0]


@_traced
def adaptive_avg_pool2d(self, output_size: Sequence[int]):
    """Each output cell averages its window, ``[floor(i*n/o), ceil((i+1)*n/o))`` along each axis: one
    reduction for a global pool; equal windows that tile a static batched input, an ``AveragePool``;
    otherwise averaging matrices on each side (``W_h @ x @ W_w^T``) built from the input's size at run
    time, so the pooling stays right for dynamic heights and widths (PyTorch's decomposition fixes the
    export's kernel)."""
    if all(size == 1 for size in output_size):
        return core.aten_mean_dim(self, [-2, -1], True)
    sizes = list(self.shape[-2:]) if self.shape is not None and len(self.shape) == 4 else []
    if sizes and all(isinstance(n, int) and n % out == 0 for n, out in zip(sizes, output_size)):
        kernel = [n // out for n, out in zip(sizes, output_size)]
        return op.AveragePool(self, kernel_shape=kernel, strides=kernel)
    height = _window_weights(op.Shape(self, start=-2, end=-1), output_size[0], self)
    width = _window_weights(op.Shape(self, start=-1), output_size[1], self)
    return op.MatMul(op.MatMul(height, self), op.Transpose(width, perm=[1, 0]))


@_traced
def adaptive_avg_pool1d(self, output_size: Sequence[int]):
    """`adaptive_avg_pool2d`'s averaging, along the last axis only."""
    if output_size[0] == 1:
        return core.aten_mean_dim(self, [-1], True)
    return op.MatMul(self, op.Transpose(_window_weights(op.Shape(self, start=-1), output_size[0], self), perm=[1, 0]))


def _window_weights(size, out: int, like):
    """The ``[out, size]`` matrix whose row i averages adaptive pooling window i of an axis of `size`."""
    inside = op.CastLike(window_reductions.adaptive_windows(size, out), like)
    return op.Div(inside, op.ReduceSum(inside, op.Constant(value_ints=[1]), keepdims=1))


@_traced
def median_dim(self, dim: int, keepdim: bool = False):
    """The lower median along `dim`, the ``(n + 1) // 2``-th smallest element, and its index."""
    n = op.Shape(self, start=dim, end=dim + 1) if dim != -1 else op.Shape(self, start=-1)
    return _kth_smallest(
        self, op.Div(op.Add(n, op.Constant(value_ints=[1])), op.Constant(value_ints=[2])), dim, keepdim
    )


@_traced
def median(self):
    """The lower median of all elements."""
    values, _ = median_dim(op.Reshape(self, op.Constant(value_ints=[-1])), 0, False)
    return values


@_traced
def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False):
    """The k-th smallest element along `dim` (from 1) and its index."""
    return _kth_smallest(self, op.Reshape(op.Cast(k, to=INT64.dtype), op.Constant(value_ints=[1])), dim, keepdim)


def _kth_smallest(self, k, dim: int, keepdim: bool):
    """Values and indices of the `k`-th smallest elements along `dim` (`k`: a 1-element tensor)."""
    values, indices = op.TopK(self, k, axis=dim, largest=0, sorted=1)
    last = op.Sub(k, op.Constant(value_ints=[1]))
    values, indices = op.Gather(values, last, axis=dim), op.Gather(indices, last, axis=dim)
    if not keepdim:
        axis = op.Constant(value_ints=[dim])
        values, indices = op.Squeeze(values, axis), op.Squeeze(indices, axis)
    return values, indices


@_traced
def masked_select(self, mask):
    """The elements of `self` where `mask` is True, the two broadcast together, in row-major order as one
    axis (its length is data-dependent): a ``Compress`` of both flattened."""
    self = op.Expand(self, op.Shape(mask))
    mask = op.Expand(mask, op.Shape(self))
    flat = op.Constant(value_ints=[-1])
    return op.Compress(op.Reshape(self, flat), op.Reshape(mask, flat), axis=0)


@_traced
def sym_numel(self):
    """``x.numel()`` of a tensor with symbolic sizes."""
    return op.ReduceProd(op.Shape(self), keepdims=0)


@_traced
def sym_min(a, b):
    """``torch.sym_min`` of two sizes, either of which may be a number (Swin's ``min(window, resolution)``)."""
    return op.Min(a, b)


@_traced
def sym_max(a, b):
    """``torch.sym_max`` of two sizes, either of which may be a number (MPT's ``max(seq, past + seq)``)."""
    return op.Max(a, b)


@_traced
def sym_float(self):
    """``float(n)`` of a symbolic size, in single precision as torchlib's ``truediv`` of sizes."""
    return op.Cast(self, to=FLOAT.dtype)


@_traced
def to_dtype(self, dtype: int = -1, non_blocking: bool = False, copy: bool = False, memory_format: str = ""):
    """``x.to(dtype)``: a cast (one to the same type is removed by the optimizer)."""
    return core.aten__to_copy(self, dtype)


@_traced
def to_device(
    self, device: str = "", dtype: int = -1, non_blocking: bool = False, copy: bool = False, memory_format: str = ""
):
    """``x.to(device, dtype)``: a cast; the device means nothing in an ONNX model."""
    return core.aten__to_copy(self, dtype)


@_traced
def to_dtype_layout(
    self,
    dtype: int = -1,
    layout: str = "",
    device: str = "",
    pin_memory: bool = False,
    non_blocking: bool = False,
    copy: bool = False,
    memory_format: str = "",
):
    """``x.to(dtype=…, device=…)``: a cast, or the tensor itself without a dtype."""
    return core.aten__to_copy(self, dtype)


@_traced
def index_reduce(self, dim: int, index, source, reduce: str, include_self: bool = True):
    """``self.index_reduce(dim, index, source, reduce)``: the scatter reduction of `source` to the positions
    `index` names along `dim` (`index` spread over `source`'s other axes)."""
    rank = len(source.shape)
    axis = dim % rank if rank else 0
    shape = op.Constant(value_ints=[-1 if d == axis else 1 for d in range(rank)])
    spread = op.Expand(op.Reshape(index, shape), op.Shape(source))
    spread.dtype, spread.shape = index.dtype, source.shape
    return corrections.scatter_reduce(self, axis, spread, source, reduce, include_self)


FUNCTIONS = {
    OpName("aten", "batch_norm"): batch_norm,
    OpName("aten", "median", "dim"): median_dim,
    OpName("aten", "median"): median,
    OpName("aten", "kthvalue"): kthvalue,
    OpName("aten", "masked_select"): masked_select,
    OpName("onnxlens", "lstm"): core.aten_lstm,  # aten.lstm.input with a symbolic length (capture/recurrent.py)
    OpName("onnxlens", "gru"): core.aten_gru,
    OpName("aten", "squeeze", "dims"): corrections.squeeze_dims,  # torchlib has squeeze.dim only
    OpName("transformers", "grouped_mm_fallback"): corrections.grouped_mm,  # transformers' MoE experts
    OpName("aten", "adaptive_avg_pool2d"): adaptive_avg_pool2d,
    OpName("aten", "_adaptive_avg_pool2d"): adaptive_avg_pool2d,
    OpName("aten", "adaptive_avg_pool1d"): adaptive_avg_pool1d,
    OpName("aten", "to", "dtype"): to_dtype,
    OpName("aten", "to", "device"): to_device,
    OpName("aten", "to", "dtype_layout"): to_dtype_layout,
    OpName("aten", "__and__", "Tensor"): core.aten_bitwise_and,
    OpName("aten", "__or__", "Tensor"): core.aten_bitwise_or,
    OpName("aten", "__xor__", "Tensor"): core.aten_bitwise_xor,
    OpName("aten", "min", "other"): core.aten_minimum,
    OpName("aten", "max", "other"): core.aten_maximum,
    OpName("torch", "sym_min"): sym_min,
    OpName("torch", "sym_max"): sym_max,
    OpName("torch", "sym_float"): sym_float,
    OpName("torch", "sym_not"): core.aten_logical_not,
    OpName("aten", "sym_numel"): sym_numel,
    OpName("aten", "index_reduce"): index_reduce,
}
"""ONNX functions for composite operators torchlib does not translate."""
