"""Where an export's files go: ``<output folder>/<the model file's path in its workspace folder>.<target>``
plus ``.onnx`` / ``.sarif`` — unique per (file, target), so ``a/model.py`` and ``b/model.py`` never
share an output.

The output folder (setting ``onnxlens.outputFolder``) is relative to the model file's workspace
folder. Unless the user chose it in their own (user) settings, it must stay inside that folder
after following symlinks: a repository's settings or a symlink committed in it cannot make an
export write elsewhere. Files outside every workspace folder are not exported.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from onnxlens_server.protocol import ErrorCode, RequestError


def workspace_folder(path: str, folders: Iterable[str]) -> str:
    """The innermost workspace folder holding `path`; `RequestError` if none does."""
    holding = [folder for folder in folders if _inside(path, folder)]
    if not holding:
        raise RequestError(
            ErrorCode.OUTSIDE_WORKSPACE,
            f"{path} is outside the workspace folders; open its folder (File > Open Folder) to export it.",
        )
    return max(holding, key=len)


def output_stem(path: str, target: str, root: str, output_folder: str, chosen_by_user: bool) -> str:
    """The output files' path without suffix for `target` of `path` (in workspace folder `root`)."""
    folder = os.path.expanduser(output_folder)
    relative = os.path.splitext(os.path.relpath(path, root))[0]
    stem = os.path.normpath(os.path.join(root, folder, f"{relative}.{target}"))
    if not chosen_by_user and not _inside(os.path.realpath(os.path.dirname(stem)), os.path.realpath(root)):
        raise RequestError(
            ErrorCode.OUTSIDE_WORKSPACE,
            f"The output folder {output_folder!r} leads outside the workspace folder {root} (to {os.path.realpath(os.path.dirname(stem))}); "
            "onnxlens writes only inside the workspace unless onnxlens.outputFolder is set in your user settings.",
        )
    return stem


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), os.path.abspath(folder)]) == os.path.abspath(folder)
