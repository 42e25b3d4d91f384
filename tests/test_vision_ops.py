"""torchvision's detection operators (``torchvision::nms``, ``torchvision::roi_align``, and class-wise NMS
captured as ``onnxlens::batched_nms``) exported and run in onnxruntime, without torchvision: the ops are
declared here with torchvision's schemas and plain-torch kernels written from torchvision's algorithms,
and the ONNX results are compared with those kernels over edge cases (no boxes, all suppressed, ties,
classes, aligned True/False, sampling ratios, boxes outside the image); and the capture-time bodies of
GeneralizedRCNNTransform's resize and batching with a dynamic image size, against its eager code."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import run_onnx_feeds

import exporter
from exporter.capture import vision  # defines onnxlens::batched_nms & co


def nms_reference(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy NMS: boxes by decreasing score (ties: lower index first), each dropping those it overlaps
    with an IoU above the threshold."""
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    suppressed = [False] * len(boxes)
    keep = []
    for i in torch.argsort(scores, descending=True, stable=True).tolist():
        if suppressed[i]:
            continue
        keep.append(i)
        for j in range(len(boxes)):
            w = (torch.minimum(x2[i], x2[j]) - torch.maximum(x1[i], x1[j])).clamp(min=0)
            h = (torch.minimum(y2[i], y2[j]) - torch.maximum(y1[i], y1[j])).clamp(min=0)
            inter = w * h
            if inter / (areas[i] + areas[j] - inter) > iou_threshold:
                suppressed[j] = True
    return torch.tensor(keep, dtype=torch.int64)


def _bilinear(plane: torch.Tensor, y: float, x: float) -> float:
    """torchvision's bilinear sample of one feature plane (0 outside [-1, size])."""
    height, width = plane.shape
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_low = y_high = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_low = x_high = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1.0 - ly, 1.0 - lx
    return float(
        hy * hx * plane[y_low, x_low]
        + hy * lx * plane[y_low, x_high]
        + ly * hx * plane[y_high, x_low]
        + ly * lx * plane[y_high, x_high]
    )


def roi_align_reference(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    """torchvision's RoIAlign (average of bilinear samples per bin), one box and bin at a time."""
    offset = 0.5 if aligned else 0.0
    out = torch.zeros(len(rois), input.shape[1], pooled_height, pooled_width, dtype=input.dtype)
    for r, (b, x1, y1, x2, y2) in enumerate(rois.tolist()):
        start_x, start_y = x1 * spatial_scale - offset, y1 * spatial_scale - offset
        roi_w, roi_h = x2 * spatial_scale - offset - start_x, y2 * spatial_scale - offset - start_y
        if not aligned:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / pooled_height, roi_w / pooled_width
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_h / pooled_height)
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_w / pooled_width)
        count = max(grid_h * grid_w, 1)
        for c in range(input.shape[1]):
            plane = input[int(b), c]
            for ph in range(pooled_height):
                for pw in range(pooled_width):
                    total = sum(
                        _bilinear(
                            plane,
                            start_y + ph * bin_h + (iy + 0.5) * bin_h / grid_h,
                            start_x + pw * bin_w + (ix + 0.5) * bin_w / grid_w,
                        )
                        for iy in range(grid_h)
                        for ix in range(grid_w)
                    )
                    out[r, c, ph, pw] = total / count
    return out


if importlib.util.find_spec("torchvision") is not None:  # its own kernels, which these must equal
    import torchvision  # noqa: F401
