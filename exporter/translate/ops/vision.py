"""torchvision's ``batched_nms`` (captured as ``onnxlens::batched_nms``, see `exporter.capture.vision`).

torchlib translates ``torchvision::nms``, ``roi_align`` and ``roi_pool``; class-wise NMS is its ``nms``
on boxes moved apart by class, as torchvision computes it.
"""

from __future__ import annotations

from onnxscript import opset18 as op
from onnxscript import values

from exporter.constants import DOMAIN_COMPOSITES
from exporter.translate.opname import OpName

_INT64_MAX = 0x7FFFFFFFFFFFFFFF


def _traced(fn):
    return values.TracedOnnxFunction(values.Opset(DOMAIN_COMPOSITES, 1), fn)


@_traced
def batched_nms(boxes, scores, idxs, iou_threshold: float):
    """Indices of the boxes NMS keeps within each class (`idxs`), by decreasing score."""
    largest = op.ReduceMax(boxes, keepdims=0)
    offsets = op.Mul(op.CastLike(idxs, boxes), op.Add(largest, op.CastLike(1, boxes)))
    moved = op.Add(boxes, op.Unsqueeze(offsets, [1]))
    selected = op.NonMaxSuppression(
        op.Unsqueeze(moved, [0]),
        op.Unsqueeze(scores, [0, 1]),
        op.Constant(value_int=_INT64_MAX),
        op.Constant(value_float=iou_threshold),
    )
    return op.Reshape(op.Slice(selected, [2], [3], [1]), op.Constant(value_ints=[-1]))


FUNCTIONS = {OpName("onnxlens", "batched_nms"): batched_nms}
