"""The server's commands: export targets (in worker processes, with progress), list them, cancel an export,
give a target's last exported model as a graph (read in a thread: `graph`).

An export's result replaces its target's problems and traces (`state`), which are published at once,
with the version of each document when the export started. Its SARIF log is parsed once, when the
result arrives (`sarif_log`). Source text is parsed off the event loop only: a file's targets once
per text, and the quick fixes' analyses, in the parser process (`targets.Discoveries`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import pathlib
import shutil
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from exporter import outcome
from exporter.constants import Prop, Stage, progress_text
from exporter.diagnostics import rules
from onnxlens_server import documents, notebooks, outputs, sarif_log, sarif_to_lsp, shape_fixes
from onnxlens_server.protocol import (
    EXPORT_FINISHED,
    EXPORT_PROGRESS,
    CancelArgs,
    CompareArgs,
    DocumentArgs,
    ErrorCode,
    ExportArgs,
    RequestError,
    TargetArgs,
    TensorArgs,
)
from onnxlens_server.request import ExportRequest, target_key
from onnxlens_server.settings import export_settings, read_configuration
from onnxlens_server.state import States, TargetState
from onnxlens_server.targets import Discoveries, Discovery, SyntaxProblem, Target, target_at
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
        text, found = await self.discover(args.uri)
        path, source = text.path, text.source
        versions = {**documents.open_versions(self.ls.workspace), path: text.version}  # the problems' versions
        if found.syntax_error:
            self._show_syntax_error(text, found.syntax_error)
            raise RequestError(
                ErrorCode.SYNTAX_ERROR,
                f"{os.path.basename(path)}:{found.syntax_error.line + 1}: SyntaxError: {found.syntax_error.message}",
            )
        if text.notebook is not None:  # the line of the cell: the program's
            args = attrs.evolve(args, line=text.notebook.program_line(args.uri, args.line) or 0)
        chosen_targets = _select_targets(args, found, path)
        root = outputs.workspace_folder(path, self._workspace_folders())
        configuration = await read_configuration(self.ls, args.uri)
        chosen = export_settings(configuration, args.options)
        job_id = args.job_id or uuid.uuid4().hex
        requests = [
            ExportRequest(
                job_id=job_id if len(chosen_targets) == 1 else f"{job_id}-{target.name}",
                path=path,
                target=target.name,
                settings=chosen.settings,
                overrides=chosen.overrides,
                output_stem=outputs.output_stem(
                    path, target.name, root, chosen.output_folder, chosen.output_folder_chosen_by_user
                ),
                cwd=root,
                memory_limit_mb=chosen.memory_limit_mb,
                source=source,
            )
            for target in chosen_targets
        ]
        jobs = await asyncio.gather(
            *(
                self._run(request, chosen.timeout, target, versions, text)
                for request, target in zip(requests, chosen_targets)
            )
        )
        return {"jobs": list(jobs)}

    async def list_targets(self, args: DocumentArgs) -> dict[str, Any]:
        _, found = await self.discover(args.uri)
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
        state = self._exported(args)
        graph = await self._read_model(_graph_json, state.onnx, state.log)
        if state.notebook is not None:  # a notebook's lines: its cells'
            graph = notebooks.locate_graph(graph, state.notebook)
        return {**graph, "outcome": state.outcome}

    async def graph_file(self, args: DocumentArgs) -> dict[str, Any]:
        """Any .onnx file as a graph, with the SARIF log of its stem beside it (an onnxlens export's), if any."""
        path = to_fs_path(args.uri) or args.uri
        sarif = os.path.splitext(path)[0] + ".sarif"
        log = await asyncio.to_thread(sarif_log.read, sarif) if os.path.isfile(sarif) else None
        return {**await self._read_model(_graph_json, path, log), "outcome": None}

    async def compare_graphs(self, args: CompareArgs) -> dict[str, Any]:
        """Two models compared: two files, or the target's previous export (kept by `_run`) and its last."""
        if args.before and args.after:
            before, after = to_fs_path(args.before) or args.before, to_fs_path(args.after) or args.after
        else:
            after = self._exported(TargetArgs(uri=args.uri, target=args.target)).onnx
            before = _graph_diff().previous_path(after)
            if not os.path.isfile(before):
                message = f"{args.target} has no previous export to compare with: export it again after a change."
                raise RequestError(ErrorCode.NO_PREVIOUS, message)
        return await self._read_model(_compare_json, before, after)

    async def tensor(self, args: TensorArgs) -> dict[str, Any]:
        """An initializer's size and first values (only those bytes read)."""
        try:
            return await self._read_model(_tensor_json, to_fs_path(args.uri) or args.uri, args.name)
        except KeyError as e:
            raise RequestError(ErrorCode.INVALID_OPTIONS, str(e.args[0])) from None

    def _exported(self, args: TargetArgs) -> TargetState:
        """The state of the target's last export, which wrote a model (else the request's error)."""
        notebook = notebooks.of_cell(self.ls.workspace, args.uri)  # a cell's target: its notebook's
        path = notebook.path if notebook is not None else (to_fs_path(args.uri) or args.uri)
        state = self.states.get(target_key(path, args.target))
        name = f"{args.target} ({os.path.basename(path)})"
        if state is None:
            message = f"{name} has not been exported in this session: export it first."
            raise RequestError(ErrorCode.NOT_EXPORTED, message)
        if state.onnx is None:
            log = f"only its SARIF log {os.path.basename(state.sarif)}" if state.sarif else "not even a SARIF log"
            raise RequestError(
                ErrorCode.NO_MODEL,
                f"The last export of {name} failed before writing a model: there is no model to show, {log}. "
                "Its problems say what stopped it.",
                {"sarif": state.sarif},
            )
        return state

    async def _read_model(self, read: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
        """`read(*args)` in a thread; an unreadable model is the request's error."""
        try:
            return await asyncio.to_thread(read, *args)
        except (OSError, ValueError) as e:
            raise RequestError(ErrorCode.UNREADABLE_MODEL, f"The model cannot be read: {e}.") from None

    async def discover(self, uri: str) -> tuple[documents.Text, Discovery]:
        """The text and discovery of document `uri` (off the event loop: `Discoveries`). The syntax
        error an export showed goes once the file parses. A file that imports torch or has export
        targets starts the export fork server (it warms up in the background: exports wait for it,
        nothing else does); a workspace without models never loads torch."""
        text = documents.read(self.ls.workspace, uri)
        found = await self.discoveries.get(text.notebook.uri if text.notebook else uri, text.source)
        if found.imports_torch or found.targets:
            self.pool.warm()
        if found.syntax_error is None:
            self._show_syntax_error(text, None)
        return text, found

    def _workspace_folders(self) -> list[str]:
        workspace = self.ls.workspace
        uris = [folder.uri for folder in workspace.folders.values()] or [workspace.root_uri or ""]
        return [path for uri in uris if (path := to_fs_path(uri))]

    def publish(self, key: str, version: int | None) -> None:
        """Send the problems of every target in document `key` (a path, a cell's URI) to the client, as of the
        document's `version`."""
        diagnostics = self.states.diagnostics(key)
        uri = documents.uri_of(key)
        self.ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri, diagnostics, version))

    async def _run(
        self,
        request: ExportRequest,
        timeout: float,
        target: Target,
        versions: dict[str, int | None],
        text: documents.Text,
    ) -> dict[str, Any]:
        """Export `request` (its `target` as discovered in `text` when the export started), apply and announce
        its result."""
        logger.info(
            "Export of %s (job %s) with %s, overrides %s",
            request.target,
            request.job_id,
            request.settings,
            request.overrides,
        )
        progress = self.ls.work_done_progress
        token = str(uuid.uuid4())
        capabilities = self.ls.client_capabilities
        if capabilities and capabilities.window and capabilities.window.work_done_progress:
            await progress.create_async(token)
            progress.tokens[token].add_done_callback(lambda f: f.cancelled() and self.pool.cancel(request.job_id))
            progress.begin(
                token, types.WorkDoneProgressBegin(title=f"Exporting {request.target}", cancellable=True, percentage=0)
            )

        def report(stage: str, info: dict[str, Any]) -> None:
            message = progress_text(stage, info)
            self.ls.protocol.notify(
                EXPORT_PROGRESS, {"jobId": request.job_id, "target": request.target, "stage": stage, "message": message}
            )
            if token in progress.tokens:
                progress.report(token, types.WorkDoneProgressReport(message=message, percentage=_percent(stage)))

        await asyncio.to_thread(_keep_previous, getattr(self.states.get(request.key), "onnx", None))
        result = await self.pool.export(request, report, timeout)
        if token in progress.tokens:
            progress.end(token, types.WorkDoneProgressEnd(message=f"{request.target}: {result.status}"))
            progress.tokens.pop(token, None)
        logger.info(
            "Export of %s (job %s): %s in %.1f s %s",
            request.target,
            request.job_id,
            result.status,
            result.seconds,
            result.message,
        )
        state = await self._apply(result, target, versions, text)
        job = _job_json(result, state)
        self.ls.protocol.notify(EXPORT_FINISHED, job)
        if result.data.get("onnx") and "onnxlens_server.graph" not in sys.modules:  # Show Graph is next
            asyncio.ensure_future(asyncio.to_thread(importlib.import_module, "onnxlens_server.graph"))
        return job

    async def _apply(
        self, result: JobResult, target: Target, versions: dict[str, int | None], text: documents.Text
    ) -> TargetState:
        """Replace the target's problems and traces with this export's (its SARIF log parsed here, once;
        a notebook's lines moved to its cells: `text.locate`), and publish them."""
        request = result.request
        state = TargetState(sarif=result.data.get("sarif"), onnx=result.data.get("onnx"), outcome=_outcome(result))
        state.log = await asyncio.to_thread(sarif_log.read, state.sarif) if state.sarif else None
        if state.log is not None and text.notebook is not None:
            state.log, state.notebook = notebooks.locate_log(state.log, text.notebook), text.notebook
        line_text = self._line_text
        if state.log is not None:
            data = {"target": request.target, "targetUri": documents.uri_of(text.locate(request.path, target.line)[0])}
            places = await fixed_dimension_places(state.log, request, target, self.discoveries.run)
            places = {key: text.locate(*where) for key, where in places.items()}
            state.diagnostics = sarif_to_lsp.diagnostics_by_path(
                state.log, line_text, lambda result: places.get(id(result)), data
            )
            state.traces = state.log.traces
        if result.status != "ok" and not any(
            d.severity == types.DiagnosticSeverity.Error for ds in state.diagnostics.values() for d in ds
        ):
            path, line = text.locate(*_failure_location(result, target))
            failure = sarif_to_lsp.failure(
                f"Export of {request.target} {result.status}: {result.message}",
                f"export-{result.status}",
                line,
                line_text(path, line),
            )
            state.diagnostics.setdefault(path, []).append(failure)
        target_document = text.locate(request.path, target.line)[0]  # the target's file (cell) always
        for path in self.states.replace(request.key, state) | {target_document}:
            self.publish(path, versions.get(path))
        workspace = getattr(self.ls.client_capabilities, "workspace", None)
        if getattr(getattr(workspace, "inlay_hint", None), "refresh_support", False):
            self.ls.workspace_inlay_hint_refresh(None)
        if getattr(getattr(workspace, "code_lens", None), "refresh_support", False):
            self.ls.workspace_code_lens_refresh(None)
        return state

    def _show_syntax_error(self, text: documents.Text, error: SyntaxProblem | None) -> None:
        """Publish `error` as the file's problem (None: remove the one published, if any) of `text`."""
        key = target_key(text.path, "")  # the file's own problems (no target has an empty name)
        if error is None and not getattr(self.states.get(key), "diagnostics", None):
            return
        path, line = text.locate(text.path, error.line) if error else (text.path, 0)
        problems = (
            [sarif_to_lsp.failure(f"SyntaxError: {error.message}", "syntax-error", line, self._line_text(path, line))]
            if error
            else []
        )
        versions = documents.open_versions(self.ls.workspace)
        for changed in self.states.replace(key, TargetState(diagnostics={path: problems} if problems else {})):
            self.publish(changed, versions.get(changed, text.version))

    def _line_text(self, path: str, line: int) -> str | None:
        return documents.line_text(self.ls.workspace, path, line)


