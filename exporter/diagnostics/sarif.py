"""SARIF 2.1.0 logs of an export, built with `sarif-om` objects.

Artifact URIs are relative to the ``SRCROOT`` base id, whose ``originalUriBaseIds`` entry is the
absolute ``file://`` URI of a root directory: the repository's root (git's top level) for an export
target's log and an export check's (`exporter.diagnostics.code_scanning`); for an export without a
target (`ExportOutput.save_diagnostics`), the directory that holds the user's files. Results are in
report order; rules in a fixed order.

One rule (`to_results`) locates and fingerprints the results of every log, as GitHub code scanning
takes them: a result is at the innermost frame of its stack in the root, else at its export target's
definition (marked `Prop.AT_TARGET`: the editor places those itself); its `partialFingerprints` name the
problem (rule, target, operator or input dimension, the code of its line), not its line number.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import linecache
import os
import pathlib
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attr
import sarif_om as sarif

from exporter.constants import OUTCOME_PROPERTY, Prop
from exporter.diagnostics.locations import Frame
from exporter.diagnostics.rules import Level, Rule
from exporter.outcome import Outcome, decide
from exporter.output.files import atomic_path
from exporter.targets import DEFINED_AT_ATTRIBUTE

if TYPE_CHECKING:
    from exporter.diagnostics.context import Diagnostic, DiagnosticContext

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "SRCROOT"
TOOL_NAME = "onnxlens"
TOOL_URI = "https://github.com/onnxlens/onnxlens"
FINGERPRINT = "onnxlensProblem/v1"  # the partialFingerprints key
TARGET_PROPERTY = "exportTarget"  # a result's property: its target, "<path relative to the root>:<name>"


@dataclasses.dataclass(frozen=True)
class Problem:
    """A diagnostic and the definition of the export target it belongs to (the frame of its first
    decorator's line, named as the target's function), where it is when it has no source line in the root."""

    diagnostic: Diagnostic
    definition: Frame | None = None  # None: an export without a target (no fingerprint, no stand-in location)


def target_definition(fn: Any) -> Frame | None:
    """The definition of the export target `fn`: its file, its first decorator's line, its name (a model
    folder's target: the folder's ``config.json``)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    path, line = getattr(fn, DEFINED_AT_ATTRIBUTE, None) or (code.co_filename, code.co_firstlineno)
    return Frame(path, line, fn.__name__, linecache.getline(path, line))


def repository_root(cwd: str | None = None) -> str:
    """The git repository's top-level directory holding `cwd` (default: the working directory): the
    nearest directory with a ``.git`` entry (a worktree's or submodule's is a file), else `cwd`. Found
    on disk, as git finds it, without running git for every log written."""
    cwd = os.path.realpath(cwd or os.getcwd())
    directory = cwd
    while not os.path.exists(os.path.join(directory, ".git")):
        parent = os.path.dirname(directory)
        if parent == directory:
            return cwd
        directory = parent
    return directory


def relative_path(path: str, root: str) -> str:
    """`path` relative to `root` (``/``-separated) when it is under it, else `path`."""
    if not _within(path, root):
        return path
    return pathlib.PurePath(os.path.relpath(os.path.realpath(path), os.path.realpath(root))).as_posix()


def target_name(definition: Frame, root: str) -> str:
    """A target as code scanning names it: ``<path relative to the root>:<name>``."""
    return f"{relative_path(definition.path, root)}:{definition.function}"


def to_sarif_log(
    ctx: DiagnosticContext, outcome: Outcome | None = None, definition: Frame | None = None
) -> sarif.SarifLog:
    """The log of the export `ctx` recorded; its run's properties hold the export's `outcome` (by default
    decided from the results alone, `exporter.outcome.decide`). With the export target's `definition`,
    URIs are relative to the repository holding it, results located and fingerprinted (`to_results`)
    and ``automationDetails.id`` is ``onnxlens/<target>/``."""
    outcome = outcome or decide(ctx.diagnostics)
    if definition is not None:
        root = repository_root(os.path.dirname(os.path.abspath(definition.path)))
    else:
        root = _source_root(ctx.diagnostics)
    index = rule_indexes(ctx.rules)
    category = target_name(definition, root) if definition is not None else None
    run = sarif.Run(
        tool=tool(ctx.rules),
        original_uri_base_ids=uri_base_ids(root),
        automation_details=sarif.RunAutomationDetails(id=f"onnxlens/{category}/") if category else None,
        results=to_results([Problem(d, definition) for d in ctx.diagnostics], root, index),
        invocations=[
            sarif.Invocation(
                execution_successful=not ctx.errors(),
                end_time_utc=timestamp(),
                properties=_bag(stageSeconds={k: round(v, 4) for k, v in ctx.timings.items()}),
                tool_execution_notifications=_notifications(ctx) or None,
            )
        ],
        column_kind="unicodeCodePoints",
        properties=_bag(**{OUTCOME_PROPERTY: outcome.to_json()}),
    )
    return sarif.SarifLog(version=SARIF_VERSION, schema_uri=SARIF_SCHEMA, runs=[run])


