"""The pygls wiring: LSP features and commands, delegating to targets, worker, sarif_to_lsp, traces, fixes.

Commands (``workspace/executeCommand``), each taking one JSON object:

- ``onnxlens.server.export`` ``{uri, target? | line? | all?, options?, jobId?}`` → ``{jobs: [...]}``
- ``onnxlens.server.listTargets`` ``{uri}`` → ``{targets: [{name, line}], modules: [...]}``
- ``onnxlens.server.cancel`` ``{jobId}`` → ``{cancelled}``

Notifications to the client: ``onnxlens/exportProgress`` (stage by stage) and
``onnxlens/exportFinished`` (one job's result), besides standard work-done progress.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pathlib
import re
import uuid
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from onnxlens_server import fixes, sarif_to_lsp, traces
from onnxlens_server.job import ExportRequest
from onnxlens_server.targets import Discovery, discover, target_at
from onnxlens_server.worker import JobResult, WorkerPool

VERSION = "0.1.0"
EXPORT, LIST_TARGETS, CANCEL = "onnxlens.server.export", "onnxlens.server.listTargets", "onnxlens.server.cancel"
EXPORT_FINISHED = "onnxlens/exportFinished"
EXPORT_PROGRESS = "onnxlens/exportProgress"  # {jobId, target, stage, detail}, for clients that show their own progress
OPEN_SARIF = "onnxlens.openSarifLog"  # a client command (the VS Code extension implements it)

# Editor settings (section "onnxlens") and request options → ExportOptions.from_settings keys.
_OPTION_KEYS = {
    "dynamicShapes": ("dynamic_shapes", bool),
    "opLevelDebug": ("op_level_debug", bool),
    "opset": ("opset_version", int),
    "verbosity": ("verbosity", str),
    "warningsAsErrors": ("warnings_as_errors", bool),
}
DEFAULT_TIMEOUT = 300.0


@dataclasses.dataclass
class TargetState:
    """What the last export of one target left: its problems and traces, by file."""

    diagnostics: dict[str, list[types.Diagnostic]] = dataclasses.field(default_factory=dict)
    traces: list[traces.LineTrace] = dataclasses.field(default_factory=list)
    sarif: str | None = None
    onnx: str | None = None


class OnnxlensServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("onnxlens", VERSION)
        self.pool = WorkerPool()
        self.states: dict[str, TargetState] = {}  # "path::target" -> state

    # -- documents and targets -------------------------------------------------------------

    def document(self, uri: str) -> tuple[str, str]:
        """(path, text) of a document: the editor's text when open, else the file on disk."""
        path = to_fs_path(uri)
        if path is None:
            raise JsonRpcInvalidParams(f"{uri} is not a file on disk: save it first, then export.")
        document = self.workspace.text_documents.get(uri)
        if document is not None:
            return path, document.source
        if not os.path.isfile(path):
            raise JsonRpcInvalidParams(f"No such file: {path}")
        return path, pathlib.Path(path).read_text(encoding="utf-8")

    def line_text(self, path: str, line: int) -> str | None:
        document = self.workspace.text_documents.get(pathlib.Path(path).as_uri())
        lines = document.lines if document is not None else _file_lines(path)
        return lines[line] if 0 <= line < len(lines) else None

    # -- exports ------------------------------------------------------------------------------

    async def export(self, args: dict[str, Any]) -> dict[str, Any]:
        uri = _required(args, "uri", str)
        path, source = self.document(uri)
        found = discover(source)
        names = self._select_targets(args, found, path)
        settings = await self._settings(uri)
        settings.update(_options(args.get("options") or {}))
        timeout = float(settings.pop("timeout", DEFAULT_TIMEOUT))
        output_dir = settings.pop("output_dir")
        job_id = args.get("jobId") or uuid.uuid4().hex
        requests = [
            ExportRequest(job_id if len(names) == 1 else f"{job_id}-{name}", path, name, settings, output_dir, source)
            for name in names
        ]
        results = await asyncio.gather(*(self._run(request, timeout) for request in requests))
        return {"jobs": [_job_json(result) for result in results]}

    async def _run(self, request: ExportRequest, timeout: float) -> JobResult:
        token = str(uuid.uuid4())
        progress = self.work_done_progress
        if _supports_progress(self.client_capabilities):
            await progress.create_async(token)
            progress.tokens[token].add_done_callback(lambda f: f.cancelled() and self.pool.cancel(request.job_id))
            progress.begin(token, types.WorkDoneProgressBegin(title=f"Exporting {request.target}", cancellable=True, percentage=0))

        def report(stage: str, info: dict[str, Any]) -> None:
            detail = f" {info['done']}/{info['total']} nodes" if "done" in info else ""
            self.protocol.notify(EXPORT_PROGRESS, {"jobId": request.job_id, "target": request.target, "stage": stage, "detail": detail})
            if token in progress.tokens:
                progress.report(token, types.WorkDoneProgressReport(message=f"{stage}{detail}", percentage=_STAGE_PERCENT.get(stage, 50)))

        result = await self.pool.export(request, report, timeout)
        if token in progress.tokens:
            progress.end(token, types.WorkDoneProgressEnd(message=f"{request.target}: {result.status}"))
            progress.tokens.pop(token, None)
        self._apply(result)
        self.protocol.notify(EXPORT_FINISHED, _job_json(result))
        return result

    def _apply(self, result: JobResult) -> None:
        """Replace the target's problems and traces with this export's, and publish them."""
        request = result.request
        key = f"{request.path}::{request.target}"
        old = self.states.get(key, TargetState())
        state = TargetState(sarif=result.data.get("sarif"), onnx=result.data.get("onnx"))
        log = _read_json(state.sarif) if state.sarif else None
        if log is not None:
            state.diagnostics = sarif_to_lsp.diagnostics_by_path(log, self.line_text)
            state.traces = traces.line_traces(log)
        if result.status != "ok" and not any(d.severity == types.DiagnosticSeverity.Error for ds in state.diagnostics.values() for d in ds):
            self._add_failure(state, result)
        self.states[key] = state
        for path in set(old.diagnostics) | set(state.diagnostics) | {request.path}:  # the target's file always
            self._publish(path)
        workspace = getattr(self.client_capabilities, "workspace", None)
        if getattr(getattr(workspace, "inlay_hint", None), "refresh_support", False):
            self.workspace_inlay_hint_refresh(None)
        if getattr(getattr(workspace, "code_lens", None), "refresh_support", False):
            self.workspace_code_lens_refresh(None)

    def _add_failure(self, state: TargetState, result: JobResult) -> None:
        """A failure without a located SARIF result (crash, timeout, bad target) goes on the target's line,
        or on the user frame it was raised from."""
        request = result.request
        frames = result.data.get("frames") or []
        path, line = (frames[0]["path"], frames[0]["line"] - 1) if frames else (request.path, self._target_line(request))
        state.diagnostics.setdefault(path, []).append(
            types.Diagnostic(
                range=sarif_to_lsp.to_range(line, self.line_text(path, line)),
                message=f"Export of {request.target} {result.status}: {result.message}",
                severity=types.DiagnosticSeverity.Error,
                source=sarif_to_lsp.SOURCE,
                code=f"export-{result.status}",
            )
        )

    def follow_edits(self, path: str, changes: list[tuple[int, int]]) -> bool:
        """Move this file's problems and traces with edits above them: `changes` are
        (last line replaced, lines added) of each edit, in order. True if anything moved."""

        def moved(line: int) -> int:
            for last, added in changes:
                if line > last:
                    line += added
            return line

        def move_range(r: types.Range) -> types.Range:
            return types.Range(types.Position(moved(r.start.line), r.start.character), types.Position(moved(r.end.line), r.end.character))

        changed = False
        for state in self.states.values():
            for diagnostic in state.diagnostics.get(path, []):
                if moved(diagnostic.range.start.line) != diagnostic.range.start.line:
                    diagnostic.range = move_range(diagnostic.range)
                    changed = True
            for diagnostics in state.diagnostics.values():
                for info in (i for d in diagnostics for i in d.related_information or [] if to_fs_path(i.location.uri) == path):
                    info.location.range = move_range(info.location.range)
            state.traces = [dataclasses.replace(t, line=moved(t.line)) if t.path == path else t for t in state.traces]
        return changed

    def _publish(self, path: str) -> None:
        diagnostics = [d for state in self.states.values() for d in state.diagnostics.get(path, [])]
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=pathlib.Path(path).as_uri(), diagnostics=diagnostics))

    def _target_line(self, request: ExportRequest) -> int:
        found = discover(request.source or "")
        return next((t.line for t in found.targets if t.name == request.target), 0)

    def _select_targets(self, args: dict[str, Any], found: Discovery, path: str) -> list[str]:
        names = [t.name for t in found.targets]
        if not names:
            raise JsonRpcInvalidParams(
                f"{os.path.basename(path)} has no function decorated with @exporter.export_target "
                "(a quick fix on an nn.Module class creates one)."
            )
        if args.get("all"):
            return names
        if "target" in args:
            if args["target"] not in names:
                raise JsonRpcInvalidParams(f"{os.path.basename(path)} has no export target {args['target']!r}; targets: {', '.join(names)}")
            return [args["target"]]
        line = args.get("line", 0)
        if not isinstance(line, int):
            raise JsonRpcInvalidParams("'line' must be a 0-based line number")
        return [target_at(found.targets, line).name]

    async def _settings(self, uri: str) -> dict[str, Any]:
        """Options from the client's ``onnxlens`` configuration (when it offers configuration)."""
        config: dict[str, Any] = {}
        workspace_config = getattr(getattr(self.client_capabilities, "workspace", None), "configuration", False)
        if workspace_config:
            try:
                (config,) = await asyncio.wait_for(
                    self.workspace_configuration_async(types.ConfigurationParams(items=[types.ConfigurationItem(scope_uri=uri, section="onnxlens")])),
                    timeout=5,
                )
            except (asyncio.TimeoutError, ValueError):
                config = {}
        config = config or {}
        settings = _options({k: v for k, v in config.items() if k in _OPTION_KEYS and v is not None})
        settings["timeout"] = config.get("timeoutSeconds") or DEFAULT_TIMEOUT
        settings["output_dir"] = self._output_dir(uri, config.get("outputFolder"))
        return settings

    def _output_dir(self, uri: str, configured: str | None) -> str:
        root = to_fs_path(self.workspace.root_uri) if self.workspace.root_uri else None
        root = root or os.path.dirname(to_fs_path(uri) or ".")
        folder = os.path.normpath(os.path.join(root, configured or "onnxlens-out"))
        return folder


