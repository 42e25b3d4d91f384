"""Verification in the editor (setting ``onnxlens.verify``): the first divergence is a problem at its
line, its related information opens the reproducer, and the hovers show each line's error."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from test_server_reliability import ANSWER_TIMEOUT, export, model, server
from test_verify import CLI_MODEL

from onnxlens_server.protocol import GRAPH, ErrorCode

pytestmark = pytest.mark.asyncio


async def test_verify_setting_gives_a_problem_at_the_diverging_line_with_the_reproducer(tmp_path: pathlib.Path):
    path = tmp_path / "gated.py"
    path.write_text("FAULT = True\n" + CLI_MODEL)
    line = (
        ("FAULT = True\n" + CLI_MODEL).splitlines().index("        return h * torch.sigmoid(self.gate(h))  # the gate")
    )
    async with server(tmp_path, {"verify": True}) as client:
        job = await export(client, path, target="gated")
        problems = [d for d in client.diagnostics[path.as_uri()] if d.code == "FXE0021"]
        hover = await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(path.as_uri()), types.Position(line, 8))
        )
    assert job["status"] == "failed"
    (problem,) = problems
    assert problem.severity == types.DiagnosticSeverity.Error and problem.range.start.line == line
    assert problem.message.startswith("First divergence from eager PyTorch in onnxruntime: aten.sigmoid.default")
    run_py = pathlib.Path(problem.related_information[-1].location.uri.removeprefix("file://"))
    assert run_py.name == "run.py" and run_py.parent.name.endswith("_repro")
    assert subprocess.run([sys.executable, str(run_py)], capture_output=True).returncode == 1
    assert hover is not None and "verification in onnxruntime" in hover.contents.value


async def test_the_export_and_verify_lens_verifies_without_the_setting(tmp_path: pathlib.Path):
    path = tmp_path / "gated.py"
    path.write_text("FAULT = True\n" + CLI_MODEL)
    async with server(tmp_path) as client:
        lenses = await client.text_document_code_lens_async(
            types.CodeLensParams(types.TextDocumentIdentifier(path.as_uri()))
        )
        (lens,) = [lens_ for lens_ in lenses if lens_.command.title == "Export and verify"]
        (arguments,) = lens.command.arguments
        plain = await export(client, path, target="gated")
        verified = await export(client, path, target=arguments["target"], options=arguments["options"])
        problems = [
            d
            for d in client.diagnostics[path.as_uri()]
            if d.code == "FXE0021" and d.severity == types.DiagnosticSeverity.Error
        ]
    assert plain["status"] == "ok"  # the fault is only seen by verifying
    assert verified["status"] == "failed" and len(problems) == 1


async def graph_of(client, path: pathlib.Path, target: str) -> dict:
    arguments = [{"uri": path.as_uri(), "target": target}]
    command = client.workspace_execute_command_async(types.ExecuteCommandParams(command=GRAPH, arguments=arguments))
    return await asyncio.wait_for(command, ANSWER_TIMEOUT)


async def test_the_graph_of_a_diverging_model_is_the_model_written_with_the_divergence(tmp_path: pathlib.Path):
    path = tmp_path / "gated.py"
    text = "FAULT = True\n" + CLI_MODEL
    path.write_text(text)
    line = 1 + text.splitlines().index("        return h * torch.sigmoid(self.gate(h))  # the gate")  # 1-based
    async with server(tmp_path, {"verify": True}) as client:
        job = await export(client, path, target="gated")
        graph = await graph_of(client, path, "gated")
    assert job["status"] == "failed" and job["onnx"] is not None  # the model is kept, with its reproducer
    assert graph["path"] == job["onnx"]
    diverging = [n for n in graph["nodes"] if any(c["rule"] == "FXE0021" and c["ok"] is False for c in n["checks"])]
    assert diverging and {n["source"]["line"] for n in diverging} == {line}


async def test_the_graph_of_an_export_that_wrote_no_model_says_so_and_names_its_log(tmp_path: pathlib.Path):
    path = tmp_path / "small.py"
    path.write_text(model(forward="x = torch.ops.aten.nonexistent_op_of_the_test(x)"))
    async with server(tmp_path) as client:
        job = await export(client, path)
        with pytest.raises(JsonRpcException) as refused:
            await graph_of(client, path, "t")
    assert job["status"] == "failed" and job["onnx"] is None
    assert refused.value.code == ErrorCode.NO_MODEL
    assert refused.value.message.startswith("The last export of t (small.py) failed before writing a model")
    assert refused.value.data == {"sarif": job["sarif"]}
