"""torchvision's ``batched_nms`` as one operator, ``onnxlens::batched_nms``, while a model is captured.

``torchvision.ops.batched_nms`` picks its algorithm by the number of boxes (a per-class loop over
``torch.unique`` above 4000 coordinates) and returns early when there are none: Python branches on a
size that depends on the data, which capture cannot follow. Both algorithms keep the same boxes; the
operator computes the other one, the class offsets ("coordinate trick"), for every count, and is
translated to ONNX's ``NonMaxSuppression`` (`exporter.translate.ops.vision`). The function is swapped
by code, so the names a model imported keep working; nothing changes when torchvision is not imported.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import torch


@torch.library.custom_op("onnxlens::batched_nms", mutates_args=())
def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Indices of the boxes ``torchvision::nms`` keeps class by class, by decreasing score."""
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    offsets = idxs.to(boxes) * (boxes.max() + 1)
    return torch.ops.torchvision.nms(boxes + offsets[:, None], scores, iou_threshold)


@batched_nms.register_fake
def _(boxes, scores, idxs, iou_threshold):
    kept = torch.library.get_ctx().new_dynamic_size()
    return boxes.new_empty((kept,), dtype=torch.int64)


def _batched_nms(boxes, scores, idxs, iou_threshold):
    """While capturing: the body of torchvision's ``batched_nms``."""
    return torch.ops.onnxlens.batched_nms(boxes, scores, idxs, iou_threshold)


@contextlib.contextmanager
def capturing() -> Iterator[None]:
    """torchvision's ``batched_nms`` as `batched_nms` while a model is captured."""
    boxes = sys.modules.get("torchvision.ops.boxes")
    if boxes is None:
        yield
        return
    function = boxes.batched_nms
    code = function.__code__
    try:
        function.__code__ = _batched_nms.__code__
        yield
    finally:
        function.__code__ = code
