"""A reproducer of the first divergence: ``<stem>_repro/`` beside the model, small enough for a bug report.

``model.onnx`` holds only the diverging node's ONNX nodes (and the weights they use), ``inputs.npz``
their inputs and ``expected.npz`` PyTorch's outputs for them; ``run.py`` runs the model in
onnxruntime and exits 1 while it differs from the expected outputs, 0 once it matches.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedOpsetsPass

from exporter.output.files import atomic_path
from exporter.verify import ort_session

_RUN_PY = '''"""{title}

Runs model.onnx in onnxruntime on inputs.npz and compares with PyTorch's outputs in expected.npz:
exits 1 while they differ (beyond |onnx - torch| <= {atol!r} + {rtol!r} * |torch|), 0 when they match.
Written by onnxlens (https://github.com/onnxlens/onnxlens).
"""

import pathlib
import sys

import numpy as np
import onnxruntime as ort

ATOL, RTOL = {atol!r}, {rtol!r}

here = pathlib.Path(__file__).resolve().parent
inputs = dict(np.load(here / "inputs.npz"))
expected = dict(np.load(here / "expected.npz"))
session = ort.InferenceSession(str(here / "model.onnx"), providers=["CPUExecutionProvider"])
actual = session.run(list(expected), inputs)
failed = False
for (name, want), got in zip(expected.items(), actual):
    want, got = want.astype(np.float64), np.asarray(got).astype(np.float64)
    ok = got.shape == want.shape and np.allclose(got, want, atol=ATOL, rtol=RTOL, equal_nan=True)
    error = np.abs(got - want).max() if got.shape == want.shape and want.size else float("nan")
    print(f"{{name}}: {{'matches' if ok else 'DIFFERS'}} (max abs error {{error:.3g}}, atol {{ATOL:g}}, rtol {{RTOL:g}})")
    failed |= not ok
sys.exit(1 if failed else 0)
'''


@dataclasses.dataclass
class Reproducer:
    """The diverging nodes as a model of their own, with inputs and PyTorch's expected outputs."""

    title: str  # what diverged, where (the docstring of run.py)
    graph: ir.Graph
    ir_version: int
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    atol: float
    rtol: float

    def model(self) -> ir.Model:
        model = ir.Model(self.graph, ir_version=self.ir_version)
        RemoveUnusedOpsetsPass()(model)
        return model

    def run(self) -> list[np.ndarray]:
        """The model's outputs in onnxruntime on the inputs (what ``run.py`` compares)."""
        session = ort_session.session(self.model())
        return session.run(list(self.expected), self.inputs)

    def write(self, directory: str) -> None:
        """Write ``model.onnx``, ``inputs.npz``, ``expected.npz`` and ``run.py`` into `directory`."""
        os.makedirs(directory, exist_ok=True)
        model = self.model()
        with atomic_path(os.path.join(directory, "model.onnx")) as tmp:
            ir.save(model, tmp)
        for name, arrays in (("inputs.npz", self.inputs), ("expected.npz", self.expected)):
            with atomic_path(os.path.join(directory, name)) as tmp, open(tmp, "wb") as f:
                np.savez(f, **arrays)
        with atomic_path(os.path.join(directory, "run.py")) as tmp, open(tmp, "w") as f:
            f.write(_RUN_PY.format(title=self.title.replace('"""', "'''"), atol=self.atol, rtol=self.rtol))


def directory_for(model_path: str) -> str:
    """``<stem>_repro`` beside `model_path` (the whole stem: ``m.v2.onnx`` → ``m.v2_repro``)."""
    root, ext = os.path.splitext(model_path)
    return (root if ext == ".onnx" else model_path) + "_repro"
