"""Notebooks (LSP 3.17 notebook sync): an open notebook is one program, its Python cells in notebook order
(`exporter.diagnostics.notebook_program`), exported under the notebook's path; each line of it maps
back to (cell URI, line in the cell).

Cell URIs are kept exactly as the client gave them (VS Code's carry an escaped fragment): problems are
published to them as they are. The server's state keys a cell by that URI, a file by its path
(`documents.key_of`). Results are mapped to cells once, when an export's result arrives (`locate_log`),
with the map of the text that was exported.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import unquote

import attrs
from lsprotocol import types
from pygls.uris import to_fs_path
from pygls.workspace import Workspace

from exporter.diagnostics.notebook_program import Program, program
from onnxlens_server.sarif_log import Location, SarifLog
from onnxlens_server.targets import Discovery

PYTHON = "python"
SYNC_OPTIONS = types.NotebookDocumentSyncOptions(
    notebook_selector=[types.NotebookDocumentFilterWithCells(cells=[types.NotebookCellLanguage(PYTHON)], notebook="*")],
)


@dataclasses.dataclass(frozen=True)
class Notebook:
    """An open notebook's program and where its lines come from."""

    uri: str  # the notebook's, as the client gave it
    path: str  # the notebook file (the program's frames name it)
    version: int
    cells: tuple[str, ...]  # the Python cells' URIs, in notebook order
    program: Program
    open_ends: tuple[bool, ...]  # each cell's text ends without a newline (an insertion at its end needs one)

    def locate(self, path: str, line: int) -> tuple[str, int]:
        """(cell URI, line in it) of the program's `line` when `path` is the notebook; else (path, line)."""
        at = self.program.cell_at(line) if path == self.path else None
        return (self.cells[at[0]], at[1]) if at else (path, line)

    def program_line(self, cell_uri: str, line: int) -> int | None:
        """The program's line of `line` of the cell `cell_uri` (None: not one of its Python cells)."""
        index = self._index(cell_uri)
        return None if index is None else self.program.line_of(index, line)

    def in_cell(self, found: Discovery, cell_uri: str) -> Discovery:
        """`found` (the program's) with only the targets and module classes defined in the cell, on its lines."""

        def inside(line: int) -> bool:
            return self.locate(self.path, line)[0] == cell_uri

        def shifted(item):  # a Target or a ModuleClass: its line fields moved into the cell
            fields = {
                f: self.locate(self.path, getattr(item, f))[1]
                for f in ("line", "end_line", "decorator_line")
                if hasattr(item, f)
            }
            return dataclasses.replace(item, **fields)

        return dataclasses.replace(
            found,
            targets=[shifted(t) for t in found.targets if inside(t.decorator_line)],
            modules=[shifted(m) for m in found.modules if inside(m.line)],
        )

    def to_program(self, where: types.Range, cell_uri: str) -> types.Range | None:
        """A range of the cell `cell_uri` as a range of the program."""
        index = self._index(cell_uri)
        if index is None:
            return None
        return types.Range(
            types.Position(self.program.line_of(index, where.start.line), where.start.character),
            types.Position(self.program.line_of(index, where.end.line), where.end.character),
        )

    def in_cells(self, actions: list[types.CodeAction]) -> list[types.CodeAction]:
        """Code actions made on the program, their edits of the notebook's cells moved into the cells (an action
        whose edit would span cells left out)."""
        moved = [(action, self.edit_cells(action.edit)) for action in actions]
        return [attrs.evolve(action, edit=edit) for action, edit in moved if edit is not None or action.edit is None]

    def edit_cells(self, edit: types.WorkspaceEdit | None) -> types.WorkspaceEdit | None:
        """`edit`, whose edits of this notebook's cells are in program lines, as edits of each cell; None if
        one spans cells. An insertion at the start of a line goes after the line before (the end of the
        previous cell at a cell's first line: what goes after an import, a class, the last line)."""
        if edit is None or not edit.changes:
            return edit
        changes: dict[str, list[types.TextEdit]] = {}
        for uri, edits in edit.changes.items():
            if self._index(uri) is None:
                changes.setdefault(uri, []).extend(edits)
                continue
            for text_edit in edits:
                moved = self._edit_in_cell(text_edit)
                if moved is None:
                    return None
                changes.setdefault(moved[0], []).append(moved[1])
        return types.WorkspaceEdit(changes=changes)

    def _edit_in_cell(self, edit: types.TextEdit) -> tuple[str, types.TextEdit] | None:
        start, end = edit.range.start, edit.range.end
        if start == end and start.character == 0 and start.line > 0:  # an insertion after line start.line - 1
            at = self.program.cell_at(start.line - 1)
            if at is None:
                return None
            cell, line = at[0], at[1] + 1
            text = "\n" + edit.new_text if line == self.program.lines[cell] and self.open_ends[cell] else edit.new_text
            position = types.Position(line, 0)
            return self.cells[cell], types.TextEdit(types.Range(position, position), text)
        first, last = self.program.cell_at(start.line), self.program.cell_at(end.line)
        if first is None or last is None or first[0] != last[0]:
            return None
        at = types.Range(types.Position(first[1], start.character), types.Position(last[1], end.character))
        return self.cells[first[0]], types.TextEdit(at, edit.new_text)

    def _index(self, cell_uri: str) -> int | None:
        wanted = unquote(cell_uri)
        return next((i for i, uri in enumerate(self.cells) if unquote(uri) == wanted), None)


