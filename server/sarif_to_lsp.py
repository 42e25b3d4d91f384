"""SARIF results → LSP diagnostics, by the file each result points into."""

from __future__ import annotations

import pathlib
import urllib.parse
from typing import Any

from lsprotocol import types

SOURCE = "onnxlens"
CAPTURE_RULE = "FXE0017"  # graph capture: one error, plus a note per strategy tried
SUMMARY_RULE, DETAIL_RULE = "FXE0012", "FXE0011"  # unsupported operators: all of them / one each
DIMENSION_RULE = "FXE0020"  # a dimension asked to be dynamic came out static

_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "note": types.DiagnosticSeverity.Information,
}


def artifact_path(location: dict[str, Any], run: dict[str, Any]) -> str | None:
    """The absolute file path of a SARIF location (resolving ``uriBaseId``)."""
    artifact = location.get("physicalLocation", {}).get("artifactLocation", {})
    uri = artifact.get("uri")
    if not uri:
        return None
    base_id = artifact.get("uriBaseId")
    if base_id:
        base = run.get("originalUriBaseIds", {}).get(base_id, {}).get("uri", "")
        uri = urllib.parse.urljoin(base, uri)
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme not in ("file", ""):
        return None
    return str(pathlib.Path(urllib.parse.unquote(parsed.path)))


def line_of(location: dict[str, Any]) -> int:
    """0-based line of a SARIF location."""
    return location.get("physicalLocation", {}).get("region", {}).get("startLine", 1) - 1


def to_range(line: int, text_line: str | None = None) -> types.Range:
    """The range of a whole source line (from its first non-blank character)."""
    start = len(text_line) - len(text_line.lstrip()) if text_line else 0
    end = len(text_line.rstrip("\r\n")) if text_line else 0
    return types.Range(types.Position(line, start), types.Position(line, max(end, start)))


def failure(message: str, code: str, line: int, text_line: str | None) -> types.Diagnostic:
    """An error without a SARIF result (a crash, a timeout, a bad target) on a whole source line."""
    return types.Diagnostic(range=to_range(line, text_line), message=message, severity=types.DiagnosticSeverity.Error, source=SOURCE, code=code)


def diagnostics_by_path(log: dict[str, Any], read_line=None, place=None, data: dict[str, Any] | None = None) -> dict[str, list[types.Diagnostic]]:
    """Problems for every file the log's results point into, one per cause.

    Left out (they stay in the log and the results view): results at level none (the DEBUG trail),
    op-level-debug line summaries (shown inline instead), the unsupported-operator summary (FXE0012)
    when each operator has its own FXE0011 problem, and the capture strategies' attempts, which
    become related information of the capture error. `read_line(path, line)` gives a line's text
    for a precise range; `place(result)` a location for a result without one (None: left out);
    `data` is added to each problem's data (e.g. the target that exported).
    """
    found: dict[str, list[types.Diagnostic]] = {}
    for run in log.get("runs", []):
        rules = {r["id"]: r for r in run.get("tool", {}).get("driver", {}).get("rules", [])}
        results = [r for r in run.get("results", []) if r.get("level", "warning") in _SEVERITY]
        results = [r for r in (_placed(r, place) for r in results) if r.get("locations")]
        attempts = [r for r in results if r["ruleId"] == CAPTURE_RULE and "strategy" in r.get("properties", {})]
        rule_ids = {r["ruleId"] for r in results}
        for result in results:
            if result in attempts or result.get("properties", {}).get("aggregate") == "sourceLine":
                continue
            if result["ruleId"] == SUMMARY_RULE and DETAIL_RULE in rule_ids:
                continue
            path = artifact_path(result["locations"][0], run)
            if path is None:
                continue
            line = line_of(result["locations"][0])
            rule = rules.get(result["ruleId"], {})
            related = _related(result, run, read_line)
            reproducer = result.get("properties", {}).get("reproducer")
            if reproducer:  # FXE0021: the first divergence's reproducer
                related = (related or []) + [_reproducer(reproducer)]
            if result["ruleId"] == CAPTURE_RULE:
                related = (related or []) + [_attempt(a, run, read_line) for a in attempts if artifact_path(a["locations"][0], run)] or None
            found.setdefault(path, []).append(
                types.Diagnostic(
                    range=to_range(line, read_line(path, line) if read_line else None),
                    message=result["message"]["text"],
                    severity=_SEVERITY[result.get("level", "warning")],
                    code=result["ruleId"],
                    code_description=types.CodeDescription(href=rule["helpUri"]) if rule.get("helpUri") else None,
                    source=SOURCE,
                    related_information=related,
                    data={"ruleId": result["ruleId"], "properties": _small(result.get("properties", {})), **(data or {})},
                )
            )
    return found


def _placed(result: dict[str, Any], place) -> dict[str, Any]:
    """`result`, located where `place` says if it has no location."""
    if result.get("locations") or place is None or (where := place(result)) is None:
        return result
    path, line = where
    location = {"physicalLocation": {"artifactLocation": {"uri": pathlib.Path(path).as_uri()}, "region": {"startLine": line + 1}}}
    return {**result, "locations": [location]}


def _attempt(result: dict[str, Any], run: dict[str, Any], read_line) -> types.DiagnosticRelatedInformation:
    """A capture strategy's failure, as related information of the capture error."""
    location = result["locations"][0]
    path, line = artifact_path(location, run), line_of(location)
    return types.DiagnosticRelatedInformation(
        location=types.Location(pathlib.Path(path).as_uri(), to_range(line, read_line(path, line) if read_line else None)),
        message=result["message"]["text"],
    )


def _reproducer(directory: str) -> types.DiagnosticRelatedInformation:
    """A verification's reproducer (its run.py), as related information of the divergence."""
    return types.DiagnosticRelatedInformation(
        location=types.Location((pathlib.Path(directory) / "run.py").as_uri(), to_range(1)),
        message="reproducer of this divergence: python run.py exits 1 while onnxruntime differs from PyTorch",
    )


def _related(result: dict[str, Any], run: dict[str, Any], read_line) -> list[types.DiagnosticRelatedInformation] | None:
    related = []
    for location in result.get("relatedLocations", []):
        path = artifact_path(location, run)
        if path is None:
            continue
        line = line_of(location)
        related.append(
            types.DiagnosticRelatedInformation(
                location=types.Location(pathlib.Path(path).as_uri(), to_range(line, read_line(path, line) if read_line else None)),
                message=location.get("message", {}).get("text", "called from here"),
            )
        )
    module = result.get("properties", {}).get("modulePath")
    if module and related:
        related[0].message += f" — in module {module}"
    return related or None


def _small(properties: dict[str, Any]) -> dict[str, Any]:
    """The properties a code action needs (not the large dumps)."""
    return {k: v for k, v in properties.items() if k in _FIX_PROPERTIES}


_FIX_PROPERTIES = (
    "fxTarget", "fxNode", "modulePath", "onnxOpTypes", "schema", "generatedFunction",  # FXE0011
    "input", "dim", "size", "argument", "dimName", "suggestedFixes", "dynamicShapes",  # FXE0020
)
