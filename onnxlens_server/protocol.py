"""What the server and the VS Code extension say to each other: command ids, their typed arguments,
custom notifications and error codes. ``vscode-extension/src/protocol.ts`` spells the same names
(a test checks that the two agree).

Commands (``workspace/executeCommand``), each taking one JSON object:

- `EXPORT` `ExportArgs` → ``{jobs: [job, ...]}`` (a job as in `EXPORT_FINISHED`)
- `LIST_TARGETS` `DocumentArgs` → ``{targets: [{name, line}], modules: [{name, line}]}``
- `CANCEL` `CancelArgs` → ``{cancelled: bool}``
"""

from __future__ import annotations

import enum
from typing import Any

import attrs
from pygls.exceptions import JsonRpcException

EXPORT = "onnxlens.server.export"
LIST_TARGETS = "onnxlens.server.listTargets"
CANCEL = "onnxlens.server.cancel"
OPEN_SARIF_LOG = "onnxlens.openSarifLog"  # a client command (the extension implements it), used by code lenses

EXPORT_PROGRESS = "onnxlens/exportProgress"  # {jobId, target, stage, detail, message}
EXPORT_FINISHED = "onnxlens/exportFinished"  # {jobId, uri, target, status, message, stage, onnx, sarif, summary, seconds}

CONFIGURATION_SECTION = "onnxlens"
# Added by the extension to the configuration it answers: "user" when the user's own settings chose
# onnxlens.outputFolder (then it may lead outside the workspace), else "workspace" or "default".
OUTPUT_FOLDER_SCOPE = "outputFolderScope"


class ErrorCode(enum.IntEnum):
    """JSON-RPC error codes of refused requests (application codes: outside JSON-RPC's and LSP's ranges)."""

    NOT_ON_DISK = 1001  # an unsaved (untitled) document
    NO_SUCH_FILE = 1002
    NO_EXPORT_TARGET = 1003  # the file has no @exporter.export_target function (the extension offers one)
    UNKNOWN_TARGET = 1004
    INVALID_OPTIONS = 1005
    OUTSIDE_WORKSPACE = 1006  # the model file, or the output folder, is outside the workspace folders


class RequestError(JsonRpcException):
    """A refused request, answered with its `ErrorCode`."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message, code=int(code))


@attrs.define
class DocumentArgs:
    uri: str


@attrs.define
class ExportArgs:
    """Which targets of `uri` to export: `target` by name, all of them, or the one at `line` (0-based)."""

    uri: str
    target: str | None = None
    line: int = 0
    all: bool = False
    options: dict[str, Any] = attrs.field(factory=dict)  # per-request overrides of the onnxlens settings
    job_id: str | None = attrs.field(default=None, alias="jobId")


@attrs.define
class CancelArgs:
    job_id: str = attrs.field(alias="jobId")
