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

And three compute sizes in Python, which capture specializes silently for a dynamic image size:

- ``transform._resize_image_and_masks`` computes the resized size in Python from the shorter and longer
  side, in double precision; capture would fix the orientation and compute in float32 (a pixel off):
  `resized_size` computes it with tensor operations, a size the model knows at run time, as eager does.
- ``GeneralizedRCNNTransform.batch_images`` pads to a multiple of 32 with ``math.ceil`` (captured as the
  example's size): integer arithmetic on the sizes.
- ``poolers._setup_scales`` (run once, its scales kept by the module) computes each level's scale from
  the sizes: from the example's values.

The operators' CPU kernels compute what torchvision does (with its own ``nms`` and ``roi_align``); their ONNX
translations are in `exporter.translate.ops.vision`. The functions are swapped by code, so the names a
model imported keep working; nothing changes when torchvision is not imported.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator

import sympy
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


_EXAMPLES: dict[sympy.Symbol, int] = {}  # while capturing: the example's values of sizes known at run time only


def resized_size(image: torch.Tensor, min_size: int, max_size: int) -> list:
    """The size GeneralizedRCNNTransform resizes `image` to, as eager PyTorch computes it in double precision:
    ``floor(side * min(min_size / shorter side, max_size / longer side))``. For symbolic sides, by tensor
    operations (the model computes it at run time; its example's values are noted for `example_value`)."""
    sides = image.shape[-2:]
    examples = [example_value(s) for s in sides]
    scale = min(min_size / min(examples), max_size / max(examples))
    if not any(isinstance(s, torch.SymInt) for s in sides):
        return [math.floor(s * scale) for s in sides]
    lengths = torch.stack([torch.full((), s, dtype=torch.float64, device=image.device) for s in sides])
    limits = torch.tensor([min_size, max_size], dtype=torch.float64, device=image.device)
    size = torch.floor(lengths * torch.min(limits / torch.stack((lengths.min(), lengths.max())))).long().tolist()
    for side, example in zip(size, examples):
        torch._check(side >= 1)
        torch._check(side <= max(min_size, max_size))
        _EXAMPLES[side.node.expr] = math.floor(example * scale)
    return size


def example_value(size: int | torch.SymInt) -> int:
    """A size's value at the example: its hint, or from the values `resized_size` noted."""
    if not isinstance(size, torch.SymInt):
        return size
    node = size.node
    return int(node.expr.xreplace({**node.shape_env.var_to_val, **_EXAMPLES}))


# The bodies swapped in while capturing. They run in torchvision's modules (their globals are
# torchvision's), so they use nothing but ``torch``, their arguments and what they import.


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


def _resize_image_and_masks(image, self_min_size, self_max_size, target=None, fixed_size=None):
    """``transform._resize_image_and_masks`` with the resized size computed as eager PyTorch does (in double
    precision: ``floor(side * min(min_size / shorter, max_size / longer))``) by tensor operations, so that
    the ONNX model computes it at run time: capture fixed which side is shorter, and float32 arithmetic on
    the symbolic sizes was a pixel off (160 * 1.1 gave 175)."""
    if fixed_size is not None:
        size = [fixed_size[1], fixed_size[0]]
    else:
        from exporter.capture import vision

        size = vision.resized_size(image, self_min_size, self_max_size)
    image = torch.nn.functional.interpolate(image[None], size=size, mode="bilinear", align_corners=False)[0]
    if target is not None and "masks" in target:
        masks = torch.nn.functional.interpolate(target["masks"][:, None].float(), size=size)
        target["masks"] = masks[:, 0].byte()
    return image, target


def _setup_scales(features, image_shapes, canonical_scale, canonical_level):
    """``poolers._setup_scales`` on the example's sizes: torchvision computes each level's scale in Python
    on its first call and keeps them, so the graph keeps the example's (the resized image size is only
    known at run time)."""
    import math

    from torchvision.ops.poolers import _infer_scale, initLevelMapper

    from exporter.capture import vision

    height = max(vision.example_value(shape[0]) for shape in image_shapes)
    width = max(vision.example_value(shape[1]) for shape in image_shapes)
    scales = []
    for feature in features:
        sizes = [vision.example_value(s) for s in feature.shape[-2:]]
        scales.append(_infer_scale(torch.empty(sizes, device="meta"), [height, width]))
    k_min, k_max = (round(-math.log2(scale)) for scale in (scales[0], scales[-1]))  # scales are powers of 2
    return scales, initLevelMapper(k_min, k_max, canonical_scale, canonical_level)


def _batch_images(self, images, size_divisible=32):
    """``GeneralizedRCNNTransform.batch_images`` in integer arithmetic on the sizes (its float
    ``math.ceil`` was captured as the example's padded size) and with ``pad`` (no in-place copy)."""
    height, width = images[0].shape[-2:]
    for image in images[1:]:
        height, width = torch.sym_max(height, image.shape[-2]), torch.sym_max(width, image.shape[-1])
    height = (height + size_divisible - 1) // size_divisible * size_divisible
    width = (width + size_divisible - 1) // size_divisible * size_divisible
    padded = [
        torch.nn.functional.pad(image, (0, width - image.shape[-1], 0, height - image.shape[-2])) for image in images
    ]
    return torch.stack(padded)


def _paste_masks_in_image(masks, boxes, img_shape, padding=1):
    return torch.ops.onnxlens.paste_masks_in_image(masks, boxes, img_shape[0], img_shape[1], padding)


def _heatmaps_to_keypoints(maps, rois):
    return torch.ops.onnxlens.heatmaps_to_keypoints(maps, rois)


_SWAPS = (  # module, attribute path in it, replacement
    ("torchvision.ops.boxes", ("batched_nms",), _batched_nms),
    ("torchvision.models.detection._utils", ("BoxCoder", "decode"), _decode),
    ("torchvision.ops.poolers", ("_multiscale_roi_align",), _multiscale_roi_align),
    ("torchvision.models.detection.transform", ("_resize_image_and_masks",), _resize_image_and_masks),
    ("torchvision.models.detection.transform", ("GeneralizedRCNNTransform", "batch_images"), _batch_images),
    ("torchvision.ops.poolers", ("_setup_scales",), _setup_scales),
    ("torchvision.models.detection.transform", ("resize_boxes",), _resize_boxes),
    ("torchvision.models.detection.transform", ("resize_keypoints",), _resize_keypoints),
    ("torchvision.models.detection.roi_heads", ("paste_masks_in_image",), _paste_masks_in_image),
    ("torchvision.models.detection.roi_heads", ("heatmaps_to_keypoints",), _heatmaps_to_keypoints),
)


@contextlib.contextmanager
def capturing() -> Iterator[None]:
    """torchvision's data-dependent steps as this module's operators while a model is captured."""
    swapped = []
    _EXAMPLES.clear()
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
