"""SARIF results (a parsed `sarif_log.SarifLog`) → LSP diagnostics, by the document each result points into
(a file's path, or a notebook cell's URI once `notebooks.locate_log` moved the log's locations there)."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

from lsprotocol import types

from exporter.constants import Prop
from exporter.diagnostics import rules
from exporter.diagnostics.code import code_of
from onnxlens_server.documents import uri_of
from onnxlens_server.sarif_log import Location, Result, SarifLog

SOURCE = "onnxlens"
LineText = Callable[[str, int], "str | None"]  # (path, 0-based line) -> the line's text
Place = Callable[[Result], "tuple[str, int] | None"]  # where a result without a location goes

_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "note": types.DiagnosticSeverity.Information,
}
_FIX_PROPERTIES = (  # the properties a code action needs (not the large dumps)
    Prop.FX_TARGET,
    Prop.FX_NODE,
    Prop.MODULE_PATH,
    Prop.ONNX_OP_TYPES,
    Prop.SCHEMA,
    Prop.GENERATED_FUNCTION,  # FXE0011
    Prop.INPUT,
    Prop.DIM,
    Prop.SIZE,
    Prop.ARGUMENT,
    Prop.DIM_NAME,
    Prop.SUGGESTED_FIXES,
    Prop.DYNAMIC_SHAPES,  # FXE0020
)


def to_range(line: int, text_line: str | None = None) -> types.Range:
    """The range of a source line's code: from its first non-blank character to the end of its code
    (its comment left out)."""
    start = len(text_line) - len(text_line.lstrip()) if text_line else 0
    end = len(code_of(text_line)) if text_line else 0
    return types.Range(types.Position(line, start), types.Position(line, max(end, start)))


def failure(message: str, code: str, line: int, text_line: str | None) -> types.Diagnostic:
    """An error without a SARIF result (a crash, a timeout, a bad target) on a whole source line."""
    return types.Diagnostic(
        range=to_range(line, text_line),
        message=message,
        severity=types.DiagnosticSeverity.Error,
        source=SOURCE,
        code=code,
    )


def diagnostics_by_path(
    log: SarifLog, read_line: LineText | None = None, place: Place | None = None, data: dict[str, Any] | None = None
) -> dict[str, list[types.Diagnostic]]:
    """Problems for every file the log's results point into, one per cause.

    Left out (they stay in the log and the results view): results at level none (the DEBUG trail),
    op-level-debug line summaries (shown inline instead), the unsupported-operator summary (FXE0012)
    when each operator has its own FXE0011 problem, and the capture strategies' attempts, which
    become related information of the capture error. `read_line(path, line)` gives a line's text
    for a precise range; `place(result)` a location for a result without one (None: left out);
    `data` is added to each problem's data (e.g. the target that exported).
    """

    def range_of(where: Location) -> types.Range:
        return to_range(where.line, read_line(where.path, where.line) if read_line else None)

    results = [_placed(r, place) for r in log.results if r.level in _SEVERITY]
    results = [r for r in results if r.location is not None]
    attempts = [r for r in results if r.rule_id == rules.GRAPH_CAPTURE.id and Prop.STRATEGY in r.properties]
    rule_ids = {r.rule_id for r in results}
    found: dict[str, list[types.Diagnostic]] = {}
    for result in results:
        if result in attempts or result.is_line_summary:
            continue
        if result.rule_id == rules.UNSUPPORTED_FX_NODE_ANALYSIS.id and rules.NO_SYMBOLIC_FUNCTION.id in rule_ids:
            continue
        related = [
            types.DiagnosticRelatedInformation(_lsp_location(r, range_of(r)), r.message or "called from here")
            for r in result.related
        ]
        module = result.properties.get(Prop.MODULE_PATH)
        if module and related:
            related[0].message += f" — in module {module}"
        if reproducer := result.properties.get(Prop.REPRODUCER):  # FXE0021: the first divergence's reproducer
            related.append(_reproducer(reproducer))
        if result.rule_id == rules.GRAPH_CAPTURE.id:
            related += [
                types.DiagnosticRelatedInformation(_lsp_location(a.location, range_of(a.location)), a.message)
                for a in attempts
            ]
        rule = log.rules.get(result.rule_id)
        found.setdefault(result.location.path, []).append(
            types.Diagnostic(
                range=range_of(result.location),
                message=result.message,
                severity=_SEVERITY[result.level],
                code=result.rule_id,
                code_description=types.CodeDescription(href=rule.help_uri) if rule and rule.help_uri else None,
                source=SOURCE,
                related_information=related or None,
                data={"ruleId": result.rule_id, "properties": _small(result.properties), **(data or {})},
            )
        )
    return found


def _placed(result: Result, place: Place | None) -> Result:
    """`result`, located where `place` says if it has no location."""
    if result.location is not None or place is None or (where := place(result)) is None:
        return result
    return dataclasses.replace(result, location=Location(*where))


def _lsp_location(where: Location, at: types.Range) -> types.Location:
    return types.Location(uri_of(where.path), at)  # a path, or a notebook cell's URI (`notebooks.locate_log`)


def _reproducer(directory: str) -> types.DiagnosticRelatedInformation:
    """A verification's reproducer (its run.py), as related information of the divergence."""
    return types.DiagnosticRelatedInformation(
        location=types.Location((pathlib.Path(directory) / "run.py").as_uri(), to_range(1)),
        message="reproducer of this divergence: python run.py exits 1 while onnxruntime differs from PyTorch",
    )


def _small(properties: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in properties.items() if k in _FIX_PROPERTIES}
