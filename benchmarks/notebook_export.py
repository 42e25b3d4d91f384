"""A notebook export vs the same code in a .py file, side by side in one language server.

    python benchmarks/notebook_export.py [--repeats 8]

The seed MLP as a Python file (opened in the editor) and as a notebook (its imports, model and target in
three cells, synced as VS Code syncs notebooks): each exported from the editor (``workspace/executeCommand``
sent → answered, its problems published before the answer), plainly and with op-level debug (whose
per-line traces are mapped to the cells), warm, interleaved, median of `--repeats`. The notebook's extra
work is building its program from the cells and mapping the log's locations back to them.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from lsp_client import StdioClient  # noqa: E402

SOURCE = (REPO / "examples" / "mlp.py").read_text()
EXECUTE = "workspace/executeCommand"


def cells() -> list[str]:
    """The seed MLP file split into cells: the docstring and imports, the model class, the target."""
    lines = SOURCE.splitlines()
    model = next(i for i, line in enumerate(lines) if line.startswith("class MLPModel"))
    target = next(i for i, line in enumerate(lines) if line.startswith("@exporter.export_target"))
    return ["\n".join(lines[:model]).strip(), "\n".join(lines[model:target]).strip(), "\n".join(lines[target:]).strip()]


def open_notebook(client: StdioClient, path: pathlib.Path) -> str:
    """Open the notebook as VS Code does (a cell URI per cell); the URI of its target's cell."""
    uris = [f"vscode-notebook-cell:{path.as_posix()}#W{i}sZmlsZQ%3D%3D" for i in range(3)]
    client.notify(
        "notebookDocument/didOpen",
        {
            "notebookDocument": {
                "uri": path.as_uri(),
                "notebookType": "jupyter-notebook",
                "version": 1,
                "cells": [{"kind": 2, "document": uri} for uri in uris],
            },
            "cellTextDocuments": [
                {"uri": uri, "languageId": "python", "version": 1, "text": text} for uri, text in zip(uris, cells())
            ],
        },
    )
    return uris[-1]


def export_seconds(client: StdioClient, uri: str, options: dict) -> float:
    arguments = [{"uri": uri, "target": "mlp", "options": options}]
    answer = client.request(EXECUTE, {"command": "onnxlens.server.export", "arguments": arguments}, timeout=600)
    (job,) = answer.result["jobs"]
    assert job["status"] == "ok", job["message"]
    return answer.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    root = pathlib.Path(tempfile.mkdtemp(prefix="onnxlens-bench-nb-"))
    py_file, notebook = root / "mlp.py", root / "mlp_notebook.ipynb"
    py_file.write_text(SOURCE)
    notebook.write_text("{}")  # the server reads the editor's cells, not the file; the file must exist in the workspace

    client = StdioClient(cwd=REPO)
    client.request(
        "initialize",
        {
            "processId": os.getpid(),
            "rootUri": root.as_uri(),
            "capabilities": {"notebookDocument": {"synchronization": {}}},
        },
        timeout=60,
    )
    client.notify("initialized")
    py_uri = py_file.as_uri()
    client.notify(
        "textDocument/didOpen", {"textDocument": {"uri": py_uri, "languageId": "python", "version": 1, "text": SOURCE}}
    )
    cell_uri = open_notebook(client, notebook)
    cases = {"plain": {}, "op-level debug": {"opLevelDebug": True}}
    times: dict[tuple[str, str], list[float]] = {}
    try:
        for options in cases.values():  # warm-up: the fork server, torch and the registry in the workers
            export_seconds(client, py_uri, options)
            export_seconds(client, cell_uri, options)
        for _ in range(args.repeats):
            for case, options in cases.items():
                times.setdefault((case, ".py"), []).append(export_seconds(client, py_uri, options))
                times.setdefault((case, "notebook"), []).append(export_seconds(client, cell_uri, options))
    finally:
        client.close()

    print(f"seed MLP, warm, median of {args.repeats} (executeCommand sent -> answered, problems published before)")
    print(f"{'export':<16}{'.py file':>12}{'notebook':>12}{'ratio':>8}")
    for case in cases:
        py, nb = statistics.median(times[(case, ".py")]), statistics.median(times[(case, "notebook")])
        print(f"{case:<16}{py * 1000:>10.0f}ms{nb * 1000:>10.0f}ms{nb / py:>8.2f}")


if __name__ == "__main__":
    main()
