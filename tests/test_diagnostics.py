"""SARIF diagnostics: located at the user's line, schema-valid, verbosity, warnings-as-errors, op-level debug."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import subprocess

import onnxscript
import pytest
import torch
from fixtures import located_models as models
from fixtures.located_models import line_of
from helpers import console_script, validate_sarif
from onnxscript import opset18 as op

import exporter

MODEL_FILE = os.path.realpath(models.__file__)
REPO = pathlib.Path(__file__).resolve().parents[1]


def export_failure(model, *args, **options) -> exporter.ExportOutput:
    with pytest.raises(exporter.OnnxExporterError) as info:
        exporter.dynamo_export(model, *args, export_options=exporter.ExportOptions(**options))
    return info.value.export_output


def results(log: dict, rule_id: str) -> list[dict]:
    return [r for r in log["runs"][0]["results"] if r["ruleId"] == rule_id]


def primary(result: dict) -> tuple[str, int]:
    """(file name, line) of a result's primary location."""
    location = result["locations"][0]["physicalLocation"]
    return location["artifactLocation"]["uri"].rsplit("/", 1)[-1], location["region"]["startLine"]


def save(export_output: exporter.ExportOutput, tmp_path, name="log.sarif") -> dict:
    path = tmp_path / name
    export_output.save_diagnostics(path)
    return validate_sarif(path)


def test_custom_op_two_calls_deep_is_located_at_its_line(tmp_path):
    failed = export_failure(models.HelperCallsCustomOp(), torch.randn(2, 4))
    log = save(failed, tmp_path)
    run = log["runs"][0]
    base = run["originalUriBaseIds"]["SRCROOT"]["uri"]
    # The root holds every user file in the stacks: the model file and this test (the call site).
    assert base == pathlib.Path(__file__).resolve().parent.as_uri() + "/"

    (fxe0011,) = results(log, "FXE0011")
    assert fxe0011["level"] == "error"
    assert primary(fxe0011) == ("located_models.py", line_of("custom-op-call"))
    assert fxe0011["locations"][0]["physicalLocation"]["artifactLocation"]["uriBaseId"] == "SRCROOT"
    assert "scaled_tanh(x, 2.0)" in fxe0011["locations"][0]["physicalLocation"]["region"]["snippet"]["text"]
    frames = [f["location"]["physicalLocation"]["region"]["startLine"] for f in fxe0011["stacks"][0]["frames"]]
    assert frames[:3] == [line_of("custom-op-call"), line_of("helper-call"), line_of("forward-call")]
    related = [r["physicalLocation"]["region"]["startLine"] for r in fxe0011["relatedLocations"]]
    assert related[:2] == [line_of("helper-call"), line_of("forward-call")]
    assert fxe0011["properties"]["fxTarget"] == "onnxlens_test.scaled_tanh.default"
    assert fxe0011["properties"]["inputShapes"] == [["2", "4"]]

    (fxe0012,) = results(log, "FXE0012")
    assert fxe0012["properties"]["unsupportedTargets"] == ["onnxlens_test.scaled_tanh.default"]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert rule_ids == sorted(rule_ids)
    assert all(r["helpUri"] and r["help"]["text"] for r in run["tool"]["driver"]["rules"])
    assert run["invocations"][0]["executionSuccessful"] is False


def test_two_unsupported_ops_are_reported_in_one_export(tmp_path):
    failed = export_failure(models.TwoUnsupportedOps(), torch.randn(3))
    log = save(failed, tmp_path)
    located = sorted(primary(r)[1] for r in results(log, "FXE0011"))
    assert located == [line_of("first-unsupported"), line_of("second-unsupported")]
    (fxe0012,) = results(log, "FXE0012")
    assert fxe0012["properties"]["unsupportedTargets"] == [
        "onnxlens_test.scaled_tanh.default",
        "onnxlens_test.shifted_sigmoid.default",
    ]


def test_capture_failure_is_located_at_the_offending_line(tmp_path):
    failed = export_failure(models.DataDependentBranch(), torch.randn(3))
    log = save(failed, tmp_path)
    errors = [r for r in results(log, "FXE0017") if r["level"] == "error"]
    assert len(errors) == 1
    assert primary(errors[0]) == ("located_models.py", line_of("capture-failure"))
    line = "if x.sum() > 0:"  # the line's code, without its comment
    assert errors[0]["message"]["text"] == (
        f"`{line}` branches on a tensor's values, which an exported graph cannot follow: the graph is one fixed "
        "sequence of operations for every input. Use torch.cond(pred, true_fn, false_fn, operands) for a branch the "
        "graph must keep, torch._check(...) to state a condition that always holds, or decide it outside forward()."
    )
    properties = errors[0]["properties"]
    assert properties["cause"] == "data-dependent-branch" and properties["fix"].startswith("Use torch.cond(")
    assert properties["torchMessage"].startswith(
        "GuardOnDataDependentSymNode: Could not guard on data-dependent expression"
    )
    attempts = [r for r in results(log, "FXE0017") if r["level"] == "note"]
    assert {r["properties"]["strategy"] for r in attempts} == {
        "torch.export(strict=False)",
        "torch.export(strict=True, TorchDynamo)",
    }


