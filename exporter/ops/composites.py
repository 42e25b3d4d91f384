"""Composite PyTorch operators that torch.export keeps whole and torchlib does not translate.

Each is built from torchlib's own functions. Without them the exporter decomposes every such node
with a ``make_fx`` trace (~5 ms per distinct signature), most of a CNN export's passes stage.
"""

from __future__ import annotations

from onnxscript import values
from onnxscript.function_libs.torch_lib.ops import core

from exporter.constants import DOMAIN_COMPOSITES
from exporter.opname import OpName


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


FUNCTIONS = {
    OpName("aten", "batch_norm"): batch_norm,
    OpName("aten", "to", "dtype"): to_dtype,
    OpName("aten", "to", "device"): to_device,
    OpName("aten", "to", "dtype_layout"): to_dtype_layout,
    OpName("aten", "__and__", "Tensor"): core.aten_bitwise_and,
    OpName("aten", "__or__", "Tensor"): core.aten_bitwise_or,
    OpName("aten", "__xor__", "Tensor"): core.aten_bitwise_xor,
    OpName("aten", "min", "other"): core.aten_minimum,
    OpName("aten", "max", "other"): core.aten_maximum,
}
"""ONNX functions for composite operators torchlib does not translate."""
