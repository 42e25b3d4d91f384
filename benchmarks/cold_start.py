"""A cold export of the seed MLP, as a user runs one: a fresh process each time.

    python benchmarks/cold_start.py [--repeats 5]

Side by side, interleaved: ``onnxlens-export examples/mlp.py:mlp -o …`` (the CLI, beside this
interpreter) and a script that imports torch and calls ``torch.onnx.export(..., dynamo=True)`` on the
same model. Prints the wall time of each run, the medians and their ratio, and the same for the
CPU time (user + system) of each process, which a machine busy with other work disturbs less.
The CLI runs the code that ``PYTHONPATH`` puts first (a worktree), as the interpreter would.
"""

from __future__ import annotations

import argparse
import os
import resource
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


def seconds(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of `command`."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cli = os.path.join(os.path.dirname(sys.executable), "onnxlens-export")
    with tempfile.TemporaryDirectory() as out:
        script = TORCH_ONNX.format(examples=os.path.join(REPO, "examples"), out=os.path.join(out, "t.onnx"))
        commands = {
            "onnxlens-export": [
                cli,
                os.path.join(REPO, "examples", "mlp.py") + ":mlp",
                "-o",
                os.path.join(out, "o.onnx"),
            ],
            "torch.onnx.export": [sys.executable, "-c", script],
        }
        times: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in commands}
        for _ in range(args.repeats):
            for name, command in commands.items():
                wall, cpu = seconds(command)
                times[name]["wall"].append(wall)
                times[name]["cpu"].append(cpu)
    for kind in ("wall", "cpu"):
        for name, values in times.items():
            print(
                f"{name:18} {kind:4} median {statistics.median(values[kind]):.2f} s  ({', '.join(f'{v:.2f}' for v in values[kind])})"
            )
        ratio = statistics.median(times["onnxlens-export"][kind]) / statistics.median(times["torch.onnx.export"][kind])
        print(f"ratio onnxlens / torch.onnx ({kind}): {ratio:.2f}")


if __name__ == "__main__":
    main()
