"""torchvision's detection operators (``torchvision::nms``, ``torchvision::roi_align``, and class-wise NMS
captured as ``onnxlens::batched_nms``) exported and run in onnxruntime, without torchvision: the ops are
declared here with torchvision's schemas and plain-torch kernels written from torchvision's algorithms,
and the ONNX results are compared with those kernels over edge cases (no boxes, all suppressed, ties,
classes, aligned True/False, sampling ratios, boxes outside the image)."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch
from helpers import run_onnx_feeds

import exporter
from exporter.capture import vision  # noqa: F401  (defines onnxlens::batched_nms)


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
