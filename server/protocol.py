"""What the server and the VS Code extension say to each other: command ids, their typed arguments,
custom notifications and error codes. ``vscode-extension/src/protocol.ts`` spells the same names
(a test checks that the two agree).

Commands (``workspace/executeCommand``), each taking one JSON object, checked by `parse_arguments`:

- `EXPORT` `ExportArgs` → ``{jobs: [job, ...]}`` (a job as in `EXPORT_FINISHED`)
- `LIST_TARGETS` `DocumentArgs` → ``{targets: [{name, line}], modules: [{name, line}]}``
- `CANCEL` `CancelArgs` → ``{cancelled: bool}``
- `GRAPH` `TargetArgs` → the target's last exported model as a graph (`onnxlens_server.graph`)
- `GRAPH_FILE` `DocumentArgs` → any ``.onnx`` file as a graph (with the SARIF log of the same stem beside it, if any)
- `COMPARE_GRAPHS` `CompareArgs` → two models compared (`onnxlens_server.graph_diff`): two files, or a target's
  previous and last exports
- `TENSOR` `TensorArgs` → an initializer's type, size and first values (only those bytes read)
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

EXPORT = "onnxlens.server.export"
LIST_TARGETS = "onnxlens.server.listTargets"
CANCEL = "onnxlens.server.cancel"
GRAPH = "onnxlens.server.graph"
GRAPH_FILE = "onnxlens.server.graphFile"
COMPARE_GRAPHS = "onnxlens.server.compareGraphs"
TENSOR = "onnxlens.server.tensor"
# Client commands (the extension implements them), used by code lenses:
OPEN_SARIF_LOG = "onnxlens.openSarifLog"  # [sarif path]
EXPORT_TARGET = (
    "onnxlens.exportTarget"  # [ExportArgs]: exports as EXPORT does, and shows the result as every export does
)
EXPORT_AFTER_FIX = "onnxlens.exportAfterFix"  # [ExportArgs]: a quick fix's: saves its file, then EXPORT_TARGET

EXPORT_PROGRESS = "onnxlens/exportProgress"  # {jobId, target, stage, detail, message}
# {jobId, uri, target, status, outcome, message, stage, onnx, sarif, summary, seconds, results}; outcome: the
# exporter's one rule (`exporter.outcome.Outcome.to_json`: kind, headline, severity, fixedDims), never parsed from text
EXPORT_FINISHED = "onnxlens/exportFinished"

CONFIGURATION_SECTION = "onnxlens"
# Added by the extension to the configuration it answers: "user" when the user's own settings chose
# onnxlens.outputFolder (then it may lead outside the workspace), else "workspace" or "default".
OUTPUT_FOLDER_SCOPE = "outputFolderScope"


class ErrorCode(enum.IntEnum):
    """JSON-RPC error codes of refused requests: JSON-RPC's InvalidParams for a wrong argument or setting,
    application codes (outside JSON-RPC's and LSP's ranges) for the rest."""

    INVALID_OPTIONS = JsonRpcInvalidParams.CODE  # -32602: a command argument, export option or setting is wrong
    NOT_ON_DISK = 1001  # an unsaved (untitled) document
    NO_SUCH_FILE = 1002
    NO_EXPORT_TARGET = 1003  # the file has no @exporter.export_target function (the extension offers one)
    UNKNOWN_TARGET = 1004
    UNREADABLE_FILE = 1006  # not UTF-8 text, or not readable
    SYNTAX_ERROR = 1007  # the model file does not parse (the message says file:line)
    OUTSIDE_WORKSPACE = 1008  # the model file, or the output folder, is outside the workspace folders
    NOT_EXPORTED = 1009  # the target has not been exported in this session
    UNREADABLE_MODEL = 1010  # the exported .onnx file is gone or is not a readable ONNX model
    NO_MODEL = 1011  # the target's last export wrote no model (it failed before); data: {sarif} (its log, or null)
    NO_PREVIOUS = 1012  # the target has no previous export to compare with (exported once in this folder)


class RequestError(JsonRpcException):
    """A refused request, answered with its `ErrorCode` (and `data`, if the code's comment names some)."""

    def __init__(self, code: ErrorCode, message: str, data: Any = None) -> None:
        super().__init__(message, code=int(code), data=data)


_JSON_TYPES = {str: "a string", int: "an integer", bool: "a boolean", dict: "an object", type(None): "null"}


def _json(*kinds: type) -> Callable[[Any, attrs.Attribute, Any], None]:
    """An attrs validator: the argument is a JSON value of one of `kinds` (``true`` is not an integer, nor is 1.5)."""

    def check(_: Any, attribute: attrs.Attribute, value: Any) -> None:
        if type(value) not in kinds:
            expected = " or ".join(_JSON_TYPES[kind] for kind in kinds)
            raise ValueError(f"argument {attribute.alias!r} must be {expected}, got {json.dumps(value)[:80]}")

    return check


def _not_negative(_: Any, attribute: attrs.Attribute, value: int) -> None:
    if value < 0:
        raise ValueError(f"argument {attribute.alias!r} must be 0 or more, got {value}")


@attrs.define
class DocumentArgs:
    uri: str = attrs.field(validator=_json(str))


@attrs.define
class ExportArgs:
    """Which targets of `uri` to export: `target` by name, all of them, or the one at `line` (0-based)."""

    uri: str = attrs.field(validator=_json(str))
    target: str | None = attrs.field(default=None, validator=_json(str, type(None)))
    line: int = attrs.field(default=0, validator=[_json(int), _not_negative])
    all: bool = attrs.field(default=False, validator=_json(bool))
    options: dict[str, Any] = attrs.field(
        factory=dict, validator=_json(dict)
    )  # per-request overrides of the onnxlens settings
    job_id: str | None = attrs.field(default=None, alias="jobId", validator=_json(str, type(None)))


@attrs.define
class TargetArgs:
    uri: str = attrs.field(validator=_json(str))
    target: str = attrs.field(validator=_json(str))


@attrs.define
class CompareArgs:
    """Two models (`before`, `after`: file URIs), or target `target` of `uri`'s previous and last exports."""

    before: str | None = attrs.field(default=None, validator=_json(str, type(None)))
    after: str | None = attrs.field(default=None, validator=_json(str, type(None)))
    uri: str | None = attrs.field(default=None, validator=_json(str, type(None)))
    target: str | None = attrs.field(default=None, validator=_json(str, type(None)))

    def __attrs_post_init__(self) -> None:
        if not ((self.before and self.after) or (self.uri and self.target)):
            raise ValueError("expects 'before' and 'after' (two models), or 'uri' and 'target' (its last two exports)")


@attrs.define
class TensorArgs:
    uri: str = attrs.field(validator=_json(str))  # the model's
    name: str = attrs.field(validator=_json(str))


@attrs.define
class CancelArgs:
    job_id: str = attrs.field(alias="jobId", validator=_json(str))


Args = TypeVar("Args")


def parse_arguments(command: str, cls: type[Args], arguments: Sequence[Any]) -> Args:
    """`command`'s arguments (one JSON object) as `cls`, every field checked: a wrong one is
    `JsonRpcInvalidParams` with one line saying which and what it should be."""
    fields = attrs.fields(cls)
    known = ", ".join(f.alias for f in fields)
    try:
        if len(arguments) != 1 or not isinstance(arguments[0], dict):
            raise ValueError(f"expects one argument, an object with {known}")
        (given,) = arguments
        if missing := [f.alias for f in fields if f.default is attrs.NOTHING and f.alias not in given]:
            raise ValueError(f"missing argument {missing[0]!r}")
        if unknown := sorted(set(given) - {f.alias for f in fields}):
            raise ValueError(f"unknown argument {unknown[0]!r} (known: {known})")
        return cls(**given)
    except ValueError as e:
        raise JsonRpcInvalidParams(f"{command}: {e}") from None
