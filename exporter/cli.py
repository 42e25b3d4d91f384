"""``onnxlens-export FILE.py[:TARGET]``: export the file's ``@exporter.export_target`` functions."""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import os
import sys
import time
import traceback
from typing import Any, NoReturn

from exporter.constants import Stage, progress_text

DESCRIPTION = """Export PyTorch models to ONNX. A target is a function decorated with
@exporter.export_target that returns (model, args) or (model, args, kwargs)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from exporter.options import SETTINGS

    parser = argparse.ArgumentParser(prog="onnxlens-export", description=DESCRIPTION)
    parser.add_argument("target", help="FILE.py or FILE.py:TARGET (default: every target in the file)")
    parser.add_argument("-o", "--output", help="output .onnx path, or folder for --task text-generation (one target only; default: <file>.<target>.onnx, <file>.<target>/ beside FILE)")
    parser.add_argument("--task", choices=["text-generation"], help="export the target's causal LM for generation (KV cache, genai_config.json, checked by generating); default: the target's task")
    parser.add_argument("--sarif", help="write the SARIF diagnostics log here (.sarif; one target only)")
    options = parser.add_argument_group("export options (override the target's @export_target options)")
    for setting in SETTINGS.values():
        if setting.name == "dynamic_shapes":  # alone: every dimension; with a JSON spec: those dims
            options.add_argument(
                setting.flag, dest=setting.name, nargs="?", const=True, default=None, type=_json_spec, metavar="SPEC",
                help=f"{setting.help}; or only those of a JSON spec, e.g. '{{\"x\": {{\"0\": \"batch\"}}}}' (a name, auto, dynamic or static per dim)",
            )
        elif setting.kind is bool:
            negated = setting.default is True
            options.add_argument(
                setting.flag, dest=setting.name, action="store_false" if negated else "store_true", default=None,
                help=f"do not {setting.help}" if negated else setting.help,
            )
        else:
            options.add_argument(setting.flag, dest=setting.name, type=setting.kind, choices=setting.choices or None, help=setting.help)
    parser.add_argument("-v", "--verbose", action="store_true", help="also print torch's log output and the warnings raised during export")
    return parser.parse_args(argv)


def _json_spec(text: str) -> Any:
    try:
        spec = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(spec, (dict, list)):
        raise argparse.ArgumentTypeError("a dynamic shapes spec is a JSON object (by argument name) or list")
    return spec


def main(argv: list[str] | None = None) -> NoReturn:
    """The console script: `run` with the garbage collector paused until the imports are done, then
    exit without tearing the interpreter down.

    Deallocating torch's, TorchDynamo's and torchlib's modules at exit takes ~0.17 s of a 2 s cold
    export. Every output is written and closed by then; the exit handlers still run and the standard
    streams are flushed, as a normal exit would.
    """
    gc.disable()
    code = run(argv)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to write to
            pass
    os._exit(code)


def run(argv: list[str] | None = None) -> int:
    """Parse `argv`, load the model file and export its targets; the exit code.

    The imports (torch, onnx, TorchDynamo, torchlib) create millions of long-lived objects. They are
    frozen once loaded and the garbage collector (re)enabled, so the collections during the export
    do not walk them again and again (with `main`'s pause while they load, ~0.5 s of a cold run).
    """
    args = parse_args(argv)
    path, _, name = args.target.partition(":")
    progress = _Progress(sys.stderr)
    progress(Stage.LOAD.value, {})
    import exporter
    from exporter.targets import TEXT_GENERATION, TargetError, find_targets, load_module, target_options, target_task

    try:
        if args.sarif:
            check_output_path(args.sarif, ".sarif")
        module = load_module(path)
        targets = find_targets(module)
        if name:
            if name not in targets:
                raise TargetError(f"{path} has no export target {name!r}; targets: {', '.join(targets) or 'none'}")
            targets = {name: targets[name]}
        if not targets:
            raise TargetError(f"{path} has no function decorated with @exporter.export_target")
        if args.output and len(targets) > 1:
            raise TargetError("-o/--output needs a single target: use FILE.py:TARGET")
        if args.sarif and len(targets) > 1:
            raise TargetError("--sarif needs a single target: use FILE.py:TARGET")
        if args.output:
            generation = (args.task or target_task(next(iter(targets.values())))) == TEXT_GENERATION
            check_output_folder(args.output) if generation else check_output_path(args.output, ".onnx")
    except TargetError as e:
        progress.done()
        print(f"onnxlens-export: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # the model file itself failed to run
        progress.done()
        print(f"{_where(e, path)}error: {type(e).__name__}: {_first_line(e)}", file=sys.stderr)
        return 2

    from exporter.options import SETTINGS

    _import_pipeline()
    gc.freeze()
    gc.enable()
    cli_settings = {name: value for name, value in vars(args).items() if name in SETTINGS and value is not None}
    failures = 0
    for target_name, fn in targets.items():
        stem = os.path.join(os.path.dirname(os.path.abspath(path)), f"{os.path.splitext(os.path.basename(path))[0]}.{target_name}")
        settings = {**target_options(fn), **cli_settings}
        if (args.task or target_task(fn)) == TEXT_GENERATION:
            failures += not export_generation_one(target_name, fn, settings, args.output or stem, args.sarif, progress, args.verbose)
        else:
            failures += not export_one(exporter, target_name, fn, settings, args.output or f"{stem}.onnx", args.sarif, progress, args.verbose)
    return 1 if failures else 0


def _import_pipeline() -> None:
    """Import what every export uses before it runs (see `run`): the pipeline, torchlib's table and
    TorchDynamo, which torch.export imports on its first call."""
    import torch.export._trace  # noqa: F401
    from exporter.translate.registry import default_registry

    import exporter.api  # noqa: F401

    default_registry()


def check_output_path(path: str, suffix: str) -> None:
    """Fail before exporting if `path` cannot be written as a `suffix` file."""
    from exporter.targets import TargetError

    if os.path.isdir(path):
        raise TargetError(f"{path} is a directory; give a file name ending in {suffix}")
    if not path.endswith(suffix):
        raise TargetError(f"{path}: the file name must end in {suffix}")
    parent = os.path.dirname(os.path.abspath(path))
    existing = parent
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise TargetError(f"{path}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise TargetError(f"{path}: permission denied")


def check_output_folder(path: str) -> None:
    """Fail before exporting if `path` cannot be the output folder of a generation export."""
    from exporter.targets import TargetError

    if os.path.exists(path) and not os.path.isdir(path):
        raise TargetError(f"{path} is a file; --task text-generation writes a folder")
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise TargetError(f"{path}: permission denied")


def export_generation_one(name: str, fn, settings: dict[str, Any], output: str, sarif: str | None, progress, verbose: bool) -> bool:
    """Export one target's causal LM for generation into the folder `output`; True on success."""
    import exporter
    from exporter.diagnostics.report import format_results
    from exporter.targets import GENERATION_SETTINGS, build_generation_target

    start = time.perf_counter()
    try:
        progress(f"{name}: {Stage.BUILD_TARGET}", {})
        unused = sorted(set(settings) - set(GENERATION_SETTINGS))
        if unused:
            raise ValueError(f"--task text-generation does not take {', '.join(unused)} (its shapes and checks are fixed)")
        options = exporter.ExportOptions.from_settings(settings)
        model, check_inputs = build_generation_target(fn)
    except Exception as e:
        progress.done()
        print(f"{_where(e, fn.__code__.co_filename)}error: target {name}: {type(e).__name__}: {_first_line(e)}", file=sys.stderr)
        return False
    progress(f"{name}: export for generation", {})
    try:
        result = exporter.export_for_generation(
            model, output, opset_version=options.opset_version, optimize=options.optimize, modularize=options.modularize,
            diagnostic_options=options.diagnostic_options, **check_inputs,
        )
    except exporter.OnnxExporterError as e:
        progress.done()
        _print_logs(e.export_output.diagnostic_context, verbose)
        print("\n".join(format_results(e.export_output.diagnostic_context)), file=sys.stderr)
        if sarif:
            e.export_output.save_diagnostics(sarif)
        print(f"FAILED {name}: {_first_line(e)}", file=sys.stderr)
        return False
    progress.done()
    if sarif:
        result.export_output.save_diagnostics(sarif)
    ctx = result.export_output.diagnostic_context
    _print_logs(ctx, verbose)
    for line in format_results(ctx):
        print(line, file=sys.stderr)
    print(
        f"exported {name} for generation -> {output}\n  {', '.join(result.files)}\n  {result.parity.summary()}\n"
        f"  {time.perf_counter() - start:.2f}s (export {result.export_seconds:.2f}s, generation check {result.verify_seconds:.2f}s)"
    )
    return True


def export_one(exporter, name: str, fn, settings: dict[str, Any], output: str, sarif: str | None, progress, verbose: bool) -> bool:
    """Export one target, print its summary and diagnostics; True on success."""
    from exporter.diagnostics.report import format_results
    from exporter.output.program import count_nodes
    from exporter.targets import build_target

    start = time.perf_counter()
    try:
        progress(f"{name}: {Stage.BUILD_TARGET}", {})
        model, model_args, model_kwargs = build_target(fn)
        options = exporter.ExportOptions.from_settings(settings)
    except Exception as e:
        progress.done()
        print(f"{_where(e, fn.__code__.co_filename)}error: target {name}: {type(e).__name__}: {_first_line(e)}", file=sys.stderr)
        return False
    job = exporter.Exporter(options, model, model_args, model_kwargs, progress=lambda stage, info: progress(f"{name}: {stage}", info))
    try:
        result = job.export()
    except exporter.OnnxExporterError as e:
        progress.done()
        _print_logs(job.ctx, verbose)
        if e.export_output.model is not None:  # only the verification failed: keep the model and its reproducer
            e.export_output.save(output)
        print("\n".join(format_results(job.ctx)), file=sys.stderr)
        if sarif:
            e.export_output.save_diagnostics(sarif)
        print(f"FAILED {name}: {_first_line(e)}", file=sys.stderr)
        return False
    progress(f"{name}: {Stage.SAVE}", {})
    try:
        result.save(output)
        if sarif:
            result.save_diagnostics(sarif)
    except OSError as e:
        progress.done()
        print(f"onnxlens-export: error: cannot write {e.filename or output}: {e.strerror or e}", file=sys.stderr)
        return False
    progress.done()
    _print_logs(job.ctx, verbose)
    for line in format_results(job.ctx):
        print(line, file=sys.stderr)
    graph = result.model.graph
    stages = ", ".join(f"{stage} {seconds:.2f}s" for stage, seconds in job.timings.items())
    print(
        f"exported {name} -> {output}\n"
        f"  {len(graph.inputs)} inputs, {len(graph.outputs)} outputs, {count_nodes(result.model)} ONNX nodes, "
        f"{len(result.model.functions)} local functions, opset {graph.opset_imports.get('', '?')}\n"
        f"  {time.perf_counter() - start:.2f}s ({stages})"
    )
    return True


def _print_logs(ctx, verbose: bool) -> None:
    if verbose:
        for record in ctx.logs:
            print(f"[{record.source}] {record.message}", file=sys.stderr)


def _where(error: BaseException, path: str) -> str:
    """``file:line: `` of the innermost frame of the user's files in `error` (or of its syntax error)."""
    from exporter.diagnostics.locations import is_user_file

    if isinstance(error, SyntaxError) and error.filename:
        return f"{error.filename}:{error.lineno}:{error.offset}: " if error.offset else f"{error.filename}:{error.lineno}: "
    frames = [f for f in traceback.extract_tb(error.__traceback__) if is_user_file(f.filename)]
    return f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else f"{path}: "


def _first_line(error: BaseException) -> str:
    if isinstance(error, SyntaxError):
        return error.msg
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


class _Progress:
    """Prints the current stage on one terminal line (nothing when not a terminal)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.active = stream.isatty()

    def __call__(self, stage: str, info: dict[str, Any]) -> None:
        if not self.active:
            return
        self.stream.write(f"\r\033[K{progress_text(stage, info)}...")
        self.stream.flush()

    def done(self) -> None:
        if self.active:
            self.stream.write("\r\033[K")
            self.stream.flush()


if __name__ == "__main__":
    main()