def _graph_json(onnx_path: str, log: sarif_log.SarifLog | None) -> dict[str, Any]:
    # onnx_ir takes most of a second: imported in a thread after the first export that wrote a model
    from onnxlens_server import graph

    return graph.graph_json(onnx_path, log)


def _compare_json(before: str, after: str) -> dict[str, Any]:
    from onnxlens_server import graph

    return _graph_diff().compare(graph.graph_json(before, None), graph.graph_json(after, None))


def _tensor_json(onnx_path: str, name: str) -> dict[str, Any]:
    from onnxlens_server import graph

    return graph.tensor_json(onnx_path, name)


def _graph_diff() -> Any:
    from onnxlens_server import graph_diff

    return graph_diff


def _keep_previous(onnx_path: str | None) -> None:
    """The model an export is about to replace, kept as `graph_diff.previous_path` for Compare with Previous:
    a hard link (an export replaces its file by a new one, never writes into it), a copy where links fail.
    Made under a unique name and renamed into place, so two requests for one target never race."""
    if onnx_path and os.path.isfile(onnx_path):
        previous = _graph_diff().previous_path(onnx_path)
        staged = f"{previous}.{uuid.uuid4().hex}"
        try:
            os.link(onnx_path, staged)
        except OSError:
            shutil.copyfile(onnx_path, staged)
        os.replace(staged, previous)
        with contextlib.suppress(FileNotFoundError):
            os.remove(staged)  # rename does nothing when both names are links to one file


