"""`exporter.runner`: one export of a target, as the CLI and the editor's export process run it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import onnx
import pytest

from exporter.runner import export_file_target, merge_settings

MODELS = textwrap.dedent(
    """\
    import torch
    import exporter
    from tiny_lms import tiny_model


    @exporter.export_target(opset_version=20)
    def small():
        return torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU()), (torch.randn(1, 2),)


    @exporter.export_target(task="text-generation", opset_version=20)
    def lm():
        return tiny_model("gpt2")
    """
)


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "models.py"
    path.write_text(
        MODELS.replace("from tiny_lms", f"import sys; sys.path.insert(0, {str(_tests())!r})\nfrom tiny_lms")
    )
    return path


def _tests():
    import pathlib

    return pathlib.Path(__file__).parent


def test_precedence_editor_then_target_then_override():
    editor = {"opset_version": 18, "modularize": True, "verify": True}
    target = {"opset_version": 20, "modularize": False}
    override = {"modularize": True}
    assert merge_settings(editor, target, override) == {"opset_version": 20, "modularize": True, "verify": True}
    assert merge_settings({}, {}, {}) == {}  # the built-in defaults: ExportOptions' own


def test_a_plain_export_writes_its_files_and_a_typed_summary(models, tmp_path):
    stem = str(tmp_path / "out" / "small")
    result = export_file_target(str(models), "small", {"opset_version": 18}, {"modularize": False}, stem)
    assert result.status == "ok", result.message
    assert (result.onnx, result.sarif) == (stem + ".onnx", stem + ".sarif")
    proto = onnx.load(result.onnx)
    assert {o.domain: o.version for o in proto.opset_import}[""] == 20  # the target's option beats the editor's
    assert len(proto.functions) == 0  # the override beats the target's default (modularize)
    assert result.summary == {"inputs": 1, "outputs": 1, "nodes": 2, "functions": 0, "opset": 20, "warnings": 0}
    assert set(result.stages) >= {"capture", "translation", "onnx passes"}
    assert json.load(open(result.sarif))["runs"][0]["invocations"][0]["executionSuccessful"] is True


def test_a_generation_export_takes_the_same_precedence(models, tmp_path):
    stem = str(tmp_path / "lm")
    result = export_file_target(
        str(models), "lm", {"opset_version": 18, "second_size_check": True}, {"modularize": False}, stem
    )
    assert result.status == "ok", result.message
    assert result.onnx == f"{stem}/model.onnx" and result.sarif == stem + ".sarif"
    proto = onnx.load(result.onnx, load_external_data=False)
    assert {o.domain: o.version for o in proto.opset_import}[""] == 20  # the editor's default 18 no longer wins
    assert len(proto.functions) == 0  # the request's override is no longer dropped
    assert result.summary["opset"] == 20 and "identical to generate()" in result.summary["generation"]
    assert result.outcome.kind == "verified", result.outcome  # the generation check passed: a verified model
    assert "greedy tokens" in result.outcome.headline and "as generate()" in result.outcome.headline


@pytest.mark.parametrize(
    "settings, overrides, refused",
    [
        ({"verify": True}, {}, "verify"),
        ({}, {"op_level_debug": True}, "op_level_debug"),
        ({"dynamic_shapes": {"input_ids": {"0": "b"}}}, {}, "dynamic_shapes"),
    ],
)
def test_a_generation_export_refuses_what_it_cannot_take(models, tmp_path, settings, overrides, refused):
    result = export_file_target(str(models), "lm", settings, overrides, str(tmp_path / "lm"))
    assert result.status == "failed"
    assert f"a text-generation export does not take {refused} " in result.message
    assert not (tmp_path / "lm").exists()


def test_the_language_server_side_imports_neither_torch_nor_the_export_process():
    code = (
        "import sys, onnxlens_server.server, onnxlens_server.commands, onnxlens_server.worker, onnxlens_server.settings\n"
        "print(sorted(m for m in ('torch', 'onnx', 'exporter.runner', 'onnxlens_server.child', 'onnxlens_server.job') if m in sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
