"""An export run in a real Jupyter kernel (ipykernel, started by jupyter_client): its SARIF log names the
notebook's cell, not ipykernel's ``/tmp/ipykernel_<pid>/<hash>.py``."""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

IMPORTS = "import torch\nimport exporter"
MODEL = """@torch.library.custom_op("kerneltest::twist", mutates_args=())
def twist(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twist.register_fake
def _(x):
    return torch.empty_like(x)


class Net(torch.nn.Module):
    def forward(self, x):
        return twist(x) + 1"""
EXPORT = """try:
    exporter.dynamo_export(Net(), torch.randn(2, 3))
except exporter.OnnxExporterError as e:
    failed = e.export_output"""
CELLS = [("code", IMPORTS), ("markdown", "# A model"), ("code", MODEL), ("code", EXPORT)]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """A kernel (this interpreter) that ran the notebook's code cells, as a front end sends them; and the notebook."""
    folder = tmp_path_factory.mktemp("nb")
    notebook = folder / "kernel_model.ipynb"
    cells = [
        {
            "cell_type": kind,
            "id": f"cell-{i}",
            "metadata": {},
            "source": text.splitlines(keepends=True),
            **({"outputs": [], "execution_count": None} if kind == "code" else {}),
        }
        for i, (kind, text) in enumerate(CELLS)
    ]
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    manager = jupyter_client.KernelManager(kernel_name="python3")  # ipykernel's own spec: this interpreter
    assert manager.kernel_spec.argv[0] in (sys.executable, "python")
    env = {k: v for k, v in os.environ.items() if k != "JPY_SESSION_NAME"}  # no notebook named by a server
    manager.start_kernel(cwd=str(folder), env=env)
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=120)
    try:
        for kind, text in CELLS:
            if kind == "code":
                run(client, text)
        yield client, notebook
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def run(client, code: str) -> None:
    reply = client.execute_interactive(code, timeout=300, output_hook=lambda message: None)
    assert reply["content"]["status"] == "ok", reply["content"]


def saved_log(client, folder: pathlib.Path, call: str) -> dict:
    log = folder / "kernel.sarif"
    log.unlink(missing_ok=True)
    run(client, call.format(log=str(log)))
    return json.loads(log.read_text())


def fxe0011(log: dict) -> dict:
    (result,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "FXE0011"]
    return result


def uri_of(log: dict, location: dict) -> str:
    artifact = location["artifactLocation"]
    base = log["runs"][0]["originalUriBaseIds"][artifact["uriBaseId"]]["uri"] if "uriBaseId" in artifact else ""
    return base + artifact["uri"]


def program_line_of_twist_call() -> int:
    """1-based line of the call in the notebook's program: the code cells one after the other."""
    return len(IMPORTS.splitlines()) + MODEL.splitlines().index("        return twist(x) + 1") + 1


def test_log_locations_name_the_notebook_cell(kernel):
    client, notebook = kernel
    log = saved_log(client, notebook.parent, f"failed.save_diagnostics({{log!r}}, notebook={str(notebook)!r})")
    result = fxe0011(log)
    location = result["locations"][0]["physicalLocation"]
    assert uri_of(log, location) == notebook.as_uri()
    assert location["region"]["startLine"] == program_line_of_twist_call()
    cell_line = MODEL.splitlines().index("        return twist(x) + 1") + 1
    assert result["properties"]["notebookCells"][0] == {
        "line": program_line_of_twist_call(),
        "cell": 3,
        "cellLine": cell_line,
        "cellId": "cell-2",
    }
    assert "unmappedFrames" not in result["properties"]


def test_the_notebook_vs_code_runs_is_found_without_asking(kernel):
    client, notebook = kernel
    run(client, f"__vsc_ipynb_file__ = {str(notebook)!r}")  # what VS Code's Jupyter extension sets in the kernel
    try:
        result = fxe0011(saved_log(client, notebook.parent, "failed.save_diagnostics({log!r})"))
    finally:
        run(client, "del __vsc_ipynb_file__")
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == program_line_of_twist_call()
    assert result["properties"]["notebookCells"][0]["cell"] == 3


def test_frames_of_an_unknown_notebook_say_so(kernel):
    client, notebook = kernel
    log = saved_log(client, notebook.parent, "failed.save_diagnostics({log!r})")
    result = fxe0011(log)
    assert re.search(r"/ipykernel_\d+/\d+\.py$", uri_of(log, result["locations"][0]["physicalLocation"]))
    unmapped = result["properties"]["unmappedFrames"]  # the model cell's frame first, then its callers'
    assert unmapped and all("notebook is unknown" in u and "notebook=" in u for u in unmapped)
    assert re.search(rf"\.py:{MODEL.splitlines().index('        return twist(x) + 1') + 1}: ", unmapped[0])
