"""Documents as the server sees them: the editor's text when open, else the file on disk; a notebook
cell's text is its notebook's program (`notebooks`).

The server's state keys a document by its path, a notebook cell by its URI as the client gave it
(`key_of`, `uri_of`)."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from typing import TYPE_CHECKING
from urllib.parse import unquote

from pygls.uris import to_fs_path
from pygls.workspace import Workspace

from onnxlens_server.protocol import ErrorCode, RequestError

if TYPE_CHECKING:
    from onnxlens_server.notebooks import Notebook

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")  # a scheme of two or more characters (C: is a drive)


@dataclasses.dataclass(frozen=True)
class Text:
    path: str
    source: str
    version: int | None  # the open document's version; None: the file on disk
    notebook: Notebook | None = None  # a cell's notebook: `source` is its program, `path` the notebook's

    def locate(self, path: str, line: int) -> tuple[str, int]:
        """The document key and line of `line` of `path` (the notebook's program: the cell's)."""
        return self.notebook.locate(path, line) if self.notebook is not None else (path, line)


def key_of(uri: str) -> str | None:
    """The state's key of document `uri`: a file's path, a notebook cell's URI (None: neither)."""
    if uri.startswith("vscode-notebook-cell:"):
        return uri
    return to_fs_path(uri)


def uri_of(key: str) -> str:
    """The URI of the document with state key `key` (a cell's, exactly as the client gave it)."""
    return key if _URI.match(key) else pathlib.Path(key).as_uri()


def read(workspace: Workspace, uri: str) -> Text:
    """The text of the document `uri` (a notebook cell: its notebook's program); `RequestError` if it is
    not a UTF-8 file on disk."""
    from onnxlens_server import notebooks

    if (notebook := notebooks.of_cell(workspace, uri)) is not None:
        return Text(notebook.path, notebook.program.source, notebook.version, notebook)
    path = to_fs_path(uri)
    if path is None:
        raise RequestError(ErrorCode.NOT_ON_DISK, f"{uri} is not a file on disk: save it first, then export.")
    document = workspace.text_documents.get(uri)
    if document is not None:
        return Text(path, document.source, document.version)
    if not os.path.isfile(path):
        raise RequestError(ErrorCode.NO_SUCH_FILE, f"No such file: {path}")
    try:
        return Text(path, pathlib.Path(path).read_text(encoding="utf-8"), None)
    except UnicodeDecodeError as e:
        raise RequestError(
            ErrorCode.UNREADABLE_FILE,
            f"{path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}): save it as UTF-8",
        ) from None
    except OSError as e:
        raise RequestError(ErrorCode.UNREADABLE_FILE, f"Cannot read {path}: {e.strerror}") from None


def open_versions(workspace: Workspace) -> dict[str, int]:
    """The version of each open document, by key (`key_of`)."""
    return {
        key: document.version
        for document in workspace.text_documents.values()
        if document.version is not None and (key := key_of(document.uri))
    }


def line_text(workspace: Workspace, key: str, line: int) -> str | None:
    """The text of a 0-based line of the document `key` (a path or a cell's URI; None past its end)."""
    document = workspace.text_documents.get(unquote(uri_of(key)))
    if document is None and _URI.match(key):  # a cell no longer open
        return None
    lines = document.lines if document is not None else _file_lines(key)
    return lines[line] if 0 <= line < len(lines) else None


def _file_lines(path: str) -> list[str]:
    try:
        return pathlib.Path(path).read_text(encoding="utf-8").splitlines(keepends=True)
    except (OSError, UnicodeDecodeError):
        return []
