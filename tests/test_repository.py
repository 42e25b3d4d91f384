"""What set-up and exports generate stays out of git."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
GENERATED = [
    ".venv/bin/python",
    ".tools/node_modules/.bin/sarif-multitool",
    "out/mlp.onnx",
    "examples/mlp.mlp.onnx",
    "examples/mlp.sarif",
    "m.v2_initializers/weight",
    "onnxlens-out/models.t.onnx",
    "vscode-extension/node_modules/x/index.js",
    "vscode-extension/dist/onnxlens.vsix",
]


def test_generated_files_are_ignored():
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    result = subprocess.run([git, "check-ignore", "--no-index", *GENERATED], cwd=REPO, capture_output=True, text=True)
    assert sorted(result.stdout.split()) == sorted(GENERATED)
