"""ONNX functions for torchvision's detection steps captured as single operators (`exporter.capture.vision`).

torchlib translates ``torchvision::nms``, ``roi_align`` and ``roi_pool``; the operators here build on them:
class-wise NMS is NMS on boxes moved apart by class, multi-scale RoIAlign is torchlib's RoIAlign on each
pyramid level's boxes. Resizing each mask or heatmap to its own box's size is written as two matrix
products per box (a bilinear or bicubic resize is separable: rows, then columns), with the weights
PyTorch's ``interpolate`` uses, so every box is resized at once.
"""

from __future__ import annotations

from onnxscript import opset18 as op
from onnxscript import values
from onnxscript.function_libs.torch_lib.ops.vision import torchvision_roi_align

from exporter.constants import DOMAIN_COMPOSITES
from exporter.translate.opname import OpName

_INT64_MAX = 0x7FFFFFFFFFFFFFFF
_FLOAT, _INT64 = 1, 7  # ONNX TensorProto data types
_CUBIC_A = -0.75  # PyTorch's bicubic kernel


def _traced(fn):
    return values.TracedOnnxFunction(values.Opset(DOMAIN_COMPOSITES, 1), fn)


def _column(x, i: int):
    """Column `i` of a 2-D tensor, as a 1-D tensor."""
    return op.Squeeze(op.Slice(x, [i], [i + 1], [1]), [1])


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


def _levels(rois, k_min: int, k_max: int, canonical_scale: int, canonical_level: int, eps: float):
    """Each box's pyramid level from 0: floor(level0 + log2(sqrt(area) / scale0) + eps), clamped."""
    x1, y1, x2, y2 = (_column(rois, i) for i in (1, 2, 3, 4))
    scale = op.Sqrt(op.Mul(op.Sub(x2, x1), op.Sub(y2, y1)))
    log2 = op.Div(op.Log(op.Div(scale, op.CastLike(canonical_scale, scale))), op.CastLike(0.6931471805599453, scale))
    level = op.Floor(op.Add(op.Add(op.CastLike(canonical_level, scale), log2), op.CastLike(eps, scale)))
    level = op.Clip(level, op.CastLike(k_min, scale), op.CastLike(k_max, scale))
    return op.Sub(op.Cast(level, to=_INT64), op.Constant(value_int=k_min))


@_traced
def multiscale_roi_align(
    features,
    boxes,
    output_size,
    sampling_ratio: int,
    scales,
    k_min: int,
    k_max: int,
    canonical_scale: int,
    canonical_level: int,
    eps: float,
):
    """RoIAlign of every box on its pyramid level, in the boxes' order (a ScatterND per level)."""
    rois = []
    for image, image_boxes in enumerate(boxes):
        count = op.Shape(image_boxes, start=0, end=1)
        index = op.Expand(op.CastLike(image, image_boxes), op.Concat(count, op.Constant(value_ints=[1]), axis=0))
        rois.append(op.Concat(index, image_boxes, axis=1))
    rois = op.Concat(*rois, axis=0) if len(rois) > 1 else rois[0]
    levels = _levels(rois, k_min, k_max, canonical_scale, canonical_level, eps)
    height, width = output_size
    shape = op.Concat(
        op.Shape(rois, start=0, end=1), op.Shape(features[0], start=1, end=2), op.Constant(value_ints=[height, width]),
        axis=0,
    )  # fmt: skip
    result = op.Expand(op.CastLike(0, features[0]), shape)
    for level, (feature, scale) in enumerate(zip(features, scales)):
        where = op.NonZero(op.Equal(levels, op.Constant(value_int=level)))  # (1, boxes on the level)
        pooled = torchvision_roi_align(
            feature, op.Gather(rois, op.Squeeze(where, [0]), axis=0), scale, height, width, sampling_ratio, False
        )
        result = op.ScatterND(result, op.Transpose(where, perm=[1, 0]), pooled)
    return result


def _expanded_boxes(boxes, scale):
    """Boxes scaled (by a float32 `scale` (1,)) about their centres and truncated to integers (x1, y1, x2, y2 as four 1-D tensors)."""
    x1, y1, x2, y2 = (_column(boxes, i) for i in range(4))
    half = op.CastLike(0.5, boxes)
    w_half = op.Mul(op.Mul(op.Sub(x2, x1), half), scale)
    h_half = op.Mul(op.Mul(op.Sub(y2, y1), half), scale)
    x_c, y_c = op.Mul(op.Add(x2, x1), half), op.Mul(op.Add(y2, y1), half)
    corners = (op.Sub(x_c, w_half), op.Sub(y_c, h_half), op.Add(x_c, w_half), op.Add(y_c, h_half))
    return tuple(op.Cast(c, to=_INT64) for c in corners)


