"""The extension and the server agree: command ids, notifications, error codes, argument fields and settings."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import attrs
import pytest

from exporter.diagnostics import rules
from exporter.options import SETTINGS
from onnxlens_server import protocol, settings

EXTENSION = pathlib.Path(__file__).resolve().parent.parent / "vscode-extension"
PROTOCOL_TS = (EXTENSION / "src" / "protocol.ts").read_text()


TS_CONSTANTS = dict(re.findall(r"^export const (\w+) = '([^']*)';", PROTOCOL_TS, re.M))


def test_names_are_spelled_the_same_on_both_sides():
    constants = {name: value for name, value in TS_CONSTANTS.items() if not name.startswith("RULE_")}
    names = [
        "EXPORT",
        "LIST_TARGETS",
        "CANCEL",
        "GRAPH",
        "GRAPH_FILE",
        "COMPARE_GRAPHS",
        "TENSOR",
        "OPEN_SARIF_LOG",
        "EXPORT_TARGET",
        "EXPORT_AFTER_FIX",
        "EXPORT_PROGRESS",
        "EXPORT_FINISHED",
        "CONFIGURATION_SECTION",
        "OUTPUT_FOLDER_SCOPE",
    ]
    assert constants == {
        **{name: getattr(protocol, name) for name in names},
        "OP_LEVEL_DEBUG_OPTION": SETTINGS["op_level_debug"].editor_key,
    }


def test_error_codes_are_the_same_on_both_sides():
    enum = re.search(r"export enum ErrorCode \{(.*?)\}", PROTOCOL_TS, re.S)[1]
    codes = {
        re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper(): int(value)
        for name, value in re.findall(r"(\w+) = (-?\d+)", enum)
    }
    assert codes == {code.name: code.value for code in protocol.ErrorCode}


def test_export_arguments_have_the_same_fields():
    interface = re.search(r"export interface ExportArgs \{(.*?)\}", PROTOCOL_TS, re.S)[1]
    assert re.findall(r"^\s*(\w+)\??:", interface, re.M) == [f.alias for f in attrs.fields(protocol.ExportArgs)]


def test_the_extension_declares_every_setting_the_server_reads():
    declared = json.loads((EXTENSION / "package.json").read_text())["contributes"]["configuration"]["properties"]
    for setting in SETTINGS.values():
        entry = declared[f"onnxlens.{setting.editor_key}"]
        json_type = setting.kind.json_type
        assert entry["type"] == (list(json_type) if isinstance(json_type, tuple) else json_type), setting.name
        assert tuple(entry.get("enum", ())) == getattr(setting.kind, "choices", ()), setting.name
        assert (entry.get("minimum"), entry.get("maximum")) == (
            getattr(setting.kind, "minimum", None),
            getattr(setting.kind, "maximum", None),
        )
        if setting.default is not None:
            assert entry["default"] == setting.default, setting.name
    assert declared[f"onnxlens.{settings.TIMEOUT_KEY}"]["default"] == settings.DEFAULT_TIMEOUT
    assert declared[f"onnxlens.{settings.OUTPUT_FOLDER_KEY}"]["default"] == settings.DEFAULT_OUTPUT_FOLDER
    assert (
        declared[f"onnxlens.{settings.MEMORY_LIMIT_KEY}"]["default"] is None
    )  # the server's default: half the machine


def test_the_extensions_rule_ids_are_the_exporters():
    mirrored = {name.removeprefix("RULE_"): value for name, value in TS_CONSTANTS.items() if name.startswith("RULE_")}
    assert mirrored == {name: getattr(rules, name).id for name in mirrored}
    expected = {"NO_SYMBOLIC_FUNCTION": "FXE0011", "OP_LEVEL_DEBUGGING": "FXE0013", "ACCURACY_DIVERGENCE": "FXE0021"}
    assert mirrored == expected  # what graphPanel.ts uses


def test_the_results_the_server_sends_have_the_extensions_fields():
    item = re.search(r"export interface ResultItem \{(.*?)\n\}", PROTOCOL_TS, re.S)[1]
    from onnxlens_server import sarif_log

    log = sarif_log.parse(
        {
            "runs": [
                {
                    "tool": {"driver": {"rules": [{"id": "FXE0011", "name": "n"}]}},
                    "results": [
                        {
                            "ruleId": "FXE0011",
                            "level": "error",
                            "message": {"text": "m"},
                            "locations": [
                                {
                                    "physicalLocation": {
                                        "artifactLocation": {"uri": "file:///m/a.py"},
                                        "region": {"startLine": 3},
                                    }
                                }
                            ],
                        },
                        {"ruleId": "FXE0008", "level": "none", "message": {"text": "trail"}},
                    ],
                }
            ]
        }
    )
    (result,) = sarif_log.results_json(log)  # level none left out
    assert set(re.findall(r"^  (\w+):", item, re.M)) == set(result)
    location = {"path": "/m/a.py", "line": 2}  # 0-based
    assert result == {"ruleId": "FXE0011", "ruleName": "n", "level": "error", "message": "m", "location": location}


def test_the_outcome_the_server_sends_has_the_extensions_fields_and_kinds():
    from exporter.outcome import FixedDim, Kind, Outcome

    def union(name: str) -> list[str]:
        return re.findall(r"'(\w+)'", re.search(rf"export type {name} = ([^;]*);", PROTOCOL_TS)[1])

    def fields(name: str) -> set[str]:
        body = re.search(rf"export interface {name} \{{(.*?)\n\}}", PROTOCOL_TS, re.S)[1]
        return set(re.findall(r"^  (\w+):", body, re.M))

    assert union("OutcomeKind") == [kind.value for kind in Kind]
    assert set(union("Severity")) == {kind.severity for kind in Kind}
    sent = Outcome(Kind.DEGRADED, "Exported t, but …", (FixedDim("x", 0, 2),)).to_json()
    assert fields("Outcome") == set(sent) and fields("FixedDim") == set(sent["fixedDims"][0])
    assert "outcome" in fields("Job")


@pytest.mark.parametrize(
    "module",
    [
        "exporter.diagnostics.rules",
        "exporter.constants",
        "exporter.outcome",
        "onnxlens_server.protocol",
        "onnxlens_server.sarif_log",
        "onnxlens_server.sarif_to_lsp",
    ],
)
def test_the_vocabulary_imports_without_torch(module: str):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"
