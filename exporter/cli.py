"""``onnxlens-export FILE.py[:TARGET]``: export the file's ``@exporter.export_target`` functions."""

from __future__ import annotations

import argparse
import atexit
import gc
import logging
import os
import sys
import time
import traceback
from typing import Any, NoReturn

from exporter.constants import Stage, progress_text
from exporter.outcome import Kind

DESCRIPTION = """Export PyTorch models to ONNX. A target is a function decorated with
@exporter.export_target that returns (model, args) or (model, args, kwargs).
`onnxlens-export check PATHS...` checks every target under the paths (for CI)."""
CHECK_DESCRIPTION = """Export every target under PATHS in one process, print a table, write one SARIF log for
GitHub code scanning (--sarif) and exit 1 when a target has an error (--fail-on warning: or a warning)."""

# Loggers of dependencies that report on themselves at every run: torchao's "Failed to load" of kernels
# built for GPUs, and torch's deprecation notes on torchao's pytree registrations (transformers imports
# torchao wherever it is installed). Their errors still print.
_DEPENDENCY_NOISE = ("torchao", "torch.utils._pytree")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; the export options' flags come from `exporter.options.SETTINGS`, each read
    and checked by its setting's kind (a bad value is a usage error, exit code 2)."""
    parser = argparse.ArgumentParser(prog="onnxlens-export", description=DESCRIPTION)
    parser.add_argument(
        "target",
        help="FILE.py or FILE.py:TARGET (default: every target in the file), or a Hugging Face model folder "
        "(save_pretrained's), exported for generation",
    )
    parser.add_argument(
        "-o",
        "--output",
        help="output .onnx path, or folder for --task text-generation (one target only; "
        "default: <file>.<target>.onnx, <file>.<target>/ beside FILE, <folder>-onnx/ beside a model folder)",
    )
    parser.add_argument(
        "--task",
        choices=["text-generation"],
        help="export the target's causal LM for generation (KV cache, genai_config.json, checked by generating); "
        "default: the target's task",
    )
    parser.add_argument("--sarif", help="write the SARIF diagnostics log here (.sarif; one target only)")
    parser.add_argument(
        "--no-generation-check",
        dest="generation_check",
        action="store_false",
        help="write a text-generation folder without generating with it (reported as exported, not verified)",
    )
    _add_settings(parser)
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print torch's log output and the warnings raised during export",
    )
    return parser.parse_args(argv)


def parse_check_args(argv: list[str]) -> argparse.Namespace:
    """The command line of ``onnxlens-export check``."""
    parser = argparse.ArgumentParser(prog="onnxlens-export check", description=CHECK_DESCRIPTION)
    parser.add_argument("paths", nargs="+", metavar="PATH", help="model files or folders holding them")
    parser.add_argument("--sarif", help="write the SARIF log of every target here (.sarif)")
    parser.add_argument("--baseline", help="a previous check's SARIF log: only new problems fail the check")
    parser.add_argument(
        "--fail-on",
        choices=["error", "warning"],
        default="error",
        help="the least severe problem that fails the check (default: error)",
    )
    parser.add_argument("--category", help="the SARIF automationDetails.id category (default: the paths)")
    parser.add_argument(
        "--time-limit",
        type=float,
        metavar="SECONDS",
        help="fail a file whose import, or a target whose export, runs longer (default: 1800; 0: no limit)",
    )
    _add_settings(parser)
    return parser.parse_args(argv)


def _add_settings(parser: argparse.ArgumentParser) -> None:
    """The export options' flags (`exporter.options.SETTINGS`)."""
    from exporter.options import SETTINGS

    options = parser.add_argument_group("export options (override the target's @export_target options)")
    for setting in SETTINGS.values():
        options.add_argument(setting.flag, dest=setting.name, default=None, **setting.kind.cli(setting))


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
    argv = sys.argv[1:] if argv is None else argv
    _quiet_dependencies()
    if argv[:1] == ["check"]:
        return run_check(argv[1:])
    args = parse_args(argv)
    path, _, name = args.target.partition(":")
    progress = _Progress(sys.stderr)
    progress(Stage.LOAD.value, {})
    from exporter.targets import TEXT_GENERATION, TargetError, target_task, targets_at

    try:
        if args.sarif:
            check_output_path(args.sarif, ".sarif")
        targets = targets_at(path)
        if name:
            if name not in targets:
                raise TargetError(f"{path} has no export target {name!r}; targets: {', '.join(targets) or 'none'}")
            targets = {name: targets[name]}
        if not targets:
            raise TargetError(f"{path} has no function decorated with @exporter.export_target")
        if not args.generation_check and any(
            (args.task or target_task(fn)) != TEXT_GENERATION for fn in targets.values()
        ):
            raise TargetError("--no-generation-check is for a text-generation export (--task text-generation)")
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
    from exporter.runner import export_target, save_failure_log

    _import_pipeline()
    gc.freeze()
    gc.enable()
    flags = {name: value for name, value in vars(args).items() if name in SETTINGS and value is not None}
    failures = 0
    for target_name, fn in targets.items():
        generation = (args.task or target_task(fn)) == TEXT_GENERATION
        output = args.output or _default_output(path, target_name, generation)
        start = time.perf_counter()
        result = export_target(
            fn,
            {},
            flags,
            output,
            args.sarif,
            task=args.task,
            generation_check=args.generation_check,
            progress=lambda stage, info, name=target_name: progress(f"{name}: {stage}", info),
        )
        progress.done()
        if args.sarif and result.context is None:  # it failed before exporting: no earlier log left in its place
            save_failure_log(result, fn, args.sarif)
        _print_result(target_name, fn, result, generation, time.perf_counter() - start, args.verbose)
        failures += _fails(result.outcome.kind, bool(flags.get("warnings_as_errors")))
    return 1 if failures else 0