def _source_indices(resized, size, input_size, cubic: bool):
    """Where PyTorch's ``interpolate`` (align_corners=False, output size given) samples output pixel
    `resized` (N, P) of an output of `size` (N, 1) pixels from an input of `input_size`: the real index
    (clamped at 0 unless `cubic`), its floor (int64) and fraction."""
    scale = op.Div(op.Cast(input_size, to=_FLOAT), op.Cast(size, to=_FLOAT))
    real = op.Sub(op.Mul(scale, op.Add(op.Cast(resized, to=_FLOAT), op.Constant(value_float=0.5))), 0.5)
    if not cubic:
        real = op.Max(real, op.Constant(value_float=0.0))
    floor = op.Floor(real)
    return op.Cast(floor, to=_INT64), op.Sub(real, floor)


def _weights(taps, input_size):
    """A resize matrix (N, P, input_size) from its taps: (index (N, P), weight (N, P)) pairs."""
    columns = op.Range(op.Constant(value_int=0), op.Reshape(input_size, []), op.Constant(value_int=1))
    matrix = None
    for index, weight in taps:
        hit = op.Cast(op.Equal(op.Unsqueeze(index, [2]), columns), to=_FLOAT)
        term = op.Mul(hit, op.Unsqueeze(weight, [2]))
        matrix = term if matrix is None else op.Add(matrix, term)
    return matrix


def _bilinear(position, size, input_size):
    """Bilinear resize matrix: output pixels `position` (N, P) of outputs `size` (N, 1) pixels long."""
    index, fraction = _source_indices(position, size, input_size, cubic=False)
    last = op.Sub(input_size, op.Constant(value_int=1))
    index = op.Min(index, last)
    upper = op.Min(op.Add(index, op.Constant(value_int=1)), last)
    return _weights(((index, op.Sub(op.Constant(value_float=1.0), fraction)), (upper, fraction)), input_size)


def _cubic(t, far: bool):
    """PyTorch's cubic convolution weight at distance `t`: within 1 pixel, or (`far`) between 1 and 2."""
    a = _CUBIC_A
    if far:
        return op.Sub(op.Mul(op.Add(op.Mul(op.Sub(op.Mul(t, a), 5 * a), t), 8 * a), t), 4 * a)
    return op.Add(op.Mul(op.Mul(op.Sub(op.Mul(t, a + 2), a + 3), t), t), op.Constant(value_float=1.0))


def _bicubic(position, size, input_size):
    """Bicubic resize matrix (taps clamped to the border, as PyTorch reads them)."""
    index, t = _source_indices(position, size, input_size, cubic=True)
    one = op.Constant(value_float=1.0)
    weights = (_cubic(op.Add(t, one), True), _cubic(t, False), _cubic(op.Sub(one, t), False))
    weights += (_cubic(op.Sub(op.Constant(value_float=2.0), t), True),)
    last = op.Sub(input_size, op.Constant(value_int=1))
    taps = []
    for offset, weight in zip((-1, 0, 1, 2), weights):
        tap = op.Clip(op.Add(index, op.Constant(value_int=offset)), op.Constant(value_int=0), last)
        taps.append((tap, weight))
    return _weights(taps, input_size)


