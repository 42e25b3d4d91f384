"""One export, run inside a process forked by the fork server; it reports back over a socket.

Messages sent (tuples, `wire`): ``("started", pid)``, ``("progress", stage, info)`` while exporting,
then exactly one ``("result", dict)``. If the process dies without a result (crash, ``os._exit``,
kill), the server knows from the missing result and the exit code the fork server sends.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import socket
import time
import traceback
from typing import Any

from exporter.constants import Stage
from exporter.errors import is_out_of_memory
from onnxlens_server import wire


@dataclasses.dataclass(frozen=True)
class ExportRequest:
    job_id: str
    path: str  # the model file (absolute)
    target: str  # an @exporter.export_target function in it
    settings: dict[str, Any]  # ExportOptions.from_settings keys: the editor's configuration
    overrides: dict[str, Any]  # the same keys: the request's, over the target's own options
    output_stem: str  # the output files' path without suffix (`onnx_path`, `sarif_path`)
    cwd: str  # the working directory of the export (the workspace folder)
    memory_limit_mb: int = 0  # the export process's data size limit; 0: none
    source: str | None = None  # the editor's text of `path` (may be unsaved); None: read the file

    @property
    def key(self) -> str:
        return target_key(self.path, self.target)

    @property
    def output_dir(self) -> str:
        return os.path.dirname(self.output_stem)

    @property
    def onnx_path(self) -> str:
        return self.output_stem + ".onnx"

    @property
    def sarif_path(self) -> str:
        return self.output_stem + ".sarif"


def target_key(path: str, target: str) -> str:
    """The key of a target: one state, and one running export, per target."""
    return f"{path}::{target}"


def run(request: ExportRequest, conn: socket.socket) -> None:
    """Process entry point: export `request.target`, writing .onnx and .sarif atomically."""
    from exporter.diagnostics.locations import add_library_root

    wire.send(conn, ("started", os.getpid()))
    add_library_root(os.path.dirname(__file__))  # this package's frames are not the user's
    start, stage = time.perf_counter(), Stage.LOAD.value

    def progress(new_stage: str, info: dict[str, Any]) -> None:
        nonlocal stage
        stage = new_stage
        wire.send(conn, ("progress", new_stage, info))

    try:
        os.chdir(request.cwd)
        if request.memory_limit_mb:
            limit = request.memory_limit_mb << 20
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        result = _export(request, progress)
    except BaseException as e:  # anything user code raises is a result, not a crash
        if is_out_of_memory(e):
            result = {"status": "failed", "message": _out_of_memory_message(stage, request.memory_limit_mb), "frames": []}
        else:
            result = {"status": "failed", "message": f"{type(e).__name__}: {e}", "frames": _user_frames(e, request.path)}
    result["seconds"] = time.perf_counter() - start
    wire.send(conn, ("result", result))
    conn.close()


def _export_for_generation(request: ExportRequest, fn: Any, progress) -> dict[str, Any]:
    """A text-generation target: its causal LM exported for generation into the folder ``<output stem>/``
    (with ``model.onnx``), the SARIF log beside it as for every export; the summary has the generation check."""
    import exporter
    from exporter.output.program import count_nodes
    from exporter.targets import GENERATION_SETTINGS, build_generation_target, target_options

    progress(Stage.BUILD_TARGET.value, {})
    model, check_inputs = build_generation_target(fn)
    settings = {k: v for k, v in {**target_options(fn), **request.settings}.items() if k in GENERATION_SETTINGS}
    options = exporter.ExportOptions.from_settings(settings)
    progress(Stage.CAPTURE.value, {})
    try:
        result = exporter.export_for_generation(
            model, request.output_stem, opset_version=options.opset_version, optimize=options.optimize,
            modularize=options.modularize, diagnostic_options=options.diagnostic_options, sarif=False, **check_inputs,
        )
    except exporter.OnnxExporterError as e:
        e.export_output.save_diagnostics(request.sarif_path)
        return {"status": "failed", "message": str(e), "sarif": request.sarif_path, "stages": e.export_output.diagnostic_context.timings}
    result.export_output.save_diagnostics(request.sarif_path)
    ctx = result.export_output.diagnostic_context
    graph = result.export_output.model.graph
    return {
        "status": "ok",
        "onnx": result.model_path,
        "sarif": request.sarif_path,
        "stages": dict(ctx.timings),
        "summary": {
            "inputs": len(graph.inputs),
            "outputs": len(graph.outputs),
            "nodes": count_nodes(result.export_output.model),
            "functions": len(result.export_output.model.functions),
            "opset": graph.opset_imports.get(""),
            "warnings": sum(1 for d in ctx.diagnostics if d.level.name == "WARNING"),
            "generation": result.parity.summary() if result.parity is not None else "generation not verified",
        },
    }


def _out_of_memory_message(stage: str, limit_mb: int) -> str:
    if not limit_mb:
        return f"Out of memory at {stage}."
    return f"Out of memory at {stage}: the export process reached its limit of {limit_mb} MiB (setting onnxlens.memoryLimitMB)."


def _export(request: ExportRequest, progress) -> dict[str, Any]:
    import exporter
    from exporter.output.program import count_nodes
    from exporter.targets import TEXT_GENERATION, build_target, load_module, target_options, target_task

    progress(Stage.LOAD.value, {})
    module = load_module(request.path, request.source)
    fn = getattr(module, request.target, None)
    if fn is None or not callable(fn):
        return {"status": "failed", "message": f"{os.path.basename(request.path)} has no export target {request.target!r}", "frames": []}
    if target_task(fn) == TEXT_GENERATION:
        return _export_for_generation(request, fn, progress)
    progress(Stage.BUILD_TARGET.value, {})
    model, args, kwargs = build_target(fn)
    options = exporter.ExportOptions.from_settings({**request.settings, **target_options(fn), **request.overrides})
    job = exporter.Exporter(options, model, args, kwargs, progress=progress)
    os.makedirs(request.output_dir, exist_ok=True)
    try:
        output = job.export()
    except exporter.OnnxExporterError as e:
        if e.export_output.model is not None:  # only the verification failed: keep the model and its reproducer
            e.export_output.save(request.onnx_path)
        e.export_output.save_diagnostics(request.sarif_path)
        return {"status": "failed", "message": str(e), "sarif": request.sarif_path, "stages": job.timings}
    progress(Stage.SAVE.value, {})
    output.save(request.onnx_path)
    output.save_diagnostics(request.sarif_path)
    graph = output.model.graph
    return {
        "status": "ok",
        "onnx": request.onnx_path,
        "sarif": request.sarif_path,
        "stages": job.timings,
        "summary": {
            "inputs": len(graph.inputs),
            "outputs": len(graph.outputs),
            "nodes": count_nodes(output.model),
            "functions": len(output.model.functions),
            "opset": graph.opset_imports.get(""),
            "warnings": sum(1 for d in job.ctx.diagnostics if d.level.name == "WARNING"),
        },
    }


def _user_frames(error: BaseException, path: str) -> list[dict[str, Any]]:
    """Frames of the traceback in the user's files (innermost first)."""
    from exporter.diagnostics.locations import is_user_file

    frames = [f for f in traceback.extract_tb(error.__traceback__) if is_user_file(f.filename)]
    if isinstance(error, SyntaxError) and error.filename and error.lineno:
        frames.append(traceback.FrameSummary(error.filename, error.lineno, "<module>"))
    return [{"path": f.filename, "line": f.lineno, "function": f.name} for f in reversed(frames)]