server = OnnxlensServer()

_STAGE_PERCENT = {"load": 5, "build target": 10, "capture": 20, "passes": 40, "analysis": 45, "translation": 60,
                  "op-level debug": 75, "onnx passes": 85, "save": 95}


@server.command(EXPORT)
async def export_command(ls: OnnxlensServer, args: dict[str, Any]) -> dict[str, Any]:
    return await ls.export(_as_dict(args))


@server.command(LIST_TARGETS)
def list_targets_command(ls: OnnxlensServer, args: dict[str, Any]) -> dict[str, Any]:
    _, source = ls.document(_required(_as_dict(args), "uri", str))
    found = discover(source)
    return {
        "targets": [{"name": t.name, "line": t.line} for t in found.targets],
        "modules": [{"name": m.name, "line": m.line} for m in found.modules],
    }


@server.command(CANCEL)
def cancel_command(ls: OnnxlensServer, args: dict[str, Any]) -> dict[str, Any]:
    return {"cancelled": ls.pool.cancel(_required(_as_dict(args), "jobId", str))}


@server.feature(types.INITIALIZED)
async def initialized(ls: OnnxlensServer, params: types.InitializedParams) -> None:
    await asyncio.get_running_loop().run_in_executor(None, ls.pool.warm_up)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: OnnxlensServer, params: types.DidChangeTextDocumentParams) -> None:
    """Keep problems and inline traces on their lines while the file is edited (until the next export)."""
    path = to_fs_path(params.text_document.uri)
    changes = [
        (c.range.end.line, c.text.count("\n") - (c.range.end.line - c.range.start.line))
        for c in params.content_changes
        if isinstance(c, types.TextDocumentContentChangePartial)
    ]
    if path and changes and ls.follow_edits(path, changes):
        ls._publish(path)