else:
    _LIBRARY = torch.library.Library("torchvision", "DEF")
    _LIBRARY.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIBRARY.define(
        "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
        "int sampling_ratio, bool aligned) -> Tensor"
    )
    _LIBRARY.impl("nms", nms_reference, "CPU")
    _LIBRARY.impl("roi_align", roi_align_reference, "CPU")

    @torch.library.register_fake("torchvision::nms", lib=_LIBRARY)
    def _(dets, scores, iou_threshold):
        return dets.new_empty((torch.library.get_ctx().new_dynamic_size(),), dtype=torch.int64)

    @torch.library.register_fake("torchvision::roi_align", lib=_LIBRARY)
    def _(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
        return input.new_empty((rois.shape[0], input.shape[1], pooled_height, pooled_width))


def _boxes(n: int, seed: int = 0) -> torch.Tensor:
    """`n` boxes (x1, y1, x2, y2) in a 16 × 16 square, many overlapping."""
    g = torch.Generator().manual_seed(seed)
    corner = torch.rand(n, 2, generator=g) * 6
    return torch.cat([corner, corner + 4 + torch.rand(n, 2, generator=g) * 6], 1)


def _export(fn, *args, dynamic: bool):
    return exporter.dynamo_export(fn, *args, export_options=exporter.ExportOptions(dynamic_shapes=dynamic))


def _run(export_output, *args) -> list[np.ndarray]:
    names = [i.name for i in export_output.model_proto.graph.input]
    return run_onnx_feeds(export_output.model_proto, {n: a.numpy() for n, a in zip(names, args)})


def _nms(boxes, scores):
    return torch.ops.torchvision.nms(boxes, scores, 0.5)


def _nms_cases() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    boxes = _boxes(12)
    same = torch.tensor([[1.0, 1.0, 5.0, 5.0]]).repeat(5, 1)
    # IoU exactly 0.5 (kept: NMS drops above the threshold) and just above it
    edge = torch.tensor([[0.0, 0.0, 3.0, 1.0], [1.0, 0.0, 4.0, 1.0], [10.0, 0.0, 13.0, 1.0], [10.9, 0.0, 13.9, 1.0]])
    return {
        "overlapping": (boxes, torch.rand(12, generator=torch.Generator().manual_seed(1))),
        "ties": (boxes, torch.tensor([0.5, 0.9, 0.5, 0.5, 0.9, 0.1] * 2)),
        "all_suppressed": (same, torch.tensor([0.2, 0.7, 0.7, 0.1, 0.3])),
        "iou_at_threshold": (edge, torch.tensor([0.9, 0.8, 0.7, 0.6])),
        "disjoint": (
            torch.tensor([[0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 3.0, 3.0], [4.0, 0.0, 5.0, 1.0]]),
            torch.tensor([0.1, 0.3, 0.2]),
        ),
        "one_box": (torch.tensor([[1.0, 2.0, 3.0, 4.0]]), torch.tensor([0.4])),
        "no_boxes": (torch.zeros(0, 4), torch.zeros(0)),
    }


def test_nms_reference_is_greedy_nms():
    """The reference itself, on a case worked by hand: box 1 (0.9) drops 0 (IoU 0.6); 2 is disjoint."""
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 10.0, 6.0], [20.0, 20.0, 21.0, 21.0]])
    assert nms_reference(boxes, torch.tensor([0.8, 0.9, 0.1]), 0.5).tolist() == [1, 2]
    assert nms_reference(boxes, torch.tensor([0.8, 0.9, 0.1]), 0.7).tolist() == [1, 0, 2]


@pytest.mark.parametrize("name", list(_nms_cases()))
def test_nms_matches_reference(name):
    """Exported with dynamic shapes at 12 boxes, run on each case (including no boxes at all)."""
    export_output = _export(_nms, *_nms_cases()["overlapping"], dynamic=True)
    boxes, scores = _nms_cases()[name]
    (kept,) = _run(export_output, boxes, scores)
    assert kept.dtype == np.int64
    assert kept.tolist() == nms_reference(boxes, scores, 0.5).tolist()
    if name == "all_suppressed":
        assert kept.tolist() == [1]
    if name == "iou_at_threshold":
        assert kept.tolist() == [0, 1, 2]


def test_nms_static_export():
    boxes, scores = _nms_cases()["overlapping"]
    (kept,) = _run(_export(_nms, boxes, scores, dynamic=False), boxes, scores)
    expected = nms_reference(boxes, scores, 0.5)
    assert 1 < len(expected) < len(boxes)  # some kept, some suppressed
    assert kept.tolist() == expected.tolist()


