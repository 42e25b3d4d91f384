"""SARIF results → LSP diagnostics (no server, no export: hand-written logs)."""

from __future__ import annotations

import pytest
from lsprotocol import types

from onnxlens_server import sarif_log, sarif_to_lsp
from onnxlens_server.sarif_to_lsp import to_range


def location(uri: str, line: int, message: str | None = None, base: str | None = None) -> dict:
    artifact = {"uri": uri, **({"uriBaseId": base} if base else {})}
    found = {"physicalLocation": {"artifactLocation": artifact, "region": {"startLine": line}}}
    return {**found, "message": {"text": message}} if message else found


LOG = {
    "runs": [
        {
            "tool": {
                "driver": {
                    "name": "onnxlens",
                    "rules": [{"id": "FXE0011", "helpUri": "https://example.invalid/rules#fxe0011"}, {"id": "FXE0016"}],
                }
            },
            "originalUriBaseIds": {"SRC": {"uri": "file:///work/my%20models/"}},
            "results": [
                {
                    "ruleId": "FXE0011",
                    "level": "error",
                    "message": {"text": "no function"},
                    "locations": [location("net.py", 12, base="SRC")],
                    "relatedLocations": [
                        location("net.py", 20, "forward (net.py:20)", base="SRC"),
                        location("https://example.invalid/x.py", 1),
                    ],
                    "properties": {"schema": "a::b(Tensor x) -> Tensor", "modulePath": "net.block", "nodes": ["large"]},
                },
                {
                    "ruleId": "FXE0016",
                    "message": {"text": "fallback"},
                    "locations": [location("file:///elsewhere/helpers.py", 3)],
                },
                {
                    "ruleId": "FXE0008",
                    "level": "none",
                    "message": {"text": "trail"},
                    "locations": [location("net.py", 5, base="SRC")],
                },
                {
                    "ruleId": "FXE0013",
                    "level": "note",
                    "message": {"text": "line summary"},
                    "locations": [location("net.py", 7, base="SRC")],
                    "properties": {"aggregate": "sourceLine"},
                },
                {"ruleId": "FXE0016", "level": "warning", "message": {"text": "nowhere"}},
            ],
        }
    ]
}


def test_results_become_problems_in_the_files_they_point_into():
    lines = {("/work/my models/net.py", 11): "        return b(x)\n", ("/work/my models/net.py", 19): "    y = f(x)\n"}
    found = sarif_to_lsp.diagnostics_by_path(sarif_log.parse(LOG), lambda path, line: lines.get((path, line)))
    assert sorted(found) == [
        "/elsewhere/helpers.py",
        "/work/my models/net.py",
    ]  # level none and line summaries left out
    (error,) = found["/work/my models/net.py"]
    assert error.range == types.Range(types.Position(11, 8), types.Position(11, 19))
    assert (error.message, error.code, error.source, error.severity) == (
        "no function",
        "FXE0011",
        "onnxlens",
        types.DiagnosticSeverity.Error,
    )
    assert error.code_description.href == "https://example.invalid/rules#fxe0011"
    (related,) = error.related_information  # the non-file location is dropped
    assert related.location.uri == "file:///work/my%20models/net.py"
    assert related.location.range == types.Range(types.Position(19, 4), types.Position(19, 12))
    assert related.message == "forward (net.py:20) — in module net.block"
    assert error.data == {
        "ruleId": "FXE0011",
        "properties": {"schema": "a::b(Tensor x) -> Tensor", "modulePath": "net.block"},
    }
    (warning,) = found["/elsewhere/helpers.py"]  # SARIF's default level is warning
    assert warning.severity == types.DiagnosticSeverity.Warning and warning.code_description is None
    assert warning.range == types.Range(types.Position(2, 0), types.Position(2, 0))  # the line's text unknown


def test_a_failure_covers_its_line_from_the_first_character():
    problem = sarif_to_lsp.failure("Export of mlp crashed: boom", "export-crashed", 4, "    def mlp():\n")
    assert problem.range == types.Range(types.Position(4, 4), types.Position(4, 14))
    assert (problem.code, problem.severity, problem.source) == (
        "export-crashed",
        types.DiagnosticSeverity.Error,
        "onnxlens",
    )


@pytest.mark.parametrize(
    "text_line, code",
    [
        ("        if x.shape[1] == 6:  # the user's note\n", "if x.shape[1] == 6:"),
        ('    s = "# not a comment"  # a comment\n', 's = "# not a comment"'),
        ("    return f(x,  # an argument's note\n", "return f(x,"),
        ("    y = x.relu()\n", "y = x.relu()"),
    ],
)
def test_a_problems_range_is_its_lines_code_without_the_comment(text_line: str, code: str):
    found = to_range(4, text_line)
    assert text_line[found.start.character : found.end.character] == code and found.start.line == found.end.line == 4