def run_check(argv: list[str]) -> int:
    """``onnxlens-export check``: `exporter.check.check` in this process (warm, as `run`); the exit code."""
    import json

    from exporter.check import check
    from exporter.diagnostics.code_scanning import write
    from exporter.options import SETTINGS

    args = parse_check_args(argv)
    try:
        if args.sarif:
            check_output_path(args.sarif, ".sarif")
        baseline = None
        if args.baseline:
            with open(args.baseline, encoding="utf-8") as f:
                baseline = json.load(f)
    except (OSError, ValueError) as e:
        print(f"onnxlens-export check: error: {e}", file=sys.stderr)
        return 2
    _import_pipeline()
    gc.freeze()
    gc.enable()
    flags = {name: value for name, value in vars(args).items() if name in SETTINGS and value is not None}
    progress = _Progress(sys.stderr)
    limit = {} if args.time_limit is None else {"time_limit": args.time_limit}
    try:
        report = check(
            args.paths, overrides=flags, baseline=baseline, category=args.category, progress=progress, **limit
        )
    except FileNotFoundError as e:
        progress.done()
        print(f"onnxlens-export check: error: {e}", file=sys.stderr)
        return 2
    progress.done()
    print(report.table())
    if args.sarif:
        write(report.log, args.sarif)
        print(f"SARIF log: {args.sarif}")
    return report.exit_code(args.fail_on)


def _fails(kind: Kind, warnings_as_errors: bool) -> bool:
    """Whether an export of this outcome fails the command: no model or a wrong one (a degraded one too
    with --warnings-as-errors)."""
    return kind in (Kind.FAILED, Kind.WRONG) or (warnings_as_errors and kind == Kind.DEGRADED)


def _quiet_dependencies() -> None:
    """Keep `_DEPENDENCY_NOISE` and transformers' weight-loading progress bar (unless the environment asks
    for progress bars) out of the command's output: it prints its own stages."""
    for name in _DEPENDENCY_NOISE:
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when huggingface_hub is imported


def _import_pipeline() -> None:
    """Import what every export uses before it runs (see `run`): the pipeline, torchlib's table and
    TorchDynamo, which torch.export imports on its first call."""
    import torch.export._trace  # noqa: F401

    import exporter.api  # noqa: F401
    from exporter.translate.registry import default_registry

    default_registry()


def _default_output(path: str, target_name: str, generation: bool) -> str:
    """``<file>.<target>.onnx`` (or the folder ``<file>.<target>``) beside FILE; ``<folder>-onnx`` beside a
    model folder."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return f"{path.rstrip(os.sep)}-onnx"
    stem = os.path.join(os.path.dirname(path), f"{os.path.splitext(os.path.basename(path))[0]}.{target_name}")
    return stem if generation else f"{stem}.onnx"


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


def _print_result(name: str, fn, result, generation: bool, seconds: float, verbose: bool) -> None:
    """The export's diagnostics (and logs with `verbose`) on stderr, then its failure (or wrong model), or
    its summary led by its outcome (exported, verified, degraded) and, unless plainly exported, its headline."""
    from exporter.diagnostics.report import format_results
    from exporter.diagnostics.sarif import target_definition

    if result.context is None:  # it failed before exporting: in user code, or a bad target or option
        where = result.frames[0] if result.frames else None
        place = f"{where['path']}:{where['line']}: " if where else f"{target_definition(fn).path}: "
        print(f"{place}error: target {name}: {_first_line_of(result.message)}", file=sys.stderr)
        return
    if verbose:
        for record in result.context.logs:
            print(f"[{record.source}] {record.message}", file=sys.stderr)
    for line in format_results(result.context):
        print(line, file=sys.stderr)
    outcome = result.outcome
    if outcome.kind == Kind.WRONG:
        print(f"WRONG {name}: {outcome.headline}\n  the model is kept to inspect: {result.onnx}", file=sys.stderr)
        return
    if not result.ok:
        print(f"FAILED {name}: {_first_line_of(result.message)}", file=sys.stderr)
        return
    stages = ", ".join(f"{stage} {seconds:.2f}s" for stage, seconds in result.stages.items())
    summary = result.summary
    headline = f"  {outcome.headline}\n" if outcome.kind != Kind.EXPORTED else ""
    if generation:
        print(
            f"{outcome.kind} {name} for generation -> {os.path.dirname(result.onnx)}\n{headline}"
            f"  {', '.join(result.files)}\n  {summary['generation']}\n  {seconds:.2f}s ({stages})"
        )
        return
    print(
        f"{outcome.kind} {name} -> {result.onnx}\n{headline}"
        f"  {summary['inputs']} inputs, {summary['outputs']} outputs, {summary['nodes']} ONNX nodes, "
        f"{summary['functions']} local functions, opset {summary['opset']}\n"
        f"  {seconds:.2f}s ({stages})"
    )


def _first_line_of(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0] if lines else message


def _where(error: BaseException, path: str) -> str:
    """``file:line: `` of the innermost frame of the user's files in `error` (or of its syntax error)."""
    from exporter.diagnostics.locations import is_user_file

    if isinstance(error, SyntaxError) and error.filename:
        return (
            f"{error.filename}:{error.lineno}:{error.offset}: "
            if error.offset
            else f"{error.filename}:{error.lineno}: "
        )
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
