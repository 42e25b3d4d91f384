"""The server's commands: export targets (in worker processes, with progress), list them, cancel an export,
give a target's last exported model as a graph (read in a thread: `graph`).

An export's result replaces its target's problems and traces (`state`), which are published at once.
A file's targets are discovered off the event loop, once per text (`targets.Discoveries`).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import pathlib
import sys
import uuid
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from exporter.constants import Stage, progress_text
from onnxlens_server import documents, outputs, sarif_to_lsp, shape_fixes, traces
from onnxlens_server.job import ExportRequest, target_key
from onnxlens_server.protocol import (
    EXPORT_FINISHED,
    EXPORT_PROGRESS,
    CancelArgs,
    DocumentArgs,
    ErrorCode,
    ExportArgs,
    RequestError,
    TargetArgs,
)
from onnxlens_server.settings import export_settings, read_configuration
from onnxlens_server.state import States, TargetState
from onnxlens_server.targets import Discoveries, Discovery, SyntaxProblem, discover, target_at
from onnxlens_server.worker import JobResult, WorkerPool

logger = logging.getLogger(__name__)
_STAGES = list(Stage)


class Commands:
    def __init__(self, ls: LanguageServer, states: States, pool: WorkerPool) -> None:
        self.ls = ls
        self.states = states
        self.pool = pool
        self.discoveries = Discoveries()

    async def export(self, args: ExportArgs) -> dict[str, Any]:
        path, source, found = await self.discover(args.uri)
        if found.syntax_error:
            self._show_syntax_error(path, found.syntax_error)
            raise RequestError(ErrorCode.SYNTAX_ERROR, f"{os.path.basename(path)}:{found.syntax_error.line + 1}: SyntaxError: {found.syntax_error.message}")
        names = _select_targets(args, found, path)
        root = outputs.workspace_folder(path, self._workspace_folders())
        configuration = await read_configuration(self.ls, args.uri)
        chosen = export_settings(configuration, args.options)
        job_id = args.job_id or uuid.uuid4().hex
        requests = [
            ExportRequest(
                job_id=job_id if len(names) == 1 else f"{job_id}-{name}",
                path=path,
                target=name,
                settings=chosen.settings,
                overrides=chosen.overrides,
                output_stem=outputs.output_stem(path, name, root, chosen.output_folder, chosen.output_folder_chosen_by_user),
                cwd=root,
                memory_limit_mb=chosen.memory_limit_mb,
                source=source,
            )
            for name in names
        ]
        results = await asyncio.gather(*(self._run(request, chosen.timeout) for request in requests))
        return {"jobs": [_job_json(result) for result in results]}

    async def list_targets(self, args: DocumentArgs) -> dict[str, Any]:
        _, _, found = await self.discover(args.uri)
        return {
            "targets": [{"name": t.name, "line": t.line} for t in found.targets],
            "modules": [{"name": m.name, "line": m.line} for m in found.modules],
        }

    def cancel(self, args: CancelArgs) -> dict[str, Any]:
        cancelled = self.pool.cancel(args.job_id)
        logger.info("Cancel of %s: %s", args.job_id, "done" if cancelled else "no such job")
        return {"cancelled": cancelled}

    async def graph(self, args: TargetArgs) -> dict[str, Any]:
        """The model the target's last export wrote, as a graph with its SARIF log's numbers."""
        path = to_fs_path(args.uri) or args.uri
        state = self.states.get(target_key(path, args.target))
        if state is None or state.onnx is None:
            raise RequestError(
                ErrorCode.NOT_EXPORTED,
                f"{args.target} ({os.path.basename(path)}) has no exported model yet: export it first (a failed export leaves none).",
            )
        try:
            return await asyncio.to_thread(_graph_json, state.onnx, state.sarif)
        except (OSError, ValueError) as e:
            raise RequestError(ErrorCode.UNREADABLE_MODEL, f"The model of {args.target} cannot be read: {e}. Export it again.") from None

    async def discover(self, uri: str) -> tuple[str, str, Discovery]:
        """The path, text and discovery of document `uri` (off the event loop: `Discoveries`). The syntax
        error an export showed goes once the file parses. A file that imports torch or has export
        targets starts the export fork server (it warms up in the background: exports wait for it,
        nothing else does); a workspace without models never loads torch."""
        path, source = documents.read(self.ls.workspace, uri)
        found = await self.discoveries.get(uri, source)
        if found.imports_torch or found.targets:
            self.pool.warm()
        if found.syntax_error is None:
            self._show_syntax_error(path, None)
        return path, source, found

    def _workspace_folders(self) -> list[str]:
        workspace = self.ls.workspace
        uris = [folder.uri for folder in workspace.folders.values()] or [workspace.root_uri or ""]
        return [path for uri in uris if (path := to_fs_path(uri))]

    def publish(self, path: str) -> None:
        """Send the problems of every target in `path` to the client."""
        diagnostics = self.states.diagnostics(path)
        self.ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=pathlib.Path(path).as_uri(), diagnostics=diagnostics))

    async def _run(self, request: ExportRequest, timeout: float) -> JobResult:
        logger.info("Export of %s (job %s) with %s, overrides %s", request.target, request.job_id, request.settings, request.overrides)
        progress = self.ls.work_done_progress
        token = str(uuid.uuid4())
        capabilities = self.ls.client_capabilities
        if capabilities and capabilities.window and capabilities.window.work_done_progress:
            await progress.create_async(token)
            progress.tokens[token].add_done_callback(lambda f: f.cancelled() and self.pool.cancel(request.job_id))
            progress.begin(token, types.WorkDoneProgressBegin(title=f"Exporting {request.target}", cancellable=True, percentage=0))

        def report(stage: str, info: dict[str, Any]) -> None:
            message = progress_text(stage, info)
            self.ls.protocol.notify(EXPORT_PROGRESS, {"jobId": request.job_id, "target": request.target, "stage": stage, "message": message})
            if token in progress.tokens:
                progress.report(token, types.WorkDoneProgressReport(message=message, percentage=_percent(stage)))

        result = await self.pool.export(request, report, timeout)
        if token in progress.tokens:
            progress.end(token, types.WorkDoneProgressEnd(message=f"{request.target}: {result.status}"))
            progress.tokens.pop(token, None)
        logger.info("Export of %s (job %s): %s in %.1f s %s", request.target, request.job_id, result.status, result.seconds, result.message)
        self._apply(result)
        self.ls.protocol.notify(EXPORT_FINISHED, _job_json(result))
        if result.data.get("onnx") and "onnxlens_server.graph" not in sys.modules:  # Show Graph is next
            asyncio.ensure_future(asyncio.to_thread(importlib.import_module, "onnxlens_server.graph"))
        return result

    def _apply(self, result: JobResult) -> None:
        """Replace the target's problems and traces with this export's, and publish them."""
        request = result.request
        state = TargetState(sarif=result.data.get("sarif"), onnx=result.data.get("onnx"))
        log = _read_json(state.sarif) if state.sarif else None
        line_text = self._line_text
        if log is not None:
            data = {"target": request.target, "targetUri": pathlib.Path(request.path).as_uri()}
            state.diagnostics = sarif_to_lsp.diagnostics_by_path(log, line_text, lambda r: _place(r, request), data)
            state.traces = traces.line_traces(log)
        if result.status != "ok" and not any(d.severity == types.DiagnosticSeverity.Error for ds in state.diagnostics.values() for d in ds):
            path, line = _failure_location(result)
            failure = sarif_to_lsp.failure(f"Export of {request.target} {result.status}: {result.message}", f"export-{result.status}", line, line_text(path, line))
            state.diagnostics.setdefault(path, []).append(failure)
        for path in self.states.replace(request.key, state) | {request.path}:  # the target's file always
            self.publish(path)
        workspace = getattr(self.ls.client_capabilities, "workspace", None)
        if getattr(getattr(workspace, "inlay_hint", None), "refresh_support", False):
            self.ls.workspace_inlay_hint_refresh(None)
        if getattr(getattr(workspace, "code_lens", None), "refresh_support", False):
            self.ls.workspace_code_lens_refresh(None)

    def _show_syntax_error(self, path: str, error: SyntaxProblem | None) -> None:
        """Publish `error` as the file's problem (None: remove the one published, if any)."""
        key = target_key(path, "")  # the file's own problems (no target has an empty name)
        if error is None and not getattr(self.states.get(key), "diagnostics", None):
            return
        problems = [sarif_to_lsp.failure(f"SyntaxError: {error.message}", "syntax-error", error.line, self._line_text(path, error.line))] if error else []
        for changed in self.states.replace(key, TargetState(diagnostics={path: problems} if problems else {})):
            self.publish(changed)

    def _line_text(self, path: str, line: int) -> str | None:
        return documents.line_text(self.ls.workspace, path, line)