def _batched_nms(boxes, scores, idxs):
    return torch.ops.onnxlens.batched_nms(boxes, scores, idxs, 0.5)


def _per_class_reference(boxes, scores, idxs, iou_threshold=0.5) -> list[int]:
    """NMS class by class, the kept boxes of all classes by decreasing score."""
    kept = []
    for c in idxs.unique().tolist():
        members = torch.nonzero(idxs == c).flatten()
        kept += members[nms_reference(boxes[members], scores[members], iou_threshold)].tolist()
    return sorted(kept, key=lambda i: (-scores[i].item(), i))


@pytest.mark.parametrize("case", ["classes", "one_class", "same_box_every_class", "ties", "no_boxes"])
def test_batched_nms_keeps_classes_apart(case):
    boxes, scores = _boxes(10, seed=2), torch.rand(10, generator=torch.Generator().manual_seed(3))
    idxs = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
    export_output = _export(_batched_nms, boxes, scores, idxs, dynamic=True)
    if case == "one_class":
        idxs = torch.zeros(10, dtype=torch.int64)
    elif case == "same_box_every_class":  # one class's box never suppresses another class's
        boxes, scores, idxs = torch.tensor([[1.0, 1.0, 4.0, 4.0]]).repeat(6, 1), torch.rand(6), torch.arange(6) % 3
    elif case == "ties":
        scores = torch.tensor([0.5, 0.5, 0.5, 0.9, 0.9, 0.9, 0.5, 0.5, 0.5, 0.5])
    elif case == "no_boxes":
        boxes, scores, idxs = torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, dtype=torch.int64)
    (kept,) = _run(export_output, boxes, scores, idxs)
    expected = _per_class_reference(boxes, scores, idxs)
    assert kept.tolist() == expected
    assert kept.tolist() == _batched_nms(boxes, scores, idxs).tolist()  # the operator's eager kernel
    if case == "same_box_every_class":
        assert sorted(idxs[kept].tolist()) == [0, 1, 2]  # one box per class


def _features() -> torch.Tensor:
    return torch.randn(2, 3, 9, 11, generator=torch.Generator().manual_seed(4))


def _rois() -> torch.Tensor:
    """Boxes of both images: inside, a thin one (under a pixel), one crossing the border, one outside."""
    return torch.tensor(
        [
            [0.0, 1.0, 1.0, 9.0, 7.0],
            [1.0, 2.5, 0.5, 14.0, 12.3],
            [0.0, 4.0, 4.0, 4.4, 4.3],
            [1.0, -3.0, -2.0, 5.0, 6.0],
            [0.0, 26.0, 22.0, 36.0, 30.0],
        ]
    )


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [-1, 0, 2])
def test_roi_align_matches_reference(aligned, sampling_ratio):
    def roi_align(features, rois):
        return torch.ops.torchvision.roi_align(features, rois, 0.5, 3, 2, sampling_ratio, aligned)

    features, rois = _features(), _rois()
    export_output = _export(roi_align, features, rois, dynamic=True)
    expected = roi_align_reference(features, rois, 0.5, 3, 2, sampling_ratio, aligned)
    assert expected.abs().sum() > 0 and (expected[-1] == 0).all()  # the box outside the image pools zeros
    (actual,) = _run(export_output, features, rois)
    np.testing.assert_allclose(actual, expected.numpy(), atol=1e-5, rtol=1e-5)
    (fewer,) = _run(export_output, features, rois[1:3])  # another number of boxes
    np.testing.assert_allclose(fewer, expected[1:3].numpy(), atol=1e-5, rtol=1e-5)
    (none,) = _run(export_output, features, rois[:0])
    assert none.shape == (0, 3, 3, 2)


# -- R-CNN heads: multi-scale RoIAlign, masks pasted into the image, keypoints from heatmaps -----------------


