"""Dynamic exports in the editor: FXE0020 problems at the line that fixed a dimension, and their quick
fixes, applied as the editor applies them and proved by the re-export."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Union

import onnx
import pytest
from lsprotocol import types
from test_server_reliability import ANSWER_TIMEOUT, export, server
from test_shape_fixes import applied

pytestmark = pytest.mark.asyncio

MODEL = """\
import torch
import exporter
from torch.export import Dim


class FixesWidth(torch.nn.Module):
    def forward(self, x):
        if x.shape[1] == 6:
            x = x * 2
        return x.sum(1)


@exporter.export_target(dynamic_shapes={"x": {0: Dim("batch"), 1: Dim.AUTO}})
def auto():
    return FixesWidth(), (torch.randn(1, 6),)


@exporter.export_target(dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("width")}})
def named():
    return FixesWidth(), (torch.randn(2, 6),)
"""


async def test_fixed_dimensions_are_problems_at_the_line_that_fixed_them(tmp_path: pathlib.Path):
    path = tmp_path / "m.py"
    path.write_text(MODEL)
    line = MODEL.splitlines().index("        if x.shape[1] == 6:")
    async with server(tmp_path) as client:
        auto = await export(client, path, target="auto")
        (warning,) = [d for d in client.diagnostics[path.as_uri()] if d.code == "FXE0020"]
        named = await export(client, path, target="named")
        problems = [d for d in client.diagnostics[path.as_uri()] if d.code == "FXE0020"]
    assert auto["status"] == "ok"  # batch 1 in the example, and still symbolic
    assert warning.severity == types.DiagnosticSeverity.Warning and warning.range.start.line == line
    assert warning.message.startswith("`if x.shape[1] == 6:` fixes dimension 1 of input 'x' to 6")
    assert named["status"] == "failed"
    error = next(d for d in problems if d.severity == types.DiagnosticSeverity.Error)
    assert error.range.start.line == line and error.message.endswith("torch.export suggests: width = 6.")


FIXED_AT_1 = """\
import torch
import exporter
from torch.export import Dim


