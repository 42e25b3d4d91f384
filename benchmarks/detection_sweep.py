"""torchvision's detection models exported by onnxlens and by ``torch.onnx.export(dynamo=True)``, run in
onnxruntime and compared with eager PyTorch (issue 31 item 3).

Needs torchvision (torch 2.14.1 + torchvision 0.29.1 here, in their own virtualenv)::

    /work/venvs/tv/bin/python benchmarks/detection_sweep.py [--models FasterRCNN,SSD] [--exporters onnxlens]

Models have random weights (``weights=None, weights_backbone=None``), eval mode, small images, and score
thresholds of 0 so that they detect boxes (up to ``detections_per_img``) whatever the weights. Each eager
detection is paired with the ONNX one of its label nearest to its box (their number depends on the data);
"static" is the export at the example's size run on another image of that size, "dynamic" the export with
dynamic image sizes run at two other sizes (`SECOND_SIZES`: the other orientation, and 69x138, which the
transform resizes to 87x176 in double precision where float32 gives 88). Where a dynamic export differs at a
size, a static export at that size is compared too: one that differs as well points at the model's numerics
there (R-CNN masks and keypoints round box sizes to whole pixels), not at the dynamic shapes. The virtualenv (onnxlens from this checkout on its path)::

    python3 -m venv /work/venvs/tv && /work/venvs/tv/bin/pip install torch==2.14.1 torchvision==0.29.1 \
        onnx onnx-ir onnxscript onnxruntime sarif-om ml_dtypes
    echo "$PWD" > "$(/work/venvs/tv/bin/python -c 'import site; print(site.getsitepackages()[0])')/onnxlens.pth"
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import onnxruntime as ort
import torch
from torchvision.models import detection

import exporter

SIZE, SECOND_SIZES = (160, 144), ((128, 176), (69, 138))
_RANDOM = {"weights": None, "weights_backbone": None}
_SMALL = {"min_size": 160, "max_size": 176}

MODELS: dict[str, Callable[[], torch.nn.Module]] = {
    "FasterRCNN": lambda: detection.fasterrcnn_resnet50_fpn(**_RANDOM, **_SMALL, box_score_thresh=0.0),
    "RetinaNet": lambda: detection.retinanet_resnet50_fpn(**_RANDOM, **_SMALL, score_thresh=0.0),
    "MaskRCNN": lambda: detection.maskrcnn_resnet50_fpn(**_RANDOM, **_SMALL, box_score_thresh=0.0),
    "KeypointRCNN": lambda: detection.keypointrcnn_resnet50_fpn(**_RANDOM, **_SMALL, box_score_thresh=0.0),
    "SSD": lambda: detection.ssd300_vgg16(**_RANDOM, score_thresh=0.0),
    "FCOS": lambda: detection.fcos_resnet50_fpn(**_RANDOM, **_SMALL, score_thresh=0.0),
}
_FIELDS = ("boxes", "scores", "labels", "masks", "keypoints", "keypoints_scores")
# Absolute tolerances beside rtol 1e-3 (default 1e-3). With random weights the outputs are sensitive to
# float noise: eager PyTorch itself, on the image times (1 + 1e-6), moves R-CNN boxes and keypoints by up to
# 2.4e-3 pixels; coordinates are compared to 1e-2 pixels, mask probabilities (pooled from those boxes)
# to 1e-2.
TOLERANCES = {"boxes": 1e-2, "keypoints": 1e-2, "masks": 1e-2}


class Detector(torch.nn.Module):
    """A detection model on a batch tensor, returning its first image's detections as a tuple."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, ...]:
        detections = self.model(list(images))[0]
        return tuple(detections[k] for k in _FIELDS if k in detections)


def _export_onnxlens(model: torch.nn.Module, image: torch.Tensor, dynamic: bool):
    # The sweep checks the second size itself, pairing detections; onnxlens' own second-size check compares
    # outputs element by element, which near-equal scores put in another order (see `_pairing`).
    options = exporter.ExportOptions(
        dynamic_shapes={"images": {2: "height", 3: "width"}} if dynamic else None, second_size_check=False
    )
    return exporter.dynamo_export(model, image, export_options=options).model_proto


def _export_torch_onnx(model: torch.nn.Module, image: torch.Tensor, dynamic: bool):
    dims = {"images": {2: torch.export.Dim("height", min=64, max=512), 3: torch.export.Dim("width", min=64, max=512)}}
    program = torch.onnx.export(model, (image,), dynamo=True, dynamic_shapes=dims if dynamic else None, verbose=False)
    return program.model_proto


EXPORTERS = {"onnxlens": _export_onnxlens, "torch.onnx": _export_torch_onnx}


