"""torchvision's detection steps whose Python follows the data, as single operators while a model is captured.

Capture cannot follow a Python branch or loop on a size that depends on the data; torchvision has four:

- ``torchvision.ops.batched_nms`` picks its algorithm by the number of boxes and returns early when there
  are none: ``onnxlens::batched_nms`` computes one of them (class offsets, the "coordinate trick") for
  every count.
- ``poolers._multiscale_roi_align`` (R-CNN heads) allocates its result with ``len(rois)`` and pools each
  pyramid level's boxes in a loop: ``onnxlens::multiscale_roi_align`` maps boxes to levels (FPN's level
  mapper), pools each level's boxes and puts them back in the boxes' order.
- ``roi_heads.paste_masks_in_image`` (Mask R-CNN) resizes each mask to its box's size, read as a Python int:
  ``onnxlens::paste_masks_in_image``.
- ``roi_heads.heatmaps_to_keypoints`` (Keypoint R-CNN) resizes each heatmap to its box's size:
  ``onnxlens::heatmaps_to_keypoints``.

Their CPU kernels compute what torchvision does (with its own ``nms`` and ``roi_align``); their ONNX
translations are in `exporter.translate.ops.vision`. The functions are swapped by code, so the names a
model imported keep working; nothing changes when torchvision is not imported.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import torch
import torch.nn.functional as F


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


def roi_levels(
    boxes: torch.Tensor, k_min: int, k_max: int, canonical_scale: int, canonical_level: int, eps: float
) -> torch.Tensor:
    """The pyramid level (from 0 for `k_min`) of each box: eq. 1 of the FPN paper, as torchvision's
    ``LevelMapper`` computes it."""
    scale = torch.sqrt((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]))
    levels = torch.floor(canonical_level + torch.log2(scale / canonical_scale) + torch.tensor(eps, dtype=scale.dtype))
    return torch.clamp(levels, min=k_min, max=k_max).to(torch.int64) - k_min


@torch.library.custom_op("onnxlens::multiscale_roi_align", mutates_args=())
def multiscale_roi_align(
    features: list[torch.Tensor],
    boxes: list[torch.Tensor],
    output_size: list[int],
    sampling_ratio: int,
    scales: list[float],
    k_min: int,
    k_max: int,
    canonical_scale: int,
    canonical_level: int,
    eps: float,
) -> torch.Tensor:
    """RoIAlign of each box of each image (``boxes[i]`` are image i's, x1 y1 x2 y2) on its pyramid level
    (`roi_levels`): ``features[l]`` has the scale ``scales[l]``. One row per box, in the boxes' order."""
    rois = torch.cat([torch.cat([torch.full_like(b[:, :1], i), b], 1) for i, b in enumerate(boxes)])
    levels = roi_levels(rois[:, 1:], k_min, k_max, canonical_scale, canonical_level, eps)
    result = features[0].new_zeros((len(rois), features[0].shape[1], *output_size))
    for level, (feature, scale) in enumerate(zip(features, scales)):
        index = torch.where(levels == level)[0]
        result[index] = torch.ops.torchvision.roi_align(
            feature, rois[index], scale, output_size[0], output_size[1], sampling_ratio, False
        ).to(result.dtype)
    return result


@multiscale_roi_align.register_fake
def _(features, boxes, output_size, sampling_ratio, scales, k_min, k_max, canonical_scale, canonical_level, eps):
    count = sum(b.shape[0] for b in boxes)
    return features[0].new_empty((count, features[0].shape[1], *output_size))


def expanded_boxes(boxes: torch.Tensor, scale: float) -> torch.Tensor:
    """`boxes` scaled by `scale` about their centres, truncated to integers (torchvision's
    ``expand_boxes(…).to(torch.int64)``, in the same float32 operations)."""
    w_half = (boxes[:, 2] - boxes[:, 0]) * 0.5
    h_half = (boxes[:, 3] - boxes[:, 1]) * 0.5
    x_c = (boxes[:, 2] + boxes[:, 0]) * 0.5
    y_c = (boxes[:, 3] + boxes[:, 1]) * 0.5
    w_half, h_half = w_half * scale, h_half * scale
    return torch.stack((x_c - w_half, y_c - h_half, x_c + w_half, y_c + h_half), 1).to(torch.int64)


@torch.library.custom_op("onnxlens::paste_masks_in_image", mutates_args=())
def paste_masks_in_image(
    masks: torch.Tensor, boxes: torch.Tensor, image_height: int, image_width: int, padding: int
) -> torch.Tensor:
    """Masks (N, 1, M, M) pasted into an image each: padded by `padding`, the box grown as much, the mask
    resized (bilinear) to the box's integer size and put at its place, zero elsewhere: (N, 1, H, W)."""
    size = masks.shape[-1]
    masks = F.pad(masks, (padding,) * 4)
    boxes = expanded_boxes(boxes, float(size + 2 * padding) / size)
    result = masks.new_zeros((len(masks), 1, image_height, image_width))
    for i, (x0, y0, x1, y1) in enumerate(boxes.tolist()):
        w, h = max(x1 - x0 + 1, 1), max(y1 - y0 + 1, 1)
        mask = F.interpolate(masks[i : i + 1], size=(h, w), mode="bilinear", align_corners=False)[0, 0]
        top, bottom, left, right = max(y0, 0), min(y1 + 1, image_height), max(x0, 0), min(x1 + 1, image_width)
        if top < bottom and left < right:
            result[i, 0, top:bottom, left:right] = mask[top - y0 : bottom - y0, left - x0 : right - x0]
    return result


@paste_masks_in_image.register_fake
def _(masks, boxes, image_height, image_width, padding):
    return masks.new_empty((masks.shape[0], 1, image_height, image_width))


@torch.library.custom_op("onnxlens::heatmaps_to_keypoints", mutates_args=())
def heatmaps_to_keypoints(maps: torch.Tensor, rois: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keypoints from heatmaps (N, K, S, S) of boxes `rois` (N, 4): each heatmap resized (bicubic) to its
    box's size rounded up, its maximum's place (x, y, 1) in the image (N, K, 3) and value (N, K)."""
    widths = (rois[:, 2] - rois[:, 0]).clamp(min=1)
    heights = (rois[:, 3] - rois[:, 1]).clamp(min=1)
    count, keypoints = maps.shape[:2]
    xy = maps.new_zeros((count, keypoints, 3))
    scores = maps.new_zeros((count, keypoints))
    for i in range(count):
        w, h = int(widths[i].ceil().item()), int(heights[i].ceil().item())
        resized = F.interpolate(maps[i][:, None], size=(h, w), mode="bicubic", align_corners=False)[:, 0]
        position = resized.reshape(keypoints, -1).argmax(dim=1)
        x, y = position % w, torch.div(position, w, rounding_mode="floor")
        xy[i, :, 0] = (x.float() + 0.5) * (widths[i] / w) + rois[i, 0]
        xy[i, :, 1] = (y.float() + 0.5) * (heights[i] / h) + rois[i, 1]
        xy[i, :, 2] = 1
        scores[i] = resized[torch.arange(keypoints), y, x]
    return xy, scores


@heatmaps_to_keypoints.register_fake
def _(maps, rois):
    return maps.new_empty((*maps.shape[:2], 3)), maps.new_empty(maps.shape[:2])


# The bodies swapped in while capturing. They run in torchvision's modules (their globals are
# torchvision's), so they use nothing but ``torch`` and their arguments.


def _batched_nms(boxes, scores, idxs, iou_threshold):
    return torch.ops.onnxlens.batched_nms(boxes, scores, idxs, iou_threshold)


def _multiscale_roi_align(x_filtered, boxes, output_size, sampling_ratio, scales, mapper):
    if scales is None or mapper is None:
        raise ValueError("scales and mapper should not be None")
    return torch.ops.onnxlens.multiscale_roi_align(
        x_filtered, boxes, list(output_size), sampling_ratio, scales, mapper.k_min, mapper.k_max, mapper.s0,
        mapper.lvl0, mapper.eps,
    )  # fmt: skip


def _decode(self, rel_codes, boxes):
    """``BoxCoder.decode`` without its branch on the number of boxes (``if box_sum > 0``, there to avoid
    reshaping no boxes with -1): the same reshapes, with the count."""
    concat_boxes = torch.cat(boxes, dim=0)
    count = concat_boxes.shape[0]
    return self.decode_single(rel_codes.reshape(count, -1), concat_boxes).reshape(count, -1, 4)


def _resize_boxes(boxes, original_size, new_size):
    """``transform.resize_boxes`` with its ratios from ``torch.full`` (``torch.tensor`` of a symbolic size
    is captured as the example's number: boxes scaled back to another image size came out wrong)."""
    ratio_height, ratio_width = (
        torch.full((), s, dtype=torch.float32, device=boxes.device)
        / torch.full((), s_orig, dtype=torch.float32, device=boxes.device)
        for s, s_orig in zip(new_size, original_size)
    )
    xmin, ymin, xmax, ymax = boxes.unbind(1)
    return torch.stack((xmin * ratio_width, ymin * ratio_height, xmax * ratio_width, ymax * ratio_height), dim=1)


def _resize_keypoints(keypoints, original_size, new_size):
    """``transform.resize_keypoints`` with its ratios from ``torch.full`` (see `_resize_boxes`)."""
    ratio_height, ratio_width = (
        torch.full((), s, dtype=torch.float32, device=keypoints.device)
        / torch.full((), s_orig, dtype=torch.float32, device=keypoints.device)
        for s, s_orig in zip(new_size, original_size)
    )
    x, y, visibility = keypoints.unbind(2)
    return torch.stack((x * ratio_width, y * ratio_height, visibility), dim=2)


def _paste_masks_in_image(masks, boxes, img_shape, padding=1):
    return torch.ops.onnxlens.paste_masks_in_image(masks, boxes, img_shape[0], img_shape[1], padding)


def _heatmaps_to_keypoints(maps, rois):
    return torch.ops.onnxlens.heatmaps_to_keypoints(maps, rois)


_SWAPS = (  # module, attribute path in it, replacement
    ("torchvision.ops.boxes", ("batched_nms",), _batched_nms),
    ("torchvision.models.detection._utils", ("BoxCoder", "decode"), _decode),
    ("torchvision.ops.poolers", ("_multiscale_roi_align",), _multiscale_roi_align),
    ("torchvision.models.detection.transform", ("resize_boxes",), _resize_boxes),
    ("torchvision.models.detection.transform", ("resize_keypoints",), _resize_keypoints),
    ("torchvision.models.detection.roi_heads", ("paste_masks_in_image",), _paste_masks_in_image),
    ("torchvision.models.detection.roi_heads", ("heatmaps_to_keypoints",), _heatmaps_to_keypoints),
)


@contextlib.contextmanager
def capturing() -> Iterator[None]:
    """torchvision's data-dependent steps as this module's operators while a model is captured."""
    swapped = []
    try:
        for module_name, path, replacement in _SWAPS:
            function = sys.modules.get(module_name)
            if function is None:
                continue
            for name in path:
                function = getattr(function, name)
            swapped.append((function, function.__code__))
            function.__code__ = replacement.__code__
        yield
    finally:
        for function, code in swapped:
            function.__code__ = code