def _select_targets(args: ExportArgs, found: Discovery, path: str) -> list[Target]:
    names = [t.name for t in found.targets]
    if not names:
        raise RequestError(
            ErrorCode.NO_EXPORT_TARGET,
            f"{os.path.basename(path)} has no function decorated with @exporter.export_target (a quick fix on an nn.Module class creates one).",
        )
    if args.all:
        return list(found.targets)
    if args.target is not None:
        if args.target not in names:
            raise RequestError(
                ErrorCode.UNKNOWN_TARGET,
                f"{os.path.basename(path)} has no export target {args.target!r}; targets: {', '.join(names)}",
            )
        return [next(t for t in found.targets if t.name == args.target)]
    return [target_at(found.targets, args.line)]


async def fixed_dimension_places(
    log: sarif_log.SarifLog, request: ExportRequest, target: Target, run: Callable[..., Awaitable[Any]]
) -> dict[int, tuple[str, int]]:
    """Where each input dimension the export fixed without a source line (FXE0020) goes, by the result's
    id(): the example's literal size in the target (found by `run`, in the parser process), else the
    target's line as discovered."""
    places = {}
    for result in log.results:
        properties = result.properties
        if result.rule_id != rules.DIMENSION_SPECIALIZED.id or result.location is not None:
            continue
        if Prop.INPUT not in properties:
            continue
        where = None
        if all(key in properties for key in (Prop.ARGUMENT, Prop.DIM, Prop.SIZE)):
            where = await run(
                shape_fixes.example_size_range,
                request.source or "",
                request.target,
                properties[Prop.ARGUMENT],
                properties[Prop.DIM],
                properties[Prop.SIZE],
            )
        places[id(result)] = (request.path, where.start.line if where is not None else target.line)
    return places


