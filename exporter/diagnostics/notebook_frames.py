"""Frames of code run in a Jupyter kernel, mapped to the notebook the code came from.

ipykernel compiles each cell it runs under a file of its own, ``<tmp>/ipykernel_<pid>/<hash>.py``, the hash
being murmur2 of the cell's text (`ipykernel.compiler.get_file_name`): a file the user cannot open. When
the notebook is known, `in_notebook` puts such a frame at the notebook's path and the line of its
program (`exporter.diagnostics.notebook_program`, the lines the language server uses too), the cell found by
the hash of each cell's text in the saved notebook. Each result says in which cell and line
(`NOTEBOOK_CELLS`); a kernel frame no cell matches (the notebook unknown, or a cell edited since it
ran and not saved) stays where it was, and the result says so (`UNMAPPED_FRAMES`).

The notebook is, in this order: the ``notebook=`` argument of ``save_diagnostics``, VS Code's
``__vsc_ipynb_file__`` in the kernel's namespace, Jupyter Server's ``JPY_SESSION_NAME``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
import re
import sys
from typing import TYPE_CHECKING

from exporter.diagnostics.locations import Frame
from exporter.diagnostics.notebook_program import Program, program

if TYPE_CHECKING:
    from exporter.diagnostics.context import DiagnosticContext

NOTEBOOK_CELLS = "notebookCells"  # [{line, cell, cellLine, cellId}]: where the result's frames are in the notebook
UNMAPPED_FRAMES = "unmappedFrames"  # ["<file>:<line>: why"]: kernel frames left in ipykernel's cell files
_KERNEL_FILE = re.compile(r"ipykernel_\d+[/\\](?P<hash>\d+)\.py$")


@dataclasses.dataclass(frozen=True)
class NotebookCells:
    """A saved notebook's Python code cells: its program, and each cell by the hash ipykernel names it by."""

    path: str
    program: Program
    by_hash: dict[int, int]  # murmur2 of a cell's text -> its index among the code cells
    positions: tuple[int, ...]  # each code cell's 1-based position among all the notebook's cells
    ids: tuple[str | None, ...]  # each code cell's nbformat id

    def locate(self, frame: Frame) -> tuple[Frame, dict] | None:
        """`frame` at the notebook's path and program line, and where that is (cell, line in it); None if
        no cell has the text the kernel ran."""
        index = self.by_hash.get(int(_KERNEL_FILE.search(frame.path)["hash"]))
        if index is None:
            return None
        line = self.program.line_of(index, frame.line - 1) + 1
        where = {"line": line, "cell": self.positions[index], "cellLine": frame.line, "cellId": self.ids[index]}
        return dataclasses.replace(frame, path=self.path, line=line), where


@functools.lru_cache(maxsize=8)
def read_notebook(path: str, mtime: float) -> NotebookCells:
    """The code cells of the notebook saved at `path` (`mtime` keys the cache)."""
    from ipykernel.compiler import get_tmp_hash_seed, murmur2_x86  # the hash the kernel names its files by

    with open(path, encoding="utf-8") as f:
        cells = json.load(f).get("cells", [])
    code = [(i, cell) for i, cell in enumerate(cells) if cell.get("cell_type") == "code"]
    texts = [
        "".join(cell.get("source", "")) if isinstance(cell.get("source"), list) else cell.get("source", "")
        for _, cell in code
    ]
    by_hash = {murmur2_x86(text, get_tmp_hash_seed()): i for i, text in enumerate(texts)}
    return NotebookCells(
        os.path.abspath(path),
        program(texts),
        by_hash,
        tuple(i + 1 for i, _ in code),
        tuple(cell.get("id") for _, cell in code),
    )


def kernel_notebook(notebook: str | os.PathLike | None = None) -> str | None:
    """The notebook the kernel runs: `notebook`, else the one VS Code or Jupyter Server says (None: unknown)."""
    if notebook is not None:
        return os.fspath(notebook)
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    named = getattr(shell, "user_ns", {}).get("__vsc_ipynb_file__") or os.environ.get("JPY_SESSION_NAME")
    return named if isinstance(named, str) and named.endswith(".ipynb") and os.path.isfile(named) else None


def in_notebook(ctx: DiagnosticContext, notebook: str | os.PathLike | None = None) -> DiagnosticContext:
    """`ctx`, or a copy whose results' frames in ipykernel's cell files are in the notebook (`kernel_notebook`)."""
    if not any(_KERNEL_FILE.search(f.path) for d in ctx.diagnostics for f in d.stack):
        return ctx
    path = kernel_notebook(notebook)
    cells = read_notebook(os.path.abspath(path), os.path.getmtime(path)) if path else None
    mapped = copy.copy(ctx)
    mapped.diagnostics = [_mapped(d, cells) for d in ctx.diagnostics]
    return mapped


def _mapped(diagnostic, cells: NotebookCells | None):
    stack, found, unmapped = [], [], []
    for frame in diagnostic.stack:
        located = cells.locate(frame) if cells and _KERNEL_FILE.search(frame.path) else None
        if located is not None:
            stack.append(located[0])
            found.append(located[1])
        else:
            stack.append(frame)
            if _KERNEL_FILE.search(frame.path):
                why = (
                    f"no cell of {os.path.basename(cells.path)} has the text the kernel ran (edited, not saved?)"
                    if cells
                    else "the notebook is unknown: pass notebook= to save_diagnostics"
                )
                unmapped.append(f"{frame.path}:{frame.line}: {why}")
    if not found and not unmapped:
        return diagnostic
    properties = {
        **diagnostic.properties,
        **({NOTEBOOK_CELLS: found} if found else {}),
        **({UNMAPPED_FRAMES: unmapped} if unmapped else {}),
    }
    return dataclasses.replace(diagnostic, stack=stack, properties=properties)
