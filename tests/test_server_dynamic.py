"""Dynamic exports in the editor: FXE0020 problems at the line that fixed a dimension."""

from __future__ import annotations

import pathlib

import pytest
from lsprotocol import types

from test_server_reliability import export, server

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
