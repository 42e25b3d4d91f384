"""A SARIF log of an export, parsed once (when the export's result arrives) into typed results that the
problems (`sarif_to_lsp`), the inline traces (`traces`), the graph's numbers (`graph`) and the extension's
results view (`results_json`) read.

Locations are absolute file paths (``uriBaseId`` resolved) with 0-based lines; results pointing
elsewhere (not ``file:``) have none.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import urllib.parse
from typing import Any

from exporter.constants import SOURCE_LINE, Prop
from exporter.diagnostics import rules

TRACE_TITLES = {  # the rules whose per-line summaries list checked ops, and how their traces are titled
    rules.OP_LEVEL_DEBUGGING.id: "op-level debug",
    rules.ACCURACY_DIVERGENCE.id: "verification in onnxruntime",
}
_SARIF_DEFAULT_LEVEL = "warning"


@dataclasses.dataclass(frozen=True)
class Location:
    path: str
    line: int  # 0-based
    message: str | None = None  # a stack frame's ("forward (net.py:12)")


@dataclasses.dataclass(frozen=True)
class Result:
    rule_id: str
    level: str  # "error", "warning", "note" or "none"
    message: str
    location: Location | None
    related: list[Location]  # the callers (the stack after the innermost frame)
    properties: dict[str, Any]

    @property
    def is_line_summary(self) -> bool:
        """An op-level debug or verification summary of one source line (shown inline, not as a problem)."""
        return self.properties.get(Prop.AGGREGATE) == SOURCE_LINE


@dataclasses.dataclass(frozen=True)
class LineTrace:
    """The ops checked on one source line: a per-line summary of `TRACE_TITLES`' rules."""

    path: str
    line: int  # 0-based
    ops: list[dict[str, Any]]
    op_types: list[str]
    max_abs_error: float
    mismatches: int
    rule_id: str = rules.OP_LEVEL_DEBUGGING.id

    @property
    def title(self) -> str:
        return TRACE_TITLES[self.rule_id]


@dataclasses.dataclass(frozen=True)
class RuleInfo:
    id: str
    name: str
    help_uri: str | None


@dataclasses.dataclass(frozen=True)
class SarifLog:
    path: str
    rules: dict[str, RuleInfo]  # by id
    results: list[Result]  # in the log's order

    @property
    def traces(self) -> list[LineTrace]:
        return [
            LineTrace(
                r.location.path,
                r.location.line,
                r.properties.get(Prop.OPS, []),
                r.properties.get(Prop.ONNX_OP_TYPES, []),
                r.properties.get(Prop.MAX_ABS_ERROR, 0.0),
                r.properties.get(Prop.MISMATCHES, 0),
                r.rule_id,
            )
            for r in self.results
            if r.rule_id in TRACE_TITLES and r.is_line_summary and r.location is not None
        ]


def read(path: str) -> SarifLog | None:
    """The log at `path`; None if it is missing or not JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse(json.load(f), path)
    except (OSError, ValueError):
        return None


def parse(log: dict[str, Any], path: str = "") -> SarifLog:
    """The typed results of a SARIF JSON log (its runs' results, in order)."""
    found_rules: dict[str, RuleInfo] = {}
    results = []
    for run in log.get("runs", []):
        for rule in run.get("tool", {}).get("driver", {}).get("rules", []):
            found_rules[rule["id"]] = RuleInfo(rule["id"], rule.get("name", ""), rule.get("helpUri"))
        bases = {key: value.get("uri", "") for key, value in run.get("originalUriBaseIds", {}).items()}
        for result in run.get("results", []):
            # A result at its target's definition has no source line: the editor places it (or leaves it out).
            at_target = result.get("properties", {}).get(Prop.AT_TARGET)
            locations = [] if at_target else [_location(where, bases) for where in result.get("locations", [])[:1]]
            related = [_location(where, bases) for where in result.get("relatedLocations", [])]
            results.append(
                Result(
                    rule_id=result.get("ruleId", ""),
                    level=result.get("level", _SARIF_DEFAULT_LEVEL),
                    message=result.get("message", {}).get("text", ""),
                    location=locations[0] if locations else None,
                    related=[r for r in related if r is not None],
                    properties=result.get("properties", {}),
                )
            )
    return SarifLog(path, found_rules, results)


def results_json(log: SarifLog) -> list[dict[str, Any]]:
    """The results the extension's results view lists (level none left out): rule id and name, level,
    message and location (``{path, line}``, 0-based line)."""
    return [
        {
            "ruleId": r.rule_id,
            "ruleName": log.rules[r.rule_id].name if r.rule_id in log.rules else "",
            "level": r.level,
            "message": r.message,
            "location": {"path": r.location.path, "line": r.location.line} if r.location else None,
        }
        for r in log.results
        if r.level != "none"
    ]


def _location(location: dict[str, Any], bases: dict[str, str]) -> Location | None:
    """A SARIF location as a file path and 0-based line (None if not in a file)."""
    physical = location.get("physicalLocation", {})
    artifact = physical.get("artifactLocation", {})
    uri = artifact.get("uri")
    if not uri:
        return None
    if artifact.get("uriBaseId"):
        uri = urllib.parse.urljoin(bases.get(artifact["uriBaseId"], ""), uri)
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme not in ("file", ""):
        return None
    path = str(pathlib.Path(urllib.parse.unquote(parsed.path)))
    line = physical.get("region", {}).get("startLine", 1) - 1
    return Location(path, line, location.get("message", {}).get("text"))