def tool(rules: tuple[Rule, ...]) -> sarif.Tool:
    """onnxlens as the run's tool, with `rules` in their fixed order."""
    driver = sarif.ToolComponent(
        name=TOOL_NAME, information_uri=TOOL_URI, version=_version(), rules=[_descriptor(rule) for rule in rules]
    )
    return sarif.Tool(driver=driver)


def rule_indexes(rules: tuple[Rule, ...]) -> dict[str, int]:
    """Each rule id's index in the tool's rules (a result's ``ruleIndex``)."""
    return {rule.id: i for i, rule in enumerate(rules)}


def uri_base_ids(root: str) -> dict[str, sarif.ArtifactLocation]:
    """``originalUriBaseIds``: `SRCROOT` is `root`'s absolute ``file://`` URI (ending in ``/``)."""
    uri = pathlib.Path(root).as_uri()
    return {SRCROOT: sarif.ArtifactLocation(uri=uri if uri.endswith("/") else uri + "/")}


def timestamp() -> str:
    """Now, as SARIF writes times (UTC)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _notifications(ctx: DiagnosticContext) -> list[sarif.Notification]:
    """torch's log records and the warnings of the export (at DEBUG verbosity only)."""
    if not ctx.wants(Level.NONE):
        return []
    return [
        sarif.Notification(
            message=sarif.Message(text=record.message),
            level=_level(next(level for level in reversed(Level) if record.level >= level or level == Level.NONE)),
            properties=_bag(source=record.source),
        )
        for record in ctx.logs
    ]


# Fields written even when they hold their default, so readers need not know SARIF's defaults.
_ALWAYS_WRITTEN = {"version", "level", "kind"}


def to_json_dict(obj: Any) -> Any:
    """A `sarif-om` object as SARIF JSON (schema property names, unset fields left out)."""
    if attr.has(type(obj)):
        out: dict[str, Any] = {}
        names = set()
        for field in attr.fields(type(obj)):
            names.add(field.name)
            value = getattr(obj, field.name)
            default = field.default.factory() if isinstance(field.default, attr.Factory) else field.default
            if value is None or (value == default and field.name not in _ALWAYS_WRITTEN):
                continue
            out[field.metadata.get("schema_property_name", field.name)] = to_json_dict(value)
        if isinstance(obj, sarif.PropertyBag):  # free-form properties ride along as attributes
            out.update({k: to_json_dict(v) for k, v in vars(obj).items() if k not in names})
        return out
    if isinstance(obj, dict):
        return {k: to_json_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json_dict(v) for v in obj]
    return obj


def write_sarif(
    ctx: DiagnosticContext, destination: str, outcome: Outcome | None = None, definition: Frame | None = None
) -> None:
    """Write `to_sarif_log` to `destination`."""
    with atomic_path(destination) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(to_json_dict(to_sarif_log(ctx, outcome, definition)), f, indent=1)


def _descriptor(rule: Rule) -> sarif.ReportingDescriptor:
    return sarif.ReportingDescriptor(
        id=rule.id,
        name=rule.name,
        short_description=sarif.MultiformatMessageString(text=rule.short_description),
        full_description=sarif.MultiformatMessageString(text=rule.full_description),
        help=sarif.MultiformatMessageString(text=rule.help, markdown=rule.help_markdown),
        help_uri=rule.help_uri,
        default_configuration=sarif.ReportingConfiguration(level=_level(rule.default_level)),
        properties=_bag(
            **{"tags": list(rule.all_tags), "precision": rule.precision, "problem.severity": rule.problem_severity}
        ),
    )


