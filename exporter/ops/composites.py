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


FUNCTIONS = {
    OpName("aten", "batch_norm"): batch_norm,
}
"""ONNX functions for composite operators torchlib does not translate."""