def test_a_model_that_pytorch_cannot_run_is_told_so_at_its_line(tmp_path):
    model, x = models.FailsInPyTorch(), torch.randn(4, 5)
    with pytest.raises(TypeError) as eager:  # PyTorch's own verdict, on copies
        models.FailsInPyTorch()(x.clone())
    statistics, before = model.norm.running_mean.clone(), x.clone()
    failed = export_failure(model, x)
    assert torch.equal(model.norm.running_mean, statistics) and model.norm.num_batches_tracked.item() == 0
    assert torch.equal(x, before)  # neither the model's state nor the example changed
    log = save(failed, tmp_path)
    (error,) = [r for r in results(log, "FXE0017") if r["level"] == "error"]
    assert primary(error) == ("located_models.py", line_of("fails-in-pytorch"))
    assert error["message"]["text"] == (
        f"The model raises TypeError when PyTorch runs it on the example inputs, before any export: {eager.value}. "
        "Fix the model or its example inputs so that PyTorch runs it, then export again."
    )
    assert error["properties"]["cause"] == "eager-failure"
    assert str(eager.value) in failed.diagnostic_context.errors()[0].exception  # PyTorch's whole error, with its trace


def test_info_verbosity_has_no_per_node_trail_and_debug_adds_it(tmp_path):
    model, x = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), torch.randn(2, 4)
    info = exporter.dynamo_export(model, x)
    assert all(d.level >= logging.INFO for d in info.diagnostic_context.diagnostics)
    log = save(info, tmp_path, "info.sarif")
    assert not [r for r in log["runs"][0]["results"] if r["level"] == "none"]

    debug = exporter.dynamo_export(
        model,
        x,
        export_options=exporter.ExportOptions(
            diagnostic_options=exporter.DiagnosticOptions(verbosity_level=logging.DEBUG)
        ),
    )
    log = save(debug, tmp_path, "debug.sarif")
    nodes = results(log, "FXE0008")
    assert [r["properties"]["fxTarget"] for r in nodes] == ["aten.linear.default", "aten.relu.default"]
    assert nodes[0]["properties"]["onnxOpTypes"] == ["Gemm"]
    assert nodes[0]["properties"]["outputShapes"] == [["2", "4"]]
    (graph,) = results(log, "FXE0007")
    assert "torch.ops.aten.linear.default" in graph["properties"]["fxGraph"]
    assert any("Gemm" in r["properties"].get("onnxGraph", "") for r in results(log, "FXE0019"))


def test_sarif_is_deterministic_apart_from_timestamps(tmp_path):
    logs, model = [], models.IndexOps()
    for i in range(2):
        export_output = exporter.dynamo_export(
            model,
            torch.tensor([[1, 2, 3]]),
            torch.tensor([0, 2]),
            export_options=exporter.ExportOptions(diagnostic_options=exporter.DiagnosticOptions(logging.DEBUG)),
        )
        log = save(export_output, tmp_path, f"{i}.sarif")
        del log["runs"][0]["invocations"]
        logs.append(json.dumps(log, sort_keys=True))
    assert logs[0] == logs[1]


def test_save_diagnostics_requires_sarif_extension_and_writes_nothing_unasked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    failed = export_failure(models.TwoUnsupportedOps(), torch.randn(3))
    assert list(tmp_path.iterdir()) == []  # nothing in the working directory unasked
    with pytest.raises(ValueError, match=r"must end in '\.sarif'"):
        failed.save_diagnostics(tmp_path / "log.json")


custom = onnxscript.values.Opset("onnxlens.test.wrong", 1)


@onnxscript.script(custom)
def wrong_relu(x):
    return op.Abs(x)  # deliberately not ReLU


def _index_inputs():
    return torch.tensor([[3, 7, 49, 0], [5, 5, 1, 2]]), torch.tensor([3, 0, 1])