def _failure_location(result: JobResult, target: Target) -> tuple[str, int]:
    """Where a failure without a located SARIF result (crash, timeout, bad target) goes: the user frame
    it was raised from, else the target's line."""
    frames = result.data.get("frames") or []
    if frames:
        return frames[0]["path"], frames[0]["line"] - 1
    return result.request.path, target.line


def _percent(stage: str) -> int:
    """Work done so far at the start of `stage`: the stages share 5–95 %, in order."""
    try:
        index = _STAGES.index(Stage(stage))
    except ValueError:
        index = len(_STAGES) // 2
    return 5 + 90 * index // (len(_STAGES) - 1)


def _outcome(result: JobResult) -> dict[str, Any]:
    """The export's outcome (`exporter.outcome`, as JSON): the export process's, or, for one that sent
    none (it crashed, timed out or was cancelled), a failure with its message."""
    return result.data.get("outcome") or outcome.failed(result.message, result.request.target).to_json()


def _job_json(result: JobResult, state: TargetState) -> dict[str, Any]:
    """The job as the extension sees it: its outcome, and the results of its SARIF log (for the results view)."""
    log = state.log
    return {
        "jobId": result.request.job_id,
        "uri": pathlib.Path(result.request.path).as_uri(),
        "target": result.request.target,
        "status": result.status,
        "outcome": state.outcome,
        "message": result.message,
        "stage": result.stage,
        "onnx": result.data.get("onnx"),
        "sarif": result.data.get("sarif"),
        "summary": result.data.get("summary") or None,  # a failed export's (even with a model kept) has none
        "seconds": round(result.seconds, 3),
        "results": sarif_log.results_json(log) if log is not None else [],
    }
