"""The SARIF log of an export check, as GitHub code scanning takes it.

One run for every target checked: URIs relative to the repository's root (``SRCROOT``), results located
and fingerprinted as in every log of a target (`exporter.diagnostics.sarif.to_results`: one without a
source line is at its target's definition), ``baselineState`` against a previous log, and GitHub's
upload limits kept, with a note when something is left out.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Iterable, Sequence
from typing import Any

import sarif_om as sarif

from exporter.diagnostics.rules import ALL_RULES
from exporter.diagnostics.sarif import (
    FINGERPRINT,
    SARIF_SCHEMA,
    SARIF_VERSION,
    Problem,
    rule_indexes,
    timestamp,
    to_json_dict,
    to_results,
    tool,
    uri_base_ids,
)

TARGETS_PROPERTY = "onnxlens.targets"  # the run property: each target checked and its outcome
BASELINE_STATES = ("new", "unchanged", "updated", "absent")


@dataclasses.dataclass(frozen=True)
class Limits:
    """What GitHub code scanning accepts in one upload (docs.github.com, "SARIF results exceed limit")."""

    results: int = 25_000  # per run
    locations: int = 1_000  # per result (locations, and relatedLocations too)
    gzip_bytes: int = 10 * 1000 * 1000  # the gzip-compressed file


GITHUB_LIMITS = Limits()


def check_log(
    problems: Sequence[Problem],
    root: str,
    category: str,
    targets: list[dict[str, Any]],
    *,
    baseline: dict[str, Any] | None = None,
    limits: Limits = GITHUB_LIMITS,
) -> dict[str, Any]:
    """The check's SARIF log (JSON): one run with the results of every target, `targets` (name, file,
    outcome of each) in its properties, ``automationDetails.id`` ``onnxlens/<category>/``; with a `baseline`
    log, each result's ``baselineState`` and the baseline's results no longer found (``absent``)."""
    index = rule_indexes(ALL_RULES)
    run = sarif.Run(
        tool=tool(ALL_RULES),
        original_uri_base_ids=uri_base_ids(root),
        automation_details=sarif.RunAutomationDetails(id=f"onnxlens/{category}/"),
        results=to_results(problems, root, index),
        invocations=[sarif.Invocation(execution_successful=True, end_time_utc=timestamp())],
        column_kind="unicodeCodePoints",
        properties=sarif.PropertyBag(),
    )
    log = to_json_dict(sarif.SarifLog(version=SARIF_VERSION, schema_uri=SARIF_SCHEMA, runs=[run]))
    run_json = log["runs"][0]
    run_json["properties"] = {TARGETS_PROPERTY: targets}
    if baseline is not None:
        run_json["results"] = compare(run_json["results"], baseline, index)
    notes = fit(log, limits)
    if notes:
        run_json["invocations"][0]["toolExecutionNotifications"] = [
            {"message": {"text": note}, "level": "warning"} for note in notes
        ]
    return log


def compare(results: list[dict[str, Any]], baseline: dict[str, Any], index: dict[str, int]) -> list[dict[str, Any]]:
    """`results` with their ``baselineState`` against the `baseline` log's results (matched by partial
    fingerprint): new, unchanged, updated (its level changed), then the baseline's results not found
    again, ``absent``."""
    before = {
        r.get("partialFingerprints", {}).get(FINGERPRINT): r
        for run in baseline.get("runs", [])
        for r in run.get("results", [])
        if r.get("baselineState") != "absent"
    }
    out = []
    for result in results:
        old = before.pop(result["partialFingerprints"][FINGERPRINT], None)
        state = "new" if old is None else ("unchanged" if old.get("level") == result.get("level") else "updated")
        out.append({**result, "baselineState": state})
    for old in before.values():
        if old.get("ruleId") in index:  # a rule that no longer exists cannot be listed against this run's rules
            out.append({**old, "ruleIndex": index[old["ruleId"]], "baselineState": "absent"})
    return out


_SEVERITY = {"error": 0, "warning": 1, "note": 2, "none": 3}


def fit(log: dict[str, Any], limits: Limits) -> list[str]:
    """Cut `log` (one run) to `limits`, in place: locations beyond the limit per result, results beyond
    the limit per run (the least severe go first), then, while the gzip-compressed log is too large, the
    results' stacks and related locations, then results. A note for each cut."""
    run, notes = log["runs"][0], []
    for key in ("locations", "relatedLocations"):
        cut = [r for r in run["results"] if len(r.get(key, ())) > limits.locations]
        for result in cut:
            result[key] = result[key][: limits.locations]
        if cut:
            notes.append(
                f"{len(cut)} results had more than {limits.locations} {key}; the first {limits.locations} "
                "of each are kept (GitHub's limit per result)."
            )
    total = len(run["results"])
    if total > limits.results:
        run["results"] = _by_severity(run["results"])[: limits.results]
        notes.append(
            f"{total - limits.results} of {total} results left out, the least severe first "
            f"(GitHub's limit of {limits.results} results per run)."
        )
    if _gzip_size(log) > limits.gzip_bytes:
        for result in run["results"]:
            result.pop("stacks", None)
            result.pop("relatedLocations", None)
        notes.append(
            "The results' stacks and related locations are left out (GitHub's limit of "
            f"{limits.gzip_bytes} bytes gzip-compressed)."
        )
    total = keep = len(run["results"])
    while keep and _gzip_size(log) > limits.gzip_bytes:
        keep = keep * 9 // 10
        run["results"] = _by_severity(run["results"])[:keep]
    if keep < total:
        notes.append(
            f"{total - keep} of {total} results left out, the least severe first (GitHub's limit of "
            f"{limits.gzip_bytes} bytes gzip-compressed)."
        )
    return notes


def _by_severity(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(results, key=lambda r: _SEVERITY.get(r.get("level", "warning"), 1))


def _gzip_size(log: dict[str, Any]) -> int:
    return len(gzip.compress(dumps(log).encode()))


def dumps(log: dict[str, Any]) -> str:
    """The log's text as it is written."""
    return json.dumps(log, indent=1)


def write(log: dict[str, Any], path: str) -> None:
    from exporter.output.files import atomic_path

    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(dumps(log))