def of_cell(workspace: Workspace, cell_uri: str) -> Notebook | None:
    """The open notebook holding the cell `cell_uri` (None: not a cell of an open notebook on disk)."""
    notebook = workspace.get_notebook_document(cell_uri=cell_uri)
    path = to_fs_path(notebook.uri) if notebook is not None else None
    if notebook is None or path is None:
        return None
    cells, texts = [], []
    for cell in notebook.cells:
        document = workspace.text_documents.get(unquote(cell.document))
        if cell.kind == types.NotebookCellKind.Code and document is not None and document.language_id == PYTHON:
            cells.append(cell.document)
            texts.append(document.source)
    open_ends = tuple(bool(text) and not text.endswith(("\n", "\r")) for text in texts)
    return Notebook(notebook.uri, path, notebook.version, tuple(cells), program(texts), open_ends)


def cell_uris(workspace: Workspace, notebook_uri: str) -> list[str]:
    """The URIs of every cell of an open notebook, as the client gave them."""
    notebook = workspace.get_notebook_document(notebook_uri=notebook_uri)
    return [cell.document for cell in notebook.cells] if notebook is not None else []


def locate_log(log: SarifLog, notebook: Notebook) -> SarifLog:
    """`log` with its locations in the notebook's program moved to (cell URI, line in the cell)."""

    def moved(where: Location | None) -> Location | None:
        if where is None:
            return None
        key, line = notebook.locate(where.path, where.line)
        return where if key == where.path else dataclasses.replace(where, path=key, line=line)

    results = [
        dataclasses.replace(r, location=moved(r.location), related=[moved(w) for w in r.related]) for r in log.results
    ]
    return dataclasses.replace(log, results=results)


def stale_cells(params: types.DidChangeNotebookDocumentParams, workspace: Workspace) -> list[str]:
    """The cells whose results a notebook change makes stale: the edited cells; every cell (those
    closed too) when cells were moved, deleted or changed language (a new cell changes no result)."""
    cells = params.change.cells
    if cells is None:
        return []
    if cells.structure is not None and (cells.structure.array.delete_count or cells.structure.did_close):
        closed = [c.uri for c in cells.structure.did_close or []]
        return cell_uris(workspace, params.notebook_document.uri) + closed
    return [c.document.uri for c in cells.text_content or []]


def locate_graph(graph: dict[str, Any], notebook: Notebook) -> dict[str, Any]:
    """A graph's (`onnxlens_server.graph`) source frames in the notebook's program moved to their cells:
    ``path`` the cell's URI, ``line`` (1-based) the cell's."""

    def moved(frame: dict[str, Any] | None) -> dict[str, Any] | None:
        if frame is None:
            return None
        key, line = notebook.locate(frame["path"], frame["line"] - 1)
        return frame if key == frame["path"] else {**frame, "path": key, "line": line + 1}

    for item in [*graph.get("nodes", []), *graph.get("groups", [])]:
        item["source"] = moved(item.get("source"))
        if "stack" in item:
            item["stack"] = [moved(f) for f in item["stack"]]
    return graph