def to_results(problems: Sequence[Problem], root: str, rule_index: dict[str, int]) -> list[sarif.Result]:
    """The results of `problems`, their URIs relative to `root` when under it. Each is located at the
    innermost frame of its stack under `root`, else at its target's definition (``Prop.AT_TARGET``), else
    (no target) at its own location, if any. With a target, its ``exportTarget`` property and
    `partialFingerprints`: a hash of the rule, the target, the subject (the operator, or the input
    dimension) and the code of the result's line (not its number), then ``:n`` counting the problems
    with the same hash in report order, so lines inserted or removed elsewhere leave it as it was."""
    seen: Counter[str] = Counter()
    results = []
    for problem in problems:
        d, definition = problem.diagnostic, problem.definition
        primary = next((f for f in d.stack if is_under(f, root)), None)
        at_target = primary is None and definition is not None
        result = _result(d, rule_index[d.rule.id], root, primary or definition or d.location)
        if definition is not None:
            target = target_name(definition, root)
            identity = "\0".join([d.rule.id, target, _subject(d.properties), _code(primary or definition)])
            digest = hashlib.sha256(identity.encode()).hexdigest()[:32]
            seen[digest] += 1
            result.partial_fingerprints = {FINGERPRINT: f"{digest}:{seen[digest]}"}
            result.properties = result.properties or sarif.PropertyBag()
            setattr(result.properties, TARGET_PROPERTY, target)
            if at_target:
                setattr(result.properties, Prop.AT_TARGET, True)
        results.append(result)
    return results


def _subject(properties: dict[str, Any]) -> str:
    """What a result is about besides its line: the FX operator, or the input dimension."""
    if Prop.FX_TARGET in properties:
        return str(properties[Prop.FX_TARGET])
    return f"{properties.get(Prop.INPUT, '')}.{properties.get(Prop.DIM, '')}"


def _code(frame: Frame) -> str:
    """The code of a frame's line, whitespace collapsed (the snippet, else the file's line)."""
    text = frame.snippet or linecache.getline(frame.path, frame.line)
    return " ".join(text.split())


def _result(d: Diagnostic, rule_index: int, root: str, primary: Frame | None) -> sarif.Result:
    """The result of `d` located at `primary` (none: no location)."""
    result = sarif.Result(
        message=sarif.Message(text=d.message),
        rule_id=d.rule.id,
        rule_index=rule_index,
        level=_level(d.level),
        kind="informational" if d.level == Level.NONE else ("pass" if d.level == Level.NOTE else "fail"),
    )
    if primary is not None:
        result.locations = [_location(primary, root)]
    if len(d.stack) > 0:
        result.stacks = [
            sarif.Stack(
                message=sarif.Message(text="Python stack when the operator was called (innermost user frame first)"),
                frames=[sarif.StackFrame(location=_location(f, root, message=True)) for f in d.stack],
            )
        ]
        if len(d.stack) > 1:
            result.related_locations = [_location(f, root, message=True, id=i) for i, f in enumerate(d.stack[1:], 1)]
    properties = dict(d.properties)
    if d.exception:
        properties[Prop.EXCEPTION] = d.exception
    if properties:
        result.properties = _bag(**properties)
    return result


def _bag(**properties: Any) -> sarif.PropertyBag:
    """A property bag holding free-form properties (set as attributes, see `to_json_dict`)."""
    bag = sarif.PropertyBag()
    for key, value in properties.items():
        setattr(bag, key, value)
    return bag


def is_under(frame: Frame, root: str) -> bool:
    """Whether `frame` is in a user file under the directory `root` (its URI is then relative to it)."""
    return frame.is_user_code and _within(frame.path, root)


def _within(path: str, root: str) -> bool:
    """Whether `path` is `root` or under it (symbolic links resolved)."""
    root = os.path.realpath(root)
    return os.path.commonpath([os.path.realpath(path), root]) == root


def _location(frame: Frame, root: str, *, message: bool = False, id: int | None = None) -> sarif.Location:
    path = os.path.abspath(frame.path)
    if is_under(frame, root):
        artifact = sarif.ArtifactLocation(uri=relative_path(path, root), uri_base_id=SRCROOT)
    else:
        artifact = sarif.ArtifactLocation(uri=pathlib.Path(path).as_uri())
    region = sarif.Region(start_line=frame.line)
    if frame.snippet:
        region.snippet = sarif.ArtifactContent(text=frame.snippet)
    location = sarif.Location(physical_location=sarif.PhysicalLocation(artifact_location=artifact, region=region))
    if message:
        location.message = sarif.Message(text=f"{frame.function} ({os.path.basename(frame.path)}:{frame.line})")
    if id is not None:
        location.id = id
    return location


def _source_root(diagnostics: list[Diagnostic]) -> str:
    """The directory holding every user file the results point into (cwd if none)."""
    dirs = {os.path.dirname(os.path.abspath(f.path)) for d in diagnostics for f in d.stack if f.is_user_code}
    return os.path.commonpath(sorted(dirs)) if dirs else os.getcwd()


def _level(level: Level) -> str:
    return level.name.lower()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("onnxlens")
    except PackageNotFoundError:
        return "0+unknown"
