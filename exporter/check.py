"""Export checks for CI (``onnxlens-export check PATHS…``): every export target under the paths, exported
in one process with `exporter.runner.export_target`, reported as one SARIF log for GitHub code scanning
(`exporter.diagnostics.code_scanning`), a table, and whether the check fails.

Targets are found statically (a function whose decorator is ``export_target`` or ``exporter.export_target``,
called or not), so a file is imported only when it has one, and a file that does not import still has its
targets reported, as failures. A file's import and each export have a time limit: one that hangs fails at the
line it was running, and the check goes on.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import linecache
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from exporter.diagnostics.code_scanning import check_log
from exporter.diagnostics.locations import Frame
from exporter.diagnostics.rules import Level
from exporter.diagnostics.sarif import TARGET_PROPERTY, Problem, relative_path, repository_root, target_name
from exporter.errors import TimeLimitExceeded
from exporter.runner import ExportResult, Progress, export_target, failure, failure_diagnostic
from exporter.targets import TEXT_GENERATION, find_targets, load_module, target_task

MARKER = "export_target"
SKIPPED_DIRS = {"node_modules", "__pycache__", "venv", "site-packages", "build", "dist"}  # and hidden ones
FAIL_ON = {"error": ("error",), "warning": ("error", "warning")}  # --fail-on: the levels that fail the check
COUNTED_STATES = (None, "new", "updated")  # the baseline states a failure counts in (None: no baseline)
TIME_LIMIT = 1800.0  # seconds for a file's import, and for each of its exports (0: none)


@dataclasses.dataclass
class TargetCheck:
    """One target checked: where it is defined and what its export did."""

    path: str  # absolute
    name: str
    line: int  # of its definition (its first decorator)
    result: ExportResult
    seconds: float = 0.0

    @property
    def definition(self) -> Frame:
        return Frame(self.path, self.line, self.name, linecache.getline(self.path, self.line))


@dataclasses.dataclass
class CheckReport:
    """The targets checked, the SARIF log (JSON) of their results and the repository root it is relative to."""

    targets: list[TargetCheck]
    log: dict[str, Any]
    root: str

    @property
    def results(self) -> list[dict[str, Any]]:
        return self.log["runs"][0]["results"]

    def failing(self, fail_on: str = "error") -> list[dict[str, Any]]:
        """The results that fail the check: at a level of `fail_on` ("error", or "warning" for errors and
        warnings) and, against a baseline, new or updated ones only."""
        levels = FAIL_ON[fail_on]
        return [r for r in self.results if r.get("level") in levels and r.get("baselineState") in COUNTED_STATES]

    def exit_code(self, fail_on: str = "error") -> int:
        return 1 if self.failing(fail_on) else 0

    def table(self) -> str:
        """A line per target (outcome, errors, warnings, new problems against a baseline, seconds), then totals."""
        baseline = any("baselineState" in r for r in self.results)
        names = [target_name(t.definition, self.root) for t in self.targets]
        counts = {name: {"error": 0, "warning": 0, "new": 0} for name in names}
        for result in self.results:
            c = counts.get(result.get("properties", {}).get(TARGET_PROPERTY))
            if c is not None and result.get("baselineState") != "absent" and result.get("level") in c:
                c[result["level"]] += 1
                c["new"] += result.get("baselineState") in ("new", "updated")
        width = max([len("target"), *map(len, names)])
        new = f" {'new':>4}" if baseline else ""
        lines = [f"{'target':<{width}}  {'outcome':<9} {'errors':>6} {'warnings':>8}{new}  seconds"]
        for name, target in zip(names, self.targets):
            c = counts[name]
            new = f" {c['new']:>4}" if baseline else ""
            lines.append(
                f"{name:<{width}}  {str(target.result.outcome.kind):<9} {c['error']:>6} {c['warning']:>8}{new}"
                f"  {target.seconds:7.2f}"
            )
        absent = sum(r.get("baselineState") == "absent" for r in self.results)
        kinds = [str(t.result.outcome.kind) for t in self.targets]
        summary = ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds)) or "no targets"
        fixed = f"; {absent} fixed since the baseline" if baseline else ""
        lines.append(f"{len(self.targets)} targets: {summary}{fixed}")
        return "\n".join(lines)


def check(
    paths: Sequence[str],
    *,
    overrides: Mapping[str, Any] | None = None,
    root: str | None = None,
    baseline: dict[str, Any] | None = None,
    category: str | None = None,
    progress: Progress | None = None,
    time_limit: float = TIME_LIMIT,
) -> CheckReport:
    """Export every target under `paths` (files or folders) with `overrides` (parsed export settings) and
    report them: a SARIF log relative to `root` (default: the git repository holding the working directory,
    else the working directory), compared with a `baseline` log when given; ``automationDetails.id`` is
    ``onnxlens/<category>/`` (default: the paths relative to the root). A file's import, and each export,
    that runs longer than `time_limit` seconds (0: no limit; it is kept in the main thread only) fails."""
    root = os.path.realpath(root or repository_root())
    checked = []
    for path in find_files(paths):
        with _as_if_alone():
            checked += check_file(path, overrides or {}, progress, time_limit)
    problems = [p for target in checked for p in _problems(target)]
    category = category or _category(paths, root)
    targets = [
        {"target": t.name, "file": relative_path(t.path, root), "line": t.line, "outcome": t.result.outcome.to_json()}
        for t in checked
    ]
    log = check_log(problems, root, category, targets, baseline=baseline)
    return CheckReport(checked, log, root)


def find_files(paths: Iterable[str]) -> list[str]:
    """The Python files under `paths` (files given are taken as they are) that define an export target, or
    mention one and do not parse; sorted, absolute. Hidden folders and virtual environments are skipped."""
    found: list[str] = []
    for path in paths:
        path = os.path.abspath(path)
        if os.path.isfile(path):
            found.append(path)
            continue
        if not os.path.isdir(path):
            raise FileNotFoundError(f"no such file or folder: {path}")
        for folder, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
            found += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".py")]
    return sorted({f for f in found if _defines_targets(f)})


def _defines_targets(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except (OSError, UnicodeDecodeError):
        return False
    if MARKER not in source:
        return False
    try:
        return bool(static_targets(ast.parse(source, path)))
    except SyntaxError:
        return True


def static_targets(tree: ast.Module) -> dict[str, int]:
    """The module-level functions decorated with ``export_target`` (a name or an attribute, called or not) in
    `tree`, by name: the line of their first decorator (`code.co_firstlineno`)."""
    found = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(map(_is_marker, node.decorator_list)):
            found[node.name] = node.decorator_list[0].lineno
    return found


def _is_marker(decorator: ast.expr) -> bool:
    if isinstance(decorator, ast.Call):
        decorator = decorator.func
    return (isinstance(decorator, ast.Name) and decorator.id == MARKER) or (
        isinstance(decorator, ast.Attribute) and decorator.attr == MARKER
    )


def check_file(
    path: str, overrides: Mapping[str, Any], progress: Progress | None = None, time_limit: float = TIME_LIMIT
) -> list[TargetCheck]:
    """Import the model file `path` and export each of its targets (into a temporary folder, removed after
    it), each within `time_limit` seconds. When the file does not parse or import, each target found
    statically (or the file itself) is a failed check."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    linecache.cache[path] = (len(source), None, source.splitlines(keepends=True), path)  # this text, not an old one
    try:
        lines = static_targets(ast.parse(source, path))
    except SyntaxError as e:
        return [TargetCheck(path, "<file>", e.lineno or 1, failure(e))]
    start = time.perf_counter()
    try:
        with limited(time_limit, f"importing {os.path.basename(path)}"):
            module = load_module(path)
    except (Exception, TimeLimitExceeded) as e:  # the file raised while being imported: each of its targets fails there
        return [
            TargetCheck(path, name, line, failure(e, name), time.perf_counter() - start) for name, line in lines.items()
        ]
    found = find_targets(module)
    checked = []
    for name, line in {**lines, **{n: fn.__code__.co_firstlineno for n, fn in found.items()}}.items():
        start = time.perf_counter()
        fn = found.get(name)
        if fn is None:
            result = failure(TypeError(f"{name} is not an export target once its file is imported"), name)
        else:
            with tempfile.TemporaryDirectory(prefix="onnxlens-check-") as out:
                stem = os.path.join(out, name)
                output = stem if target_task(fn) == TEXT_GENERATION else stem + ".onnx"
                try:
                    with limited(time_limit, f"export target {name}"):
                        result = export_target(fn, {}, overrides, output, None, progress=_progress_of(progress, name))
                except TimeLimitExceeded as e:
                    result = failure(e, name)
        checked.append(TargetCheck(path, name, line, result, time.perf_counter() - start))
    return checked