def test_op_level_debug_flags_exactly_the_wrong_node(tmp_path):
    registry = exporter.OnnxRegistry()
    registry.register_op(wrong_relu, "aten", "relu")
    export_output = exporter.dynamo_export(
        models.IndexOps(),
        *_index_inputs(),
        export_options=exporter.ExportOptions(op_level_debug=True, onnx_registry=registry),
    )
    log = save(export_output, tmp_path)
    checks = results(log, "FXE0013")
    (warning,) = [r for r in checks if r["level"] == "warning"]
    assert primary(warning) == ("located_models.py", line_of("relu"))
    assert warning["properties"]["fxTarget"] == "aten.relu.default"
    assert warning["properties"]["maxAbsError"] > 0.01 and warning["properties"]["ok"] is False

    per_line = {primary(r)[1]: r["properties"] for r in checks if r["properties"].get("aggregate") == "sourceLine"}
    assert per_line[line_of("relu")]["mismatches"] == 1
    for marker, target in [
        ("embedding", "aten.embedding.default"),
        ("index-select", "aten.index_select.default"),
        ("gather", "aten.gather.default"),
    ]:
        ops = {o["fxTarget"]: o for o in per_line[line_of(marker)]["ops"]}
        assert ops[target]["ok"] is True and "skipped" not in ops[target], ops[target]
        assert ops[target]["maxAbsError"] == 0.0  # index ops are checked on the real (valid) indices
    assert all(p["mismatches"] == 0 for line, p in per_line.items() if line != line_of("relu"))


def test_warnings_as_errors_fails_the_export_clearly():
    registry = exporter.OnnxRegistry()
    registry.register_op(wrong_relu, "aten", "relu")
    options = exporter.ExportOptions(
        op_level_debug=True,
        onnx_registry=registry,
        diagnostic_options=exporter.DiagnosticOptions(warnings_as_errors=True),
    )
    with pytest.raises(exporter.OnnxExporterError, match="warnings_as_errors") as info:
        exporter.dynamo_export(models.IndexOps(), *_index_inputs(), export_options=options)
    (error,) = info.value.export_output.diagnostic_context.errors()
    assert error.rule.id == "FXE0013" and error.location.line == line_of("relu")


def test_cli_prints_clickable_results(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import torch, exporter\n"
        "from fixtures.custom_ops import scaled_tanh\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return scaled_tanh(x, 3.0)\n"
        "@exporter.export_target\n"
        "def target():\n"
        "    return M(), (torch.randn(2),)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests")}
    result = subprocess.run(
        [console_script("onnxlens-export"), str(source), "--sarif", str(tmp_path / "m.sarif")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 1
    assert f"{source}:5: error FXE0011" in result.stderr
    validate_sarif(tmp_path / "m.sarif")


def _multitool() -> str | None:
    local = REPO / ".tools" / "node_modules" / ".bin" / "sarif-multitool"
    return str(local) if local.exists() else None


def test_official_sarif_multitool_validates_our_log(tmp_path):
    tool = _multitool()
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("sarif-multitool is not installed (scripts/setup.sh installs it into .tools/)")
        pytest.skip("sarif-multitool not installed; run scripts/setup.sh")
    failed = export_failure(models.HelperCallsCustomOp(), torch.randn(2, 4))
    failed.save_diagnostics(tmp_path / "log.sarif")
    out = tmp_path / "validation.sarif"
    run = subprocess.run(
        [tool, "validate", str(tmp_path / "log.sarif"), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(out.read_text())
    problems = [r for r in report["runs"][0].get("results", []) if r.get("level") == "error"]
    assert problems == [], problems


def test_rules_reference_page_is_current():
    from exporter.diagnostics.rules import ALL_RULES, rules_markdown

    page = (REPO / "docs" / "rules.md").read_text()
    assert page == rules_markdown(), "regenerate with: python -m exporter.diagnostics.rules > docs/rules.md"
    for rule in ALL_RULES:  # each helpUri anchor is a heading of the page (GitHub's anchor rules)
        anchor = rule.help_uri.split("#")[1]
        assert f"{rule.id} {rule.name}".lower().replace(" ", "-") == anchor


def test_an_unexpected_failure_is_still_a_located_error(tmp_path):
    # Capture works on fake values; running the real values (op-level debug) hits the bad index.
    failed = export_failure(models.OutOfRangeIndex(), torch.randn(3, 4), torch.tensor([5]), op_level_debug=True)
    log = save(failed, tmp_path)
    (error,) = [r for r in log["runs"][0]["results"] if r["level"] == "error"]
    assert "IndexError" in error["message"]["text"]
    assert primary(error) == ("located_models.py", line_of("out-of-range"))
