"""A cold export of the seed MLP, as a user runs one: a fresh process each time.

    python benchmarks/cold_start.py [--repeats 5]

Side by side, interleaved: ``onnxlens-export examples/mlp.py:mlp -o …`` (the CLI, beside this
interpreter) and a script that imports torch and calls ``torch.onnx.export(..., dynamo=True)`` on the
same model. Prints the wall time of each run, the medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_ONNX = """
import sys
sys.path.insert(0, {examples!r})
import torch
from mlp import MLPModel
torch.onnx.export(MLPModel(), (torch.randn(97, 8),), {out!r}, dynamo=True)
"""


def seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cli = os.path.join(os.path.dirname(sys.executable), "onnxlens-export")
    with tempfile.TemporaryDirectory() as out:
        script = TORCH_ONNX.format(examples=os.path.join(REPO, "examples"), out=os.path.join(out, "t.onnx"))
        commands = {
            "onnxlens-export": [cli, os.path.join(REPO, "examples", "mlp.py") + ":mlp", "-o", os.path.join(out, "o.onnx")],
            "torch.onnx.export": [sys.executable, "-c", script],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeats):
            for name, command in commands.items():
                times[name].append(seconds(command))
    for name, values in times.items():
        print(f"{name:18} median {statistics.median(values):.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")
    ratio = statistics.median(times["onnxlens-export"]) / statistics.median(times["torch.onnx.export"])
    print(f"ratio onnxlens / torch.onnx: {ratio:.2f}")


if __name__ == "__main__":
    main()