@contextlib.contextmanager
def _as_if_alone() -> Iterator[None]:
    """Undo what a model file changes in the process that the next one would see: ``sys.path`` (its folder
    first), torch's default dtype and grad mode (``torch.set_default_dtype(torch.float64)`` at import). Its
    sibling modules are `exporter.targets.load_module`'s to forget."""
    import torch

    path, dtype, grad = list(sys.path), torch.get_default_dtype(), torch.is_grad_enabled()
    try:
        yield
    finally:
        sys.path[:] = path
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)


@contextlib.contextmanager
def limited(seconds: float, what: str) -> Iterator[None]:
    """Raise `TimeLimitExceeded` (``"<what> did not finish in N s"``) in the code running after `seconds`
    (a timer signal: Python code is interrupted, a call blocked in native code once it returns). No limit
    for 0 seconds or outside the main thread."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise TimeLimitExceeded(f"{what} did not finish in {seconds:g} s (the check's --time-limit)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _progress_of(progress: Progress | None, name: str) -> Progress | None:
    if progress is None:
        return None
    return lambda stage, info: progress(f"{name}: {stage}", info)


def _problems(target: TargetCheck) -> list[Problem]:
    """The problems of a target for code scanning: its warnings and errors and, when it failed without an
    error result, its `exporter.runner.failure_diagnostic`."""
    result, ctx = target.result, target.result.context
    diagnostics = [d for d in ctx.diagnostics if d.level >= Level.WARNING] if ctx is not None else []
    if not result.ok and not any(d.level == Level.ERROR for d in diagnostics):
        diagnostics.append(failure_diagnostic(result, target.name))
    return [Problem(d, target.definition) for d in diagnostics]


def _category(paths: Sequence[str], root: str) -> str:
    """The paths checked, relative to the root ("root" for the root itself), comma-separated."""
    names = [relative_path(os.path.realpath(p), root) for p in paths]
    return ",".join("root" if name == "." else name for name in names)
