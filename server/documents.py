"""Documents as the server sees them: the editor's text when open, else the file on disk."""

from __future__ import annotations

import dataclasses
import os
import pathlib

from pygls.uris import to_fs_path
from pygls.workspace import Workspace

from onnxlens_server.protocol import ErrorCode, RequestError


@dataclasses.dataclass(frozen=True)
class Text:
    path: str
    source: str
    version: int | None  # the open document's version; None: the file on disk


def read(workspace: Workspace, uri: str) -> Text:
    """The text of the document `uri`; `RequestError` if it is not a UTF-8 file on disk."""
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
        raise RequestError(ErrorCode.UNREADABLE_FILE, f"{path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}): save it as UTF-8") from None
    except OSError as e:
        raise RequestError(ErrorCode.UNREADABLE_FILE, f"Cannot read {path}: {e.strerror}") from None


def open_versions(workspace: Workspace) -> dict[str, int]:
    """The version of each open document, by path."""
    return {
        path: document.version
        for uri, document in workspace.text_documents.items()
        if document.version is not None and (path := to_fs_path(uri))
    }


def line_text(workspace: Workspace, path: str, line: int) -> str | None:
    """The text of a 0-based line of `path` (None past its end)."""
    document = workspace.text_documents.get(pathlib.Path(path).as_uri())
    lines = document.lines if document is not None else _file_lines(path)
    return lines[line] if 0 <= line < len(lines) else None


def _file_lines(path: str) -> list[str]:
    try:
        return pathlib.Path(path).read_text(encoding="utf-8").splitlines(keepends=True)
    except (OSError, UnicodeDecodeError):
        return []
