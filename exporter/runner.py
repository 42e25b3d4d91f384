"""One export of an ``@export_target`` function, as the CLI (`exporter.cli`) and the editor's export
process (`onnxlens_server.child`) run it: its options, the plain or the text-generation export, the
files it writes (.onnx or the generation folder, the SARIF log) and a typed `ExportResult`.
"""

from __future__ import annotations

import dataclasses
import os
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from exporter.constants import Stage
from exporter.errors import is_out_of_memory
from exporter.options import ExportOptions, refuse_weight_settings
from exporter.outcome import Outcome, decide, failed, fixed_by_spec
from exporter.targets import (
    GENERATION_FIXED,
    TEXT_GENERATION,
    TargetError,
    build_generation_target,
    build_target,
    load_module,
    target_options,
    target_task,
)

Progress = Callable[[str, dict[str, Any]], None]


def merge_settings(editor: Mapping[str, Any], target: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of one export, parsed values (`exporter.options.parse_settings`) by precedence:
    built-in defaults (the `ExportOptions` fields') < the editor's settings < the target's own
    ``@export_target(...)`` options < an explicit override (a request's, or the CLI's flags)."""
    return {**editor, **target, **override}


@dataclasses.dataclass
class ExportResult:
    """What one export did; `to_message` is what the editor's export process sends."""

    status: str  # "ok" or "failed"
    message: str = ""  # why it failed (one line first)
    onnx: str | None = None  # the model written (a generation export: its folder's model.onnx)
    sarif: str | None = None  # the SARIF log written
    files: list[str] = dataclasses.field(default_factory=list)  # a generation export's, relative to its folder
    stages: dict[str, float] = dataclasses.field(default_factory=dict)  # seconds per stage
    summary: dict[str, Any] = dataclasses.field(default_factory=dict)  # inputs, outputs, nodes, functions, opset …
    frames: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # user frames of the error, innermost first
    context: Any = dataclasses.field(default=None, repr=False)  # the DiagnosticContext (not sent)
    outcome: Outcome = None  # type: ignore[assignment]  # kind, headline, fixed dims (default: a failure's)

    def __post_init__(self) -> None:
        if self.outcome is None:
            self.outcome = failed(self.message)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_message(self) -> dict[str, Any]:
        message = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "context"}
        return {**message, "outcome": self.outcome.to_json()}


def export_file_target(
    path: str,
    name: str,
    settings: Mapping[str, Any],
    overrides: Mapping[str, Any],
    output_stem: str,
    *,
    source: str | None = None,
    progress: Progress | None = None,
) -> ExportResult:
    """Load the model file `path` (or its `source` text) and `export_target` its target `name` to
    ``<output_stem>.onnx`` (a generation target: the folder ``<output_stem>/``) and ``<output_stem>.sarif``."""
    progress = progress or _no_progress
    progress(Stage.LOAD.value, {})
    try:
        fn = getattr(load_module(path, source), name, None)
    except Exception as e:
        if is_out_of_memory(e):
            raise
        return failure(e, name)
    if fn is None or not callable(fn):
        message = f"{os.path.basename(path)} has no export target {name!r}"
        return ExportResult("failed", message, outcome=failed(message, name))
    generation = target_task(fn) == TEXT_GENERATION
    output = output_stem if generation else output_stem + ".onnx"
    return export_target(fn, settings, overrides, output, output_stem + ".sarif", progress=progress)


def export_target(
    fn: Callable[..., Any],
    settings: Mapping[str, Any],
    overrides: Mapping[str, Any],
    output: str,
    sarif: str | None,
    *,
    task: str | None = None,
    progress: Progress | None = None,
    generation_check: bool = True,
) -> ExportResult:
    """Export the target `fn` with `settings` (the editor's) and `overrides` (parsed values, see
    `merge_settings`) to `output`: a .onnx file, or for a text-generation target (its own ``task`` or
    `task`) a folder. The SARIF log goes to `sarif` (a generation export without one: into its folder).
    Without `generation_check` a text-generation folder is written unchecked. A failure in user code or
    of the export is a failed result; out of memory is raised."""
    progress = progress or _no_progress
    try:
        values = merge_settings(settings, target_options(fn), overrides)
        if (task or target_task(fn)) == TEXT_GENERATION:
            return _export_for_generation(fn, values, output, sarif, progress, generation_check)
        refuse_weight_settings({**target_options(fn), **overrides}, "a plain export (no text-generation task)")
        return _export(fn, values, output, sarif, progress)
    except Exception as e:
        if is_out_of_memory(e):
            raise
        return failure(e, _name(fn))


def _export(
    fn: Callable[..., Any], values: dict[str, Any], output: str, sarif: str | None, progress: Progress
) -> ExportResult:
    import exporter

    progress(Stage.BUILD_TARGET.value, {})
    model, args, kwargs = build_target(fn)
    job = exporter.Exporter(ExportOptions.from_parsed(values), model, args, kwargs, progress=progress)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    name, fixed = _name(fn), fixed_by_spec(values.get("dynamic_shapes"))
    try:
        result = job.export()
    except exporter.OnnxExporterError as e:
        written = None
        if e.export_output.model is not None:  # only the verification failed: keep the model and its reproducer
            e.export_output.save(output)
            written = output
        outcome = decide(
            job.ctx.diagnostics, name=name, model=written is not None, failure=str(e), fixed_by_options=fixed
        )
        _save_log(e.export_output, sarif, outcome, fn)
        return ExportResult("failed", str(e), written, sarif, stages=job.timings, context=job.ctx, outcome=outcome)
    progress(Stage.SAVE.value, {})
    outcome = decide(job.ctx.diagnostics, name=name, model=True, fixed_by_options=fixed)
    try:
        result.save(output)
        _save_log(result, sarif, outcome, fn)
    except OSError as e:
        message = f"cannot write {e.filename or output}: {e.strerror or e}"
        summary, outcome = _summary(result), failed(message, name)
        return ExportResult("failed", message, stages=job.timings, summary=summary, context=job.ctx, outcome=outcome)
    return ExportResult(
        "ok", "", output, sarif, stages=job.timings, summary=_summary(result), context=job.ctx, outcome=outcome
    )


def _export_for_generation(
    fn: Callable[..., Any],
    values: dict[str, Any],
    output: str,
    sarif: str | None,
    progress: Progress,
    check: bool,
) -> ExportResult:
    import exporter

    progress(Stage.BUILD_TARGET.value, {})
    asked = sorted(name for name in GENERATION_FIXED if values.get(name))
    if asked:
        raise TargetError(
            f"a text-generation export does not take {', '.join(asked)} (its shapes and checks are fixed: "
            "it is checked by generating)"
        )
    options = ExportOptions.from_parsed({k: v for k, v in values.items() if k not in GENERATION_FIXED})
    model, check_inputs = build_generation_target(fn)
    progress(Stage.CAPTURE.value, {})
    try:
        result = exporter.export_for_generation(
            model, output, verify_generation=check, export_options=options, sarif=sarif is None, **check_inputs
        )
    except exporter.GenerationCheckError as e:  # the folder is written, and its check says it is wrong
        return _generation_result(e.written, fn, output, sarif, check, failure=str(e))
    except exporter.OnnxExporterError as e:
        ctx = e.export_output.diagnostic_context
        outcome = decide(ctx.diagnostics, name=_name(fn), model=False, failure=str(e))
        _save_log(e.export_output, sarif, outcome, fn)
        return ExportResult("failed", str(e), sarif=sarif, stages=dict(ctx.timings), context=ctx, outcome=outcome)
    return _generation_result(result, fn, output, sarif, check)


def _generation_result(
    written: Any, fn: Callable[..., Any], output: str, sarif: str | None, check: bool, failure: str = ""
) -> ExportResult:
    """The result of a generation export that wrote its folder (`written`, a `GenerationExport` or
    `Seq2SeqExport`); `failure`: the check's error that makes it wrong."""
    from exporter.generation.export import SARIF_FILE

    ctx = written.export_output.diagnostic_context
    outcome = decide(ctx.diagnostics, name=_name(fn), model=True, failure=failure)
    _save_log(written.export_output, sarif, outcome, fn)
    summary = {**_summary(written.export_output), "generation": written.check}
    stages = {**ctx.timings, **({"generation check": written.verify_seconds} if check else {})}
    log = sarif or os.path.join(output, SARIF_FILE)
    status = "failed" if failure else "ok"
    return ExportResult(
        status, failure, written.model_path, log, written.files, stages, summary, context=ctx, outcome=outcome
    )


def _save_log(export_output: Any, sarif: str | None, outcome: Outcome, fn: Callable[..., Any]) -> None:
    """Write the export's SARIF log to `sarif` (if given): relative to the repository holding the target `fn`,
    results without a source line there at its definition (`exporter.diagnostics.sarif.to_results`)."""
    if sarif:
        from exporter.diagnostics.sarif import target_definition, write_sarif

        write_sarif(export_output.diagnostic_context, sarif, outcome, target_definition(fn))


def failure_diagnostic(result: ExportResult, name: str) -> Any:
    """The FXE0025 error of the target `name` whose export failed without an error result (in its file, in
    the target function, or writing): at the user's line that raised (none: the target's definition)."""
    import linecache

    from exporter.diagnostics.context import Diagnostic
    from exporter.diagnostics.locations import Frame
    from exporter.diagnostics.rules import EXPORT_TARGET, Level

    frames = [
        Frame(f["path"], f["line"], f["function"], linecache.getline(f["path"], f["line"])) for f in result.frames
    ]
    lines = result.message.strip().splitlines()
    return Diagnostic(EXPORT_TARGET, Level.ERROR, f"Target {name} failed: {lines[0] if lines else ''}", frames)


def save_failure_log(result: ExportResult, fn: Callable[..., Any], sarif: str) -> None:
    """Write the SARIF log of an export of the target `fn` that failed before it ran (`failure`: no
    diagnostics context): its `failure_diagnostic`, so no earlier log is left in its place."""
    from exporter.diagnostics.context import DiagnosticContext
    from exporter.diagnostics.sarif import target_definition, write_sarif

    ctx = DiagnosticContext()
    ctx.diagnostics.append(failure_diagnostic(result, fn.__name__))
    write_sarif(ctx, sarif, result.outcome, target_definition(fn))


def _name(fn: Callable[..., Any]) -> str | None:
    return getattr(fn, "__name__", None)


def _summary(export_output: Any) -> dict[str, Any]:
    from exporter.output.program import count_nodes

    model, ctx = export_output.model, export_output.diagnostic_context
    return {
        "inputs": len(model.graph.inputs),
        "outputs": len(model.graph.outputs),
        "nodes": count_nodes(model),
        "functions": len(model.functions),
        "opset": model.graph.opset_imports.get(""),
        "warnings": sum(1 for d in ctx.diagnostics if d.level.name == "WARNING"),
    }


def failure(error: BaseException, name: str | None = None) -> ExportResult:
    """A failed result for an error raised in user code (or by a bad target) of the target `name`: its
    message and frames."""
    message = f"{type(error).__name__}: {error}"
    return ExportResult("failed", message, frames=user_frames(error), outcome=failed(message, name))


def user_frames(error: BaseException) -> list[dict[str, Any]]:
    """Frames of the traceback in the user's files (innermost first); a syntax error's own line first."""
    from exporter.diagnostics.locations import is_user_file

    frames = [f for f in traceback.extract_tb(error.__traceback__) if is_user_file(f.filename)]
    if isinstance(error, SyntaxError) and error.filename and error.lineno:
        frames.append(traceback.FrameSummary(error.filename, error.lineno, "<module>"))
    return [{"path": f.filename, "line": f.lineno, "function": f.name} for f in reversed(frames)]


def _no_progress(stage: str, info: dict[str, Any]) -> None:
    pass
