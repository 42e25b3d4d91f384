"""timm's image models (random weights, eval) exported with a dynamic batch, height and width named as a user
names them in JSON (``{"x": {"0": "batch", "2": "height", "3": "width"}}``), by onnxlens (verify on: the second-size
check runs at other sizes) and by ``torch.onnx.export(dynamo=True)`` with the same names; each exported model is
then run in onnxruntime at other image sizes and compared with eager PyTorch. The FXE0020 results say what range
the graph is right in (``height >= 33``) or why a dimension could not be dynamic (ViT's 224).

Needs timm, which needs torchvision: its own virtualenv (torchvision needs torch 2.14.1 here), with onnxlens
from this checkout on its path::

    python3 -m venv /work/venvs/tv && /work/venvs/tv/bin/pip install torch==2.14.1 torchvision==0.29.1 timm \\
        onnx onnx-ir onnxscript onnxruntime sarif-om "ml_dtypes!=0.7.0"
    echo "$PWD" > "$(/work/venvs/tv/bin/python -c 'import site; print(site.getsitepackages()[0])')/onnxlens.pth"
    /work/venvs/tv/bin/python benchmarks/timm_dynamic_sweep.py [--models resnet18,levit_128s] [--exporters onnxlens]
"""

from __future__ import annotations

import argparse
import io
import time
import warnings

import numpy as np
import onnxruntime as ort
import timm
import torch

import exporter

MODELS = (
    "resnet18,efficientnet_b0,mobilenetv3_small_100,convnext_atto,regnetx_002,densenet121,ghostnet_100,repvgg_a0,"
    "fastvit_t8,poolformer_s12,edgenext_xx_small,efficientvit_b0,levit_128s,mobilevit_xxs,vit_tiny_patch16_224"
)
SPEC = {"x": {0: "batch", 2: "height", 3: "width"}}
OTHER_SIZES = ((1, 64, 96), (3, 160, 288), (1, 256, 256))


def onnxlens(model: torch.nn.Module, x: torch.Tensor) -> tuple[bytes | None, str]:
    """The model's ONNX bytes (None if refused) and what FXE0020 said, in short."""
    try:
        output = exporter.dynamo_export(
            model, x, export_options=exporter.ExportOptions(verify=True, dynamic_shapes=SPEC)
        )
        model_bytes = output.model_proto.SerializeToString()
    except exporter.OnnxExporterError as e:
        output, model_bytes = e.export_output, None
    said = [
        d.message.split(":")[0][:90]
        for d in output.diagnostic_context.diagnostics
        if d.rule.id == "FXE0020" and d.level.name != "NONE" and not d.message.startswith(("Symbolic", "Second-size"))
    ]
    return model_bytes, "; ".join(said)


def torch_onnx(model: torch.nn.Module, x: torch.Tensor) -> tuple[bytes | None, str]:
    try:
        program = torch.onnx.export(model, (x,), dynamo=True, dynamic_shapes=SPEC, verbose=False)
    except Exception as e:  # noqa: BLE001 - the sweep records every failure
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    buffer = io.BytesIO()
    program.save(buffer)
    return buffer.getvalue(), ""


EXPORTERS = {"onnxlens": onnxlens, "torch.onnx": torch_onnx}


def at_other_sizes(model: torch.nn.Module, model_bytes: bytes) -> str:
    """How many of `OTHER_SIZES` the ONNX model matches eager at (where eager runs), or the first mismatch."""
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    matched, tried = 0, 0
    for batch, height, width in OTHER_SIZES:
        x = torch.randn(batch, 3, height, width)
        try:
            expected = model(x).detach().numpy()
        except Exception:  # noqa: BLE001 - the model itself does not take this size
            continue
        tried += 1
        try:
            (actual,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        except Exception as e:  # noqa: BLE001
            return f"fails at {height}x{width}: {str(e).splitlines()[0][:80]}"
        if not np.allclose(actual, expected, rtol=1e-3, atol=1e-4):
            return f"differs at {height}x{width} by {float(np.abs(actual - expected).max()):.3g}"
        matched += 1
    return f"{matched}/{tried} sizes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    options = parser.parse_args()
    warnings.filterwarnings("ignore")
    print("| model | exporter | s | exported | eager = onnxruntime at other sizes | FXE0020 |")
    print("|---|---|---|---|---|---|")
    for name in options.models.split(","):
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False).eval()
        height, width = (model.pretrained_cfg or {}).get("input_size", (3, 224, 224))[1:]
        x = torch.randn(2, 3, height, width)
        for tool in options.exporters.split(","):
            start = time.perf_counter()
            model_bytes, said = EXPORTERS[tool](model, x)
            seconds = time.perf_counter() - start
            checked = at_other_sizes(model, model_bytes) if model_bytes else ""
            exported = "yes" if model_bytes else "no"
            print(f"| {name} | {tool} | {seconds:.1f} | {exported} | {checked} | {said} |", flush=True)


if __name__ == "__main__":
    main()