def roi_level_reference(box, canonical_scale: int, canonical_level: int, k_min: int, k_max: int) -> int:
    """FPN's eq. 1 for one box, in float64: floor(k0 + log2(sqrt(w h) / 224) + 1e-6), clamped, from k_min."""
    x1, y1, x2, y2 = box
    level = math.floor(canonical_level + math.log2(math.sqrt((x2 - x1) * (y2 - y1)) / canonical_scale) + 1e-6)
    return min(max(level, k_min), k_max) - k_min


_MAPPER = {"k_min": 1, "k_max": 3, "canonical_scale": 8, "canonical_level": 2, "eps": 1e-6}
_SCALES = [0.5, 0.25, 0.125]


def _pyramid() -> list[torch.Tensor]:
    """Three levels of a 32 × 40 image (scales 1/2, 1/4, 1/8), two images, 3 channels."""
    g = torch.Generator().manual_seed(5)
    return [torch.randn(2, 3, 32 // 2**k, 40 // 2**k, generator=g) for k in (1, 2, 3)]


def _level_boxes() -> tuple[torch.Tensor, torch.Tensor]:
    """Image 0's and image 1's boxes: sides from 2 to 30 pixels, so on every level (sqrt(area) < 8: level 0,
    8 ≤ … < 16: 1, ≥ 16: 2), 8 × 8 exactly on a level's lower edge, one crossing the image's border."""
    first = torch.tensor([[1.0, 1.0, 3.0, 4.0], [2.0, 3.0, 14.0, 13.0], [0.0, 0.0, 30.0, 26.0], [4.0, 4.0, 12.0, 12.0]])
    second = torch.tensor([[10.0, 5.0, 30.5, 25.0], [26.0, 18.0, 45.0, 36.0], [5.5, 6.0, 9.0, 9.5]])
    return first, second


def multiscale_reference(features, boxes, output_size, sampling_ratio) -> torch.Tensor:
    """Each box pooled by `roi_align_reference` on its level, in the boxes' order."""
    rows = []
    for image, image_boxes in enumerate(boxes):
        for box in image_boxes.tolist():
            level = roi_level_reference(box, 8, 2, 1, 3)
            roi = torch.tensor([[image, *box]])
            rows.append(roi_align_reference(features[level], roi, _SCALES[level], *output_size, sampling_ratio, False))
    return torch.cat(rows) if rows else torch.zeros(0, 3, *output_size)


def _multiscale(f0, f1, f2, first, second):
    return torch.ops.onnxlens.multiscale_roi_align([f0, f1, f2], [first, second], [3, 2], 2, _SCALES, **_MAPPER)


def test_roi_levels_cover_every_level():
    first, second = _level_boxes()
    levels = [roi_level_reference(b, 8, 2, 1, 3) for b in torch.cat([first, second]).tolist()]
    assert levels == [0, 1, 2, 1, 2, 2, 0]  # the 8 × 8 box (index 3) is on level 1
    assert vision.roi_levels(torch.cat([first, second]), 1, 3, 8, 2, 1e-6).tolist() == levels


@pytest.mark.parametrize("counts", [(4, 3), (1, 0), (0, 0)], ids=["all", "one_box", "no_boxes"])
def test_multiscale_roi_align_matches_reference(counts):
    """Exported with dynamic shapes at 4 + 3 boxes, run with as many, fewer and none."""
    features, (first, second) = _pyramid(), _level_boxes()
    export_output = _export(_multiscale, *features, first, second, dynamic=True)
    first, second = first[: counts[0]], second[: counts[1]]
    expected = multiscale_reference(features, [first, second], (3, 2), 2)
    assert torch.allclose(_multiscale(*features, first, second), expected, atol=1e-5)  # the operator's kernel
    (actual,) = _run(export_output, *features, first, second)
    assert actual.shape == (sum(counts), 3, 3, 2)
    np.testing.assert_allclose(actual, expected.numpy(), atol=1e-5, rtol=1e-5)
    if counts == (4, 3):
        assert (np.abs(actual).reshape(7, -1).max(axis=1) > 0).all()  # every box pooled something


def _cubic_near(x: float, a: float = -0.75) -> float:
    """Keys' cubic convolution kernel for |x| <= 1 (a = -0.75, as PyTorch)."""
    return ((a + 2) * x - (a + 3)) * x * x + 1


def _cubic_far(x: float, a: float = -0.75) -> float:
    """Keys' cubic convolution kernel for 1 < |x| < 2."""
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a


def _taps(out_size: int, in_size: int, cubic: bool) -> list[list[tuple[int, float]]]:
    """PyTorch's ``interpolate`` (align_corners=False, size given) along one axis, in float32 as it computes:
    for each output pixel, the input pixels it reads and their weights."""
    f32 = np.float32
    scale = f32(in_size) / f32(out_size)
    taps = []
    for d in range(out_size):
        real = scale * (f32(d) + f32(0.5)) - f32(0.5)
        if not cubic:
            real = max(real, f32(0.0))
        index = int(math.floor(real))
        t = float(real - f32(index))
        if cubic:
            weights = (_cubic_far(t + 1), _cubic_near(t), _cubic_near(1 - t), _cubic_far(2 - t))
            taps.append([(min(max(index - 1 + j, 0), in_size - 1), w) for j, w in enumerate(weights)])
        else:
            upper = min(index + 1, in_size - 1)
            taps.append([(index, 1 - t), (upper, t)])
    return taps


def resize_reference(image: np.ndarray, height: int, width: int, cubic: bool) -> np.ndarray:
    """A 2-D `image` resized (bilinear or bicubic) as PyTorch's ``interpolate`` does, summed in float64."""
    rows, columns = _taps(height, image.shape[0], cubic), _taps(width, image.shape[1], cubic)
    out = np.zeros((height, width))
    for y, row_taps in enumerate(rows):
        for x, column_taps in enumerate(columns):
            out[y, x] = sum(wy * wx * float(image[iy, ix]) for iy, wy in row_taps for ix, wx in column_taps)
    return out


@pytest.mark.parametrize("cubic", [False, True])
@pytest.mark.parametrize("size", [(5, 9), (14, 14), (23, 3)])
def test_resize_reference_is_interpolate(cubic, size):
    """The references below resize as ``torch.nn.functional.interpolate``: up, down, same size."""
    image = torch.randn(14, 14, generator=torch.Generator().manual_seed(6))
    mode = "bicubic" if cubic else "bilinear"
    expected = torch.nn.functional.interpolate(image[None, None], size=size, mode=mode, align_corners=False)[0, 0]
    np.testing.assert_allclose(resize_reference(image.numpy(), *size, cubic), expected.numpy(), atol=1e-5)


def paste_reference(masks: torch.Tensor, boxes: torch.Tensor, height: int, width: int) -> np.ndarray:
    """torchvision's paste: each mask padded by 1, its box grown by (M + 2) / M about the centre (float32)
    and truncated, the mask resized to the box's size and copied where the box meets the image."""
    size = masks.shape[-1]
    scale = np.float32((size + 2) / size)
    out = np.zeros((len(masks), 1, height, width), dtype=np.float32)
    for i, (mask, box) in enumerate(zip(masks.numpy(), boxes.numpy())):
        padded = np.pad(mask[0], 1)
        x1, y1, x2, y2 = box
        w_half, h_half = (x2 - x1) * np.float32(0.5) * scale, (y2 - y1) * np.float32(0.5) * scale
        x_c, y_c = (x2 + x1) * np.float32(0.5), (y2 + y1) * np.float32(0.5)
        x1, y1, x2, y2 = (int(v) for v in (x_c - w_half, y_c - h_half, x_c + w_half, y_c + h_half))
        resized = resize_reference(padded, max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1), cubic=False)
        for y in range(max(y1, 0), min(y2 + 1, height)):
            for x in range(max(x1, 0), min(x2 + 1, width)):
                out[i, 0, y, x] = resized[y - y1, x - x1]
    return out


def _masks_and_boxes() -> tuple[torch.Tensor, torch.Tensor]:
    """Five 6 × 6 masks; boxes inside, across the top-left and bottom-right borders, under a pixel wide,
    larger than the image (of 20 × 24)."""
    masks = torch.rand(5, 1, 6, 6, generator=torch.Generator().manual_seed(7))
    boxes = torch.tensor(
        [
            [3.2, 4.7, 15.9, 12.1],
            [-2.5, -1.0, 6.0, 5.5],
            [18.0, 14.0, 23.9, 19.9],
            [10.0, 8.0, 10.4, 16.0],
            [0.0, 0.0, 23.9, 19.9],
        ]
    )
    return masks, boxes


def _paste(masks, boxes, image):
    return torch.ops.onnxlens.paste_masks_in_image(masks, boxes, image.shape[-2], image.shape[-1], 1)


@pytest.mark.parametrize("case", ["boxes", "other_image_size", "one_box", "no_boxes"])
def test_paste_masks_in_image_matches_reference(case):
    """Exported with dynamic shapes (boxes and image size) and run on each case."""
    masks, boxes = _masks_and_boxes()
    image = torch.zeros(3, 20, 24)
    export_output = _export(_paste, masks, boxes, image, dynamic=True)
    if case == "other_image_size":
        image = torch.zeros(3, 17, 30)
    elif case == "one_box":
        masks, boxes = masks[1:2], boxes[1:2]
    elif case == "no_boxes":
        masks, boxes = masks[:0], boxes[:0]
    expected = paste_reference(masks, boxes, *image.shape[1:])
    np.testing.assert_allclose(_paste(masks, boxes, image).numpy(), expected, atol=1e-6)  # the kernel
    (actual,) = _run(export_output, masks, boxes, image)
    assert actual.shape == (len(boxes), 1, *image.shape[1:])
    np.testing.assert_allclose(actual, expected, atol=1e-5)
    if case == "boxes":
        assert ((actual > 0).sum(axis=(1, 2, 3)) > 0).all() and (actual[0, 0, :4] == 0).all()


def keypoints_reference(maps: torch.Tensor, rois: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Each box's heatmaps resized (bicubic) to ceil(box size), the first maximum's pixel centre scaled back
    to the box ((x, y, 1), float32 as torchvision computes it) and its value."""
    f32 = np.float32
    xy = np.zeros((len(rois), maps.shape[1], 3), dtype=np.float32)
    scores = np.zeros(maps.shape[:2], dtype=np.float32)
    for i, (heatmaps, (x1, y1, x2, y2)) in enumerate(zip(maps.numpy(), rois.numpy())):
        width, height = max(x2 - x1, f32(1)), max(y2 - y1, f32(1))
        w, h = math.ceil(width), math.ceil(height)
        for k, heatmap in enumerate(heatmaps):
            resized = resize_reference(heatmap, h, w, cubic=True)
            y, x = divmod(int(np.argmax(resized)), w)
            xy[i, k] = ((f32(x) + f32(0.5)) * (width / f32(w)) + x1, (f32(y) + f32(0.5)) * (height / f32(h)) + y1, 1)
            scores[i, k] = resized[y, x]
    return xy, scores


def _heatmaps_and_rois() -> tuple[torch.Tensor, torch.Tensor]:
    """Six boxes' heatmaps (4 keypoints, 8 × 8): boxes smaller and larger than the heatmap, non-integer,
    under a pixel (clamped to 1), and one whose heatmaps peak in their last row and column (the maximum
    is on the resized map's last pixel, which the translation repeats to the largest box's size)."""
    maps = torch.randn(6, 4, 8, 8, generator=torch.Generator().manual_seed(8))
    maps[5, :, 7, 7] = 5.0
    rois = torch.tensor(
        [
            [2.0, 3.0, 7.0, 6.0],
            [1.5, 0.5, 20.3, 13.7],
            [10.0, 10.0, 10.5, 30.0],
            [0.0, 0.0, 8.0, 8.0],
            [4.0, 2.0, 35.0, 5.0],
            [3.0, 3.0, 9.5, 12.0],
        ]
    )
    return maps, rois


def _keypoints(maps, rois):
    return torch.ops.onnxlens.heatmaps_to_keypoints(maps, rois)


@pytest.mark.parametrize("count", [6, 2, 0], ids=["boxes", "fewer", "no_boxes"])
def test_heatmaps_to_keypoints_matches_reference(count):
    maps, rois = _heatmaps_and_rois()
    export_output = _export(_keypoints, maps, rois, dynamic=True)
    maps, rois = maps[-count:] if count else maps[:0], rois[-count:] if count else rois[:0]
    xy, scores = keypoints_reference(maps, rois)
    kernel_xy, kernel_scores = _keypoints(maps, rois)
    np.testing.assert_allclose(kernel_xy.numpy(), xy, atol=1e-5)
    np.testing.assert_allclose(kernel_scores.numpy(), scores, atol=1e-5)
    actual_xy, actual_scores = _run(export_output, maps, rois)
    assert actual_xy.shape == (count, 4, 3) and actual_scores.shape == (count, 4)
    np.testing.assert_allclose(actual_xy, xy, atol=1e-4)
    np.testing.assert_allclose(actual_scores, scores, atol=1e-5)
    if count:  # peaks in the last pixel: the last pixel's centre, half a pixel (of the box) inside its corner
        np.testing.assert_allclose(actual_xy[-1, :, :2], [[9.5 - 6.5 / 7 / 2, 12.0 - 0.5]] * 4, atol=1e-5)


def transform_reference(image: torch.Tensor, min_size: int = 160, max_size: int = 176) -> torch.Tensor:
    """torchvision's GeneralizedRCNNTransform resize and batching (eval, one image), as its eager code does
    them: interpolate by a scale factor (recomputed from the size it gives), pad to a multiple of 32."""
    height, width = image.shape[-2:]
    scale = min(min_size / min(height, width), max_size / max(height, width))
    resized = F.interpolate(image[None], scale_factor=scale, mode="bilinear", recompute_scale_factor=True)
    padded = [int(math.ceil(float(s) / 32.0) * 32) for s in resized.shape[-2:]]
    return F.pad(resized, (0, padded[1] - resized.shape[-1], 0, padded[0] - resized.shape[-2]))


class _Transform(torch.nn.Module):
    """The capture-time bodies of torchvision's resize (min 160, max 176) and batching."""

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        resized, _ = vision._resize_image_and_masks(image, 160, 176)
        return vision._batch_images(self, [resized], 32)


@pytest.fixture(scope="module")
def dynamic_transform():
    image = torch.rand(3, 160, 144, generator=torch.Generator().manual_seed(3))
    return _export(_Transform(), image, dynamic={"image": {1: "height", 2: "width"}})


# (input size, resized size): the shorter side to 160 (either orientation), the longer to 176 where the
# shorter would make it longer. In double precision (eager) 69 x 138 gives 87 x 175 and 75 x 120 gives
# 109 x 176, a pixel less than exact arithmetic (69 * 176 / 138 = 88).
_TRANSFORM_SIZES = [((160, 144), (176, 158)), ((128, 176), (128, 176)), ((69, 138), (87, 175)), ((75, 120), (109, 176))]


@pytest.mark.parametrize(("size", "resized"), _TRANSFORM_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_transform_resize_and_padding_follow_the_image_size(dynamic_transform, size, resized):
    """The transform exported at 160 x 144 with a dynamic image size resizes and pads each size as eager."""
    image = torch.rand(3, *size, generator=torch.Generator().manual_seed(4))
    expected = transform_reference(image).numpy()
    assert (expected[0, 0, resized[0] - 1, resized[1] - 1] != 0) and (expected[0, 0, resized[0] :] == 0).all()
    assert expected.shape[-2:] == tuple(-(-s // 32) * 32 for s in resized)
    (actual,) = _run(dynamic_transform, image)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, atol=1e-4)  # onnxruntime's Resize: float32 noise to 2e-5


def test_transform_static_export():
    image = torch.rand(3, 69, 138, generator=torch.Generator().manual_seed(5))
    (actual,) = _run(_export(_Transform(), image, dynamic=False), image)
    np.testing.assert_allclose(actual, transform_reference(image).numpy(), atol=1e-4)