def _graph_json(onnx_path: str, sarif_path: str | None) -> dict[str, Any]:
    from onnxlens_server import graph  # onnx_ir takes most of a second: imported in a thread after the first export that wrote a model

    return graph.graph_json(onnx_path, sarif_path)


def _select_targets(args: ExportArgs, found: Discovery, path: str) -> list[str]:
    names = [t.name for t in found.targets]
    if not names:
        raise RequestError(
            ErrorCode.NO_EXPORT_TARGET,
            f"{os.path.basename(path)} has no function decorated with @exporter.export_target (a quick fix on an nn.Module class creates one).",
        )
    if args.all:
        return names
    if args.target is not None:
        if args.target not in names:
            raise RequestError(ErrorCode.UNKNOWN_TARGET, f"{os.path.basename(path)} has no export target {args.target!r}; targets: {', '.join(names)}")
        return [args.target]
    return [target_at(found.targets, args.line).name]


def _place(result: dict[str, Any], request: ExportRequest) -> tuple[str, int] | None:
    """Where an input dimension the export fixed without a source line (FXE0020) goes: the example's
    literal size in the target, else the target's line."""
    properties = result.get("properties", {})
    if result.get("ruleId") != sarif_to_lsp.DIMENSION_RULE or "input" not in properties:
        return None
    if "argument" in properties and "dim" in properties and "size" in properties:
        where = shape_fixes.example_size_range(request.source or "", request.target, properties["argument"], properties["dim"], properties["size"])
        if where is not None:
            return request.path, where.start.line
    return request.path, _target_line(request)


def _failure_location(result: JobResult) -> tuple[str, int]:
    """Where a failure without a located SARIF result (crash, timeout, bad target) goes: the user frame
    it was raised from, else the target's line."""
    frames = result.data.get("frames") or []
    if frames:
        return frames[0]["path"], frames[0]["line"] - 1
    return result.request.path, _target_line(result.request)


def _target_line(request: ExportRequest) -> int:
    """The 0-based line of the request's target in the text it exported."""
    return next((t.line for t in discover(request.source or "").targets if t.name == request.target), 0)


def _percent(stage: str) -> int:
    """Work done so far at the start of `stage`: the stages share 5–95 %, in order."""
    try:
        index = _STAGES.index(Stage(stage))
    except ValueError:
        index = len(_STAGES) // 2
    return 5 + 90 * index // (len(_STAGES) - 1)


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


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
