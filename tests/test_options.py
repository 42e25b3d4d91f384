"""Export settings: one declaration each (kind, range, default), parsed once; the opset range refused
where it is given (options, decorator, registry, editor, CLI)."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
from helpers import console_script

import exporter
from exporter.options import OPSET_VERSIONS, SETTINGS, DynamicShapesSpec, ExportOptions, SettingError, parse_settings

EXTENSION = pathlib.Path(__file__).parents[1] / "vscode-extension" / "package.json"


def test_the_opset_range_is_what_onnxscript_converts_to():
    from onnxscript.version_converter import _version_converter

    assert (OPSET_VERSIONS[0], OPSET_VERSIONS[-1]) == (18, 25)
    assert (_version_converter.SUPPORTED_MIN_ONNX_OPSET, _version_converter.SUPPORTED_MAX_ONNX_OPSET) == (18, 25)
    entry = json.loads(EXTENSION.read_text())["contributes"]["configuration"]["properties"]["onnxlens.opset"]
    assert (entry["minimum"], entry["maximum"], entry["default"]) == (18, 25, 20)


@pytest.mark.parametrize("opset", [17, 26, 99])
def test_an_opset_out_of_range_is_refused_where_it_is_given(opset):
    with pytest.raises(ValueError, match=f"opset_version must be an integer from 18 to 25, got {opset}"):
        ExportOptions(opset_version=opset)
    with pytest.raises(ValueError, match=f"export option 'opset_version' must be from 18 to 25, got {opset}"):
        exporter.export_target(opset_version=opset)
    with pytest.raises(ValueError, match=f"opset_version must be an integer from 18 to 25, got {opset}"):
        exporter.OnnxRegistry(opset_version=opset)


def test_the_cli_refuses_an_opset_out_of_range_before_loading_anything(tmp_path):
    run = subprocess.run(
        [console_script("onnxlens-export"), str(tmp_path / "missing.py"), "--opset", "99"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "argument --opset: must be from 18 to 25, got 99" in run.stderr


def test_dynamic_shapes_has_a_kind_of_its_own():
    kind = SETTINGS["dynamic_shapes"].kind
    assert isinstance(kind, DynamicShapesSpec)
    assert parse_settings({"dynamic_shapes": True}) == {"dynamic_shapes": True}
    assert parse_settings({"dynamic_shapes": {"x": {"0": "batch"}}}) == {"dynamic_shapes": {"x": {"0": "batch"}}}
    assert parse_settings({"dynamic_shapes": ({"0": "b"},)}) == {"dynamic_shapes": [{"0": "b"}]}
    assert kind.from_text('{"x": {"0": "batch"}}') == {"x": {"0": "batch"}}
    with pytest.raises(SettingError, match="must be true or false or a dynamic shapes spec, got 3"):
        parse_settings({"dynamic_shapes": 3})
    with pytest.raises(SettingError, match="a dynamic shapes spec is a JSON object"):
        kind.from_text("3")
    assert SETTINGS["verify"].kind.json_type == "boolean" and kind.json_type == ("boolean", "object")


def test_parsed_settings_make_the_options_without_another_check():
    parsed = parse_settings(
        {"opset_version": 23, "verbosity": "DEBUG", "warnings_as_errors": True, "modularize": False}
    )
    assert parsed == {"opset_version": 23, "verbosity": "debug", "warnings_as_errors": True, "modularize": False}
    options = ExportOptions.from_parsed(parsed)
    assert (options.opset_version, options.modularize) == (23, False)
    assert (options.diagnostic_options.verbosity_level, options.diagnostic_options.warnings_as_errors) == (10, True)
    assert parse_settings({"opset_version": None}) == {}  # None: not set


def test_weight_settings_at_their_defaults_pass_and_others_are_named():
    from exporter.options import WEIGHT_SETTINGS, refuse_weight_settings

    defaults = {name: SETTINGS[name].default for name in WEIGHT_SETTINGS}
    assert defaults == {
        "precision": "fp32",
        "block_size": 32,
        "symmetric": True,
        "accuracy_level": 4,
        "int8_head": False,
    }
    refuse_weight_settings({**defaults, "opset_version": 18, "fused_kernels": False}, "a plain export")
    with pytest.raises(SettingError, match=r"^a plain export does not take symmetric=False, accuracy_level=0: "):
        refuse_weight_settings({"accuracy_level": 0, "symmetric": False}, "a plain export")


def test_a_plain_target_refuses_weight_settings_given_for_it_and_ignores_the_editors(tmp_path):
    from exporter.runner import export_file_target

    path = tmp_path / "models.py"
    path.write_text(
        "import torch\nimport exporter\n\n\n"
        "@exporter.export_target()\ndef small():\n    return torch.nn.Linear(2, 3), (torch.randn(1, 2),)\n\n\n"
        "@exporter.export_target(precision='int8')\ndef asks_int8():\n    return torch.nn.Linear(2, 3), (torch.randn(1, 2),)\n"
    )
    refused = "a plain export (no text-generation task) does not take precision="
    override = export_file_target(str(path), "small", {}, {"precision": "int4"}, str(tmp_path / "a"))
    assert override.status == "failed" and f"{refused}'int4'" in override.message
    decorated = export_file_target(str(path), "asks_int8", {}, {}, str(tmp_path / "b"))
    assert decorated.status == "failed" and f"{refused}'int8'" in decorated.message
    # the editor's precision is for its text-generation targets: a plain one exports as it is
    editor = export_file_target(str(path), "small", {"precision": "int4"}, {}, str(tmp_path / "c"))
    assert editor.status == "ok", editor.message