@server.feature(types.TEXT_DOCUMENT_CODE_LENS)
def code_lens(ls: OnnxlensServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    path, source = ls.document(params.text_document.uri)
    lenses = []
    for target in discover(source).targets:
        at = types.Range(types.Position(target.decorator_line, 0), types.Position(target.decorator_line, 0))
        arguments = {"uri": params.text_document.uri, "target": target.name}
        lenses.append(types.CodeLens(at, types.Command(title="$(export) Export to ONNX", command=EXPORT, arguments=[arguments])))
        lenses.append(types.CodeLens(at, types.Command(
            title="Export with op-level debug", command=EXPORT, arguments=[{**arguments, "options": {"opLevelDebug": True}}])))
        state = ls.states.get(f"{path}::{target.name}")
        if state and state.sarif:
            lenses.append(types.CodeLens(at, types.Command(title="Open SARIF log", command=OPEN_SARIF, arguments=[state.sarif])))
    return lenses


@server.feature(types.TEXT_DOCUMENT_INLAY_HINT)
def inlay_hints(ls: OnnxlensServer, params: types.InlayHintParams) -> list[types.InlayHint]:
    path = to_fs_path(params.text_document.uri)
    hints = []
    for trace in _traces_in(ls, path):
        if params.range.start.line <= trace.line <= params.range.end.line and (text := ls.line_text(path, trace.line)) is not None:
            hints.append(traces.inlay_hint(trace, text))
    return hints


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: OnnxlensServer, params: types.HoverParams) -> types.Hover | None:
    path = to_fs_path(params.text_document.uri)
    found = [t for t in _traces_in(ls, path) if t.line == params.position.line]
    if not found:
        return None
    return types.Hover(types.MarkupContent(types.MarkupKind.Markdown, "\n\n".join(traces.hover_markdown(t) for t in found)))


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]))
def code_actions(ls: OnnxlensServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    actions = _code_actions(ls, params)
    if ls.protocol.trace != types.TraceValue.Off:  # the client asked for a trace (VS Code: the log level Trace)
        uri, line = params.text_document.uri, params.range.start.line
        trigger = params.context.trigger_kind.name.lower() if params.context.trigger_kind else "unknown"
        ls.log_trace(types.LogTraceParams(f"Code actions at {os.path.basename(to_fs_path(uri) or uri)}:{line + 1} ({trigger}): {len(actions)}"))
    return actions


def _code_actions(ls: OnnxlensServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    _, source = ls.document(uri)
    found = discover(source)
    end = len(source.splitlines())
    actions = []
    for diagnostic in params.context.diagnostics:
        schema = (diagnostic.data or {}).get("properties", {}).get("schema") if isinstance(diagnostic.data, dict) else None
        if diagnostic.code == "FXE0011" and schema:
            edits = fixes.register_stub(schema, found, end)
            if edits:
                actions.append(types.CodeAction(
                    title=f"Add an ONNX function stub for {schema.split('(')[0]} and register it",
                    kind=types.CodeActionKind.QuickFix, diagnostics=[diagnostic],
                    edit=types.WorkspaceEdit(changes={uri: edits}), is_preferred=True,
                ))
    line = params.range.start.line
    for module in found.modules:
        if module.line <= line <= module.end_line and not _has_target_for(source, found, module.name):
            actions.append(types.CodeAction(
                title=f"Create an export target for {module.name}",
                kind=types.CodeActionKind.QuickFix,
                edit=types.WorkspaceEdit(changes={uri: fixes.export_target_for(module, found)}),
            ))
    return actions


def _traces_in(ls: OnnxlensServer, path: str | None) -> list[traces.LineTrace]:
    return [t for state in ls.states.values() for t in state.traces if t.path == path]


def _has_target_for(source: str, found: Discovery, class_name: str) -> bool:
    lines = source.splitlines()
    pattern = re.compile(rf"\b{re.escape(class_name)}\s*\(")
    return any(pattern.search("\n".join(lines[t.line : t.end_line + 1])) for t in found.targets)


def _options(options: dict[str, Any]) -> dict[str, Any]:
    """Validate request/editor options and map them to ExportOptions.from_settings keys."""
    if not isinstance(options, dict):
        raise JsonRpcInvalidParams("'options' must be an object")
    settings = {}
    for key, value in options.items():
        if key not in _OPTION_KEYS:
            raise JsonRpcInvalidParams(f"Unknown export option {key!r}; known: {', '.join(_OPTION_KEYS)}")
        name, kind = _OPTION_KEYS[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise JsonRpcInvalidParams(f"Export option {key!r} must be a {kind.__name__}, got {value!r}")
        settings[name] = value
    if settings.get("verbosity", "info") not in ("debug", "info", "warning", "error"):
        raise JsonRpcInvalidParams("Export option 'verbosity' must be debug, info, warning or error")
    return settings


def _required(args: dict[str, Any], key: str, kind: type) -> Any:
    value = args.get(key)
    if not isinstance(value, kind):
        raise JsonRpcInvalidParams(f"Missing or invalid {key!r} argument")
    return value


def _as_dict(args: Any) -> dict[str, Any]:
    if isinstance(args, dict):
        return args
    if hasattr(args, "_asdict"):  # pygls hands unknown JSON objects over as named tuples
        return {k: _as_dict(v) if hasattr(v, "_asdict") else v for k, v in args._asdict().items()}
    raise JsonRpcInvalidParams("Expected one JSON object argument")


def _job_json(result: JobResult) -> dict[str, Any]:
    return {
        "jobId": result.request.job_id,
        "uri": pathlib.Path(result.request.path).as_uri(),
        "target": result.request.target,
        "status": result.status,
        "message": result.message,
        "stage": result.stage,
        "onnx": result.data.get("onnx"),
        "sarif": result.data.get("sarif"),
        "summary": result.data.get("summary"),
        "seconds": round(result.seconds, 3),
    }


def _supports_progress(capabilities: types.ClientCapabilities | None) -> bool:
    return bool(capabilities and capabilities.window and capabilities.window.work_done_progress)


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _file_lines(path: str) -> list[str]:
    try:
        return pathlib.Path(path).read_text(encoding="utf-8").splitlines(keepends=True)
    except (OSError, UnicodeDecodeError):
        return []