def _pairing(actual: list[np.ndarray], expected: list[np.ndarray]) -> np.ndarray:
    """For each eager detection, the ONNX detection of the same label whose box is nearest (each taken
    once). Both come by decreasing score, but near-equal scores (random weights give many) may swap
    neighbours, and sorting by coordinates breaks where float noise crosses a rounding boundary."""
    boxes, labels = actual[0].astype(np.float64), actual[2]
    free = np.ones(len(boxes), dtype=bool)
    order = []
    for box, label in zip(expected[0].astype(np.float64), expected[2]):
        distance = np.where(free & (labels == label), np.abs(boxes - box).max(axis=1), np.inf)
        nearest = int(np.argmin(distance))
        free[nearest] = False
        order.append(nearest)
    return np.array(order, dtype=np.int64)


def compare(actual: list[np.ndarray], expected: list[np.ndarray]) -> tuple[bool, str, str]:
    """Whether ONNX detections equal eager's: the same count, each eager detection paired with one of
    the same label (`_pairing`), every field within `TOLERANCES`; the largest absolute difference of each
    field, and the box counts."""
    counts = f"{len(actual[0])}/{len(expected[0])}"
    if len(actual) != len(expected) or len(actual[0]) != len(expected[0]):
        return False, "", counts
    order = _pairing(actual, expected)
    close, worst = True, []
    names = ("boxes", "scores", "labels", "masks") if len(actual) == 4 else _FIELDS[:3] + _FIELDS[4:]
    for field, a, e in zip(names, actual, expected):
        a = a[order]
        if a.shape != e.shape:
            return False, "", counts
        if a.size:
            difference = float(np.abs(a.astype(np.float64) - e.astype(np.float64)).max())
            worst.append(f"{field} {difference:.1e}")
            close &= bool(np.allclose(a, e, atol=TOLERANCES.get(field, 1e-3), rtol=1e-3))
    return close, ", ".join(worst), counts


def _run(model_proto, image: torch.Tensor) -> list[np.ndarray]:
    session = ort.InferenceSession(model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: image.numpy()})


def check(model: torch.nn.Module, export, dynamic: bool) -> dict:
    """Export `model` and compare it with eager on another image (at each of `SECOND_SIZES` if `dynamic`)."""
    generator = torch.Generator().manual_seed(1)
    example = torch.rand(1, 3, *SIZE, generator=generator)
    images = [torch.rand(1, 3, *size, generator=generator) for size in (SECOND_SIZES if dynamic else [SIZE])]
    start = time.perf_counter()
    try:
        model_proto = export(model, example, dynamic)
    except Exception as e:  # noqa: BLE001 - the table reports it
        return {"ok": False, "error": f"export: {type(e).__name__}: {str(e).splitlines()[0][:90]}", "seconds": None}
    seconds = time.perf_counter() - start
    oks, worsts, counts = [], [], []
    for image in images:
        with torch.no_grad():
            expected = [t.numpy() for t in model(image)]
        try:
            actual = _run(model_proto, image)
        except Exception as e:  # noqa: BLE001
            return {"ok": False, "error": f"onnxruntime: {str(e).splitlines()[0][:90]}", "seconds": seconds}
        ok, worst, count = compare(actual, expected)
        if not ok and dynamic:  # the dynamic shapes' fault, or the model's numerics there (as the exporter tells)?
            static_ok, static_worst, _ = compare(_run(export(model, image, False), image), expected)
            verdict = "matches" if static_ok else "differs too"
            worst += f" [at {tuple(image.shape[2:])} a static export {verdict}: {static_worst}]"
        oks.append(ok)
        worsts.append(worst)
        counts.append(count)
    return {
        "ok": all(oks),
        "max_errors": " / ".join(worsts),
        "counts": " / ".join(counts),
        "seconds": seconds,
        "error": "",
    }


def _cell(result: dict) -> str:
    if result.get("counts") is None:
        return "fail"
    return f"{'match' if result['ok'] else 'DIFFER'} ({result['counts']} boxes; {result['max_errors']})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    args = parser.parse_args()
    rows, errors = [], []
    for name in args.models.split(","):
        torch.manual_seed(0)  # each model's weights the same alone as in the whole sweep
        model = Detector(MODELS[name]()).eval()
        for exporter_name in args.exporters.split(","):
            results = [check(model, EXPORTERS[exporter_name], dynamic) for dynamic in (False, True)]
            seconds = "/".join(f"{r['seconds']:.0f}" if r["seconds"] is not None else "-" for r in results)
            rows.append((name, exporter_name, _cell(results[0]), _cell(results[1]), seconds))
            errors += [
                f"{name} {exporter_name} {kind}: {r['error']}"
                for kind, r in zip(("static", "dynamic"), results)
                if r["error"]
            ]
            print(" | ".join(rows[-1]), flush=True)
    header = (
        "model",
        "exporter",
        "static: match (boxes onnx/eager; max abs error per output)",
        "dynamic (at each of SECOND_SIZES)",
        "export s (static/dynamic)",
    )
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    for line in errors:
        print(line)


if __name__ == "__main__":
    main()