@_traced
def paste_masks_in_image(masks, boxes, image_height, image_width, padding: int):
    """Masks (N, 1, M, M) resized to their (grown, integer) boxes and pasted into (N, 1, H, W) images:
    image = rows @ mask @ columnsᵀ, where the resize matrices are zero outside the box."""
    pads = op.Constant(value_ints=[0, padding, padding, 0, padding, padding])
    padded = op.Pad(op.Cast(op.Gather(masks, op.Constant(value_int=0), axis=1), to=_FLOAT), pads)  # (N, M+2p, M+2p)
    width = op.Cast(op.Shape(masks, start=3), to=_FLOAT)
    x1, y1, x2, y2 = _expanded_boxes(boxes, op.Div(op.Add(width, op.Constant(value_float=2.0 * padding)), width))
    one = op.Constant(value_int=1)

    def resize(start, end, length, axis: int):
        """The resize matrix of one axis of the image (N, length, the padded masks' size on `axis`): zero
        outside [start, end]."""
        pixels = op.Unsqueeze(op.Range(op.Constant(value_int=0), op.Reshape(length, []), one), [0])
        start, end = op.Unsqueeze(start, [1]), op.Unsqueeze(end, [1])
        box_size = op.Max(op.Add(op.Sub(end, start), one), one)
        matrix = _bilinear(op.Sub(pixels, start), box_size, op.Shape(padded, start=axis, end=axis + 1))
        inside = op.And(op.GreaterOrEqual(pixels, start), op.LessOrEqual(pixels, end))
        return op.Mul(matrix, op.Unsqueeze(op.Cast(inside, to=_FLOAT), [2]))

    rows = resize(y1, y2, image_height, 1)
    columns = resize(x1, x2, image_width, 2)
    pasted = op.MatMul(op.MatMul(rows, padded), op.Transpose(columns, perm=[0, 2, 1]))
    return op.Unsqueeze(op.CastLike(pasted, masks), [1])


@_traced
def heatmaps_to_keypoints(maps, rois):
    """Each box's heatmaps (N, K, S, S) resized (bicubic) to the box's size rounded up, all boxes padded
    to the largest by repeating their last row and column (so the first maximum is a real pixel): the
    maximum's place (N, K, 3: x, y, 1) and value (N, K)."""
    x1, y1, x2, y2 = (_column(rois, i) for i in range(4))
    one_f = op.Constant(value_float=1.0)
    widths, heights = op.Max(op.Sub(x2, x1), one_f), op.Max(op.Sub(y2, y1), one_f)
    sizes = []
    for length in (heights, widths):
        size = op.Cast(op.Ceil(length), to=_INT64)
        largest = op.ReduceMax(op.Concat(size, op.Constant(value_ints=[1]), axis=0), keepdims=1)
        sizes.append((op.Unsqueeze(size, [1]), largest))
    one = op.Constant(value_int=1)

    def resize(size, largest, input_size):
        pixels = op.Unsqueeze(op.Range(op.Constant(value_int=0), op.Reshape(largest, []), one), [0])
        return _bicubic(op.Min(pixels, op.Sub(size, one)), size, input_size)

    (height, max_height), (width, max_width) = sizes
    rows = resize(height, max_height, op.Shape(maps, start=2, end=3))
    columns = resize(width, max_width, op.Shape(maps, start=3, end=4))
    resized = op.MatMul(
        op.Unsqueeze(rows, [1]), op.MatMul(maps, op.Unsqueeze(op.Transpose(columns, perm=[0, 2, 1]), [1]))
    )  # (N, K, largest height, largest width)
    flat = op.Reshape(resized, op.Concat(op.Shape(maps, start=0, end=2), op.Mul(max_height, max_width), axis=0))
    position = op.ArgMax(flat, axis=2, keepdims=0)
    x = op.Cast(op.Mod(position, max_width), to=_FLOAT)
    y = op.Cast(op.Div(position, max_width), to=_FLOAT)
    half = op.Constant(value_float=0.5)
    width_correction = op.Div(widths, op.Cast(op.Squeeze(width, [1]), to=_FLOAT))
    height_correction = op.Div(heights, op.Cast(op.Squeeze(height, [1]), to=_FLOAT))
    xs = op.Add(op.Mul(op.Add(x, half), op.Unsqueeze(width_correction, [1])), op.Unsqueeze(x1, [1]))
    ys = op.Add(op.Mul(op.Add(y, half), op.Unsqueeze(height_correction, [1])), op.Unsqueeze(y1, [1]))
    xy = op.Concat(
        op.Unsqueeze(xs, [2]), op.Unsqueeze(ys, [2]), op.Unsqueeze(op.Expand(one_f, op.Shape(xs)), [2]), axis=2
    )
    return xy, op.ReduceMax(flat, [2], keepdims=0)


FUNCTIONS = {
    OpName("onnxlens", "batched_nms"): batched_nms,
    OpName("onnxlens", "multiscale_roi_align"): multiscale_roi_align,
    OpName("onnxlens", "paste_masks_in_image"): paste_masks_in_image,
    OpName("onnxlens", "heatmaps_to_keypoints"): heatmaps_to_keypoints,
}