class SqueezesOne(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 1:
            x = x.squeeze(0).unsqueeze(0)
        return torch.softmax(x @ x.T, -1)


@exporter.export_target(dynamic_shapes=True)
def t():
    x = torch.randn(1, 6)
    return SqueezesOne(), (x,)
"""

WIDTH_6 = """\
import torch
import exporter


class FixesWidth(torch.nn.Module):
    def forward(self, x):
        if x.shape[1] == 6:
            x = x * 2
        return x.sum(1)


@exporter.export_target{options}
def t():
    return FixesWidth(), (torch.randn(2, 6),)
"""


def read_code_actions_as_vscode_does(client) -> None:
    """lsprotocol reads any code action with a ``command`` as a `Command`; VS Code (and the LSP spec)
    tell them apart by the type of ``command``: a string in a Command, an object in a CodeAction."""
    converter = client.protocol._converter
    converter.register_structure_hook(
        Union[types.Command, types.CodeAction],  # noqa: UP007  (the converter keys its hooks by typing.Union)
        lambda value, _: converter.structure(
            value, types.Command if isinstance(value.get("command"), str) else types.CodeAction
        ),
    )


async def quick_fix(client, path: pathlib.Path, diagnostic: types.Diagnostic) -> types.CodeAction:
    """The one preferred quick fix the server offers for `diagnostic`, applied to the file as the editor
    applies a WorkspaceEdit (the server reads files it has not been sent)."""
    read_code_actions_as_vscode_does(client)
    params = types.CodeActionParams(
        types.TextDocumentIdentifier(path.as_uri()),
        diagnostic.range,
        types.CodeActionContext(diagnostics=[diagnostic], trigger_kind=types.CodeActionTriggerKind.Invoked),
    )
    actions = await asyncio.wait_for(client.text_document_code_action_async(params), ANSWER_TIMEOUT)
    (action,) = [a for a in actions if a.is_preferred]
    assert action.command.command == "onnxlens.exportAfterFix"
    assert list(action.command.arguments) == [{"uri": path.as_uri(), "target": "t"}]
    (edits,) = action.edit.changes.values()
    path.write_text(applied(path.read_text(), edits))
    return action


def graph_inputs(job: dict) -> list[list[int | str]]:
    model = onnx.load(job["onnx"], load_external_data=False)
    return [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input]


async def test_a_size_the_code_fixes_only_at_the_examples_1_is_changed_by_a_quick_fix(tmp_path: pathlib.Path):
    path = tmp_path / "m.py"
    path.write_text(FIXED_AT_1)
    async with server(tmp_path) as client:
        first = await export(client, path)
        first_inputs = graph_inputs(first)  # the re-export writes the same file
        (note,) = [d for d in client.diagnostics[path.as_uri()] if d.code == "FXE0020"]
        action = await quick_fix(client, path, note)
        again = await export(client, path)
        left = [d for d in client.diagnostics[path.as_uri()] if d.code == "FXE0020"]
    assert first["status"] == "ok" and first_inputs == [[1, "x_dim_1"]]  # right, but only at batch 1
    assert note.range.start.line == FIXED_AT_1.splitlines().index("        if x.shape[0] == 1:")
    assert note.message.startswith("`if x.shape[0] == 1:` fixes dimension 0 of input 'x' to 1, the example's size")
    assert action.title == "Give the example of 'x' size 2 in dimension 0 (it is 1, which the code fixes)"
    assert path.read_text() == FIXED_AT_1.replace("torch.randn(1, 6)", "torch.randn(2, 6)")
    assert again["status"] == "ok" and graph_inputs(again) == [["x_dim_0", "x_dim_1"]] and left == []


@pytest.mark.parametrize(
    "options, configuration, expected",
    [
        (
            '(dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("width")}})',
            {},
            '(dynamic_shapes={"x": {0: Dim("batch"), 1: 6}})',
        ),
        ("", {"dynamicShapes": {"x": {"0": "batch", "1": "width"}}}, '(dynamic_shapes={"x": {0: "batch", 1: 6}})'),
    ],
)
async def test_torchs_suggested_fix_is_applied_to_the_targets_spec(
    tmp_path: pathlib.Path, options: str, configuration: dict, expected: str
):
    path = tmp_path / "m.py"
    source = WIDTH_6.format(options=options)
    path.write_text(source.replace("import exporter\n", "import exporter\nfrom torch.export import Dim\n"))
    async with server(tmp_path, configuration) as client:
        first = await export(client, path)
        (error,) = [d for d in client.diagnostics[path.as_uri()] if d.severity == types.DiagnosticSeverity.Error]
        action = await quick_fix(client, path, error)
        again = await export(client, path)
        left = [
            d
            for d in client.diagnostics[path.as_uri()]
            if d.code == "FXE0020" and d.severity != types.DiagnosticSeverity.Information
        ]
    assert (
        first["status"] == "failed"
        and error.code == "FXE0020"
        and error.message.endswith("torch.export suggests: width = 6.")
    )
    assert action.title == "Apply torch.export's suggested fix: makes width static (6)"
    assert path.read_text() == WIDTH_6.format(options=expected).replace(
        "import exporter\n", "import exporter\nfrom torch.export import Dim\n"
    )
    assert again["status"] == "ok" and graph_inputs(again) == [["batch", 6]] and left == []


async def test_the_targets_own_spec_wins_over_the_settings(tmp_path: pathlib.Path):
    """VS Code answers the configuration with every setting's default (dynamicShapes: false)."""
    path = tmp_path / "m.py"
    path.write_text(WIDTH_6.format(options='(dynamic_shapes={"x": {0: "batch"}})'))
    async with server(tmp_path, {"dynamicShapes": False, "opLevelDebug": False}) as client:
        job = await export(client, path)
    assert job["status"] == "ok" and graph_inputs(job) == [["batch", 6]]
