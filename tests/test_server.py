"""The language server, driven by pytest-lsp as a real client would drive it."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import sys
import time

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pytest_lsp import ClientServerConfig, LanguageClient

HERE = pathlib.Path(__file__).parent
SOURCE = HERE / "server_workspace"
pytestmark = pytest.mark.asyncio(loop_scope="module")


def line_of(text: str, marker: str) -> int:
    """0-based line of ``# MARK: <marker>``."""
    return next(i for i, line in enumerate(text.splitlines()) if line.rstrip().endswith(f"# MARK: {marker}"))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("ws")
    for f in SOURCE.glob("*.py"):
        shutil.copy(f, root / f.name)
    shutil.copy(HERE / "fixtures" / "custom_ops.py", root / "custom_ops.py")  # the op models.py calls
    return root


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=[sys.executable, "-m", "server"]))
async def client(lsp_client: LanguageClient, workspace: pathlib.Path):
    lsp_client.refreshes = []  # what VS Code does on these requests: re-ask for lenses / hints

    @lsp_client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def code_lens_refresh(params):
        lsp_client.refreshes.append("codeLens")

    @lsp_client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)
    def inlay_hint_refresh(params):
        lsp_client.refreshes.append("inlayHint")

    capabilities = pytest_lsp.client_capabilities("visual-studio-code")  # a VS Code 1.65 snapshot
    capabilities.workspace.inlay_hint = types.InlayHintWorkspaceClientCapabilities(refresh_support=True)  # as today's VS Code
    await lsp_client.initialize_session(types.InitializeParams(capabilities=capabilities, root_uri=workspace.as_uri()))
    lsp_client.set_configuration({"timeoutSeconds": 120}, section="onnxlens")
    yield
    await lsp_client.shutdown_session()


def open_document(client: LanguageClient, path: pathlib.Path) -> str:
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=1, text=path.read_text())))
    return uri


async def export(client: LanguageClient, **args) -> dict:
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command="onnxlens.server.export", arguments=[args]))


async def test_unsupported_custom_op_is_a_problem_at_its_line(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    text = (workspace / "models.py").read_text()
    result = await export(client, uri=uri, target="custom_op")
    (job,) = result["jobs"]
    assert job["status"] == "failed" and job["onnx"] is None
    assert os.path.isfile(job["sarif"]) and pathlib.Path(job["sarif"]).parent == workspace / "onnxlens-out"
    assert not (workspace / "onnxlens-out" / "models.custom_op.onnx").exists()

    (fxe0011,) = [d for d in client.diagnostics[uri] if d.code == "FXE0011"]
    assert fxe0011.range.start.line == line_of(text, "custom-op-call")
    assert fxe0011.severity == types.DiagnosticSeverity.Error and fxe0011.source == "onnxlens"
    assert fxe0011.code_description.href.endswith("#fxe0011-no-symbolic-function-for-call-function")
    related = [r.location.range.start.line for r in fxe0011.related_information]
    assert related[:2] == [line_of(text, "helper-call"), line_of(text, "forward-call")]
    assert any(d.code == "FXE0012" for d in client.diagnostics[uri])


async def test_progress_arrives_in_order_and_success_clears_problems(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    client.progress_reports.clear()
    (job,) = (await export(client, uri=uri, target="mlp"))["jobs"]
    assert job["status"] == "ok", job
    assert os.path.isfile(job["onnx"]) and os.path.isfile(job["sarif"])
    assert job["summary"]["inputs"] == 1 and job["summary"]["outputs"] == 1
    (reports,) = client.progress_reports.values()
    assert isinstance(reports[0], types.WorkDoneProgressBegin) and isinstance(reports[-1], types.WorkDoneProgressEnd)
    stages = [r.message.split(" ")[0] for r in reports[1:-1]]
    assert stages[:3] == ["load", "build", "capture"] and "translation" in stages and stages[-1] == "save"
    percents = [r.percentage for r in reports[1:-1]]
    assert percents == sorted(percents)


async def test_cancel_stops_an_export_quickly(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    task = asyncio.ensure_future(export(client, uri=uri, target="slow", jobId="job-slow"))
    await asyncio.sleep(3)  # the target is sleeping in its own process now
    start = time.perf_counter()
    cancelled = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="onnxlens.server.cancel", arguments=[{"jobId": "job-slow"}]))
    (job,) = (await asyncio.wait_for(task, timeout=10))["jobs"]
    assert cancelled == {"cancelled": True}
    assert job["status"] == "cancelled" and time.perf_counter() - start < 1.0


async def test_a_hanging_target_hits_the_timeout(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    client.set_configuration(2, section="onnxlens.timeoutSeconds")
    try:
        (job,) = (await export(client, uri=uri, target="slow"))["jobs"]
    finally:
        client.set_configuration(120, section="onnxlens.timeoutSeconds")
    assert job["status"] == "timeout" and "during build target" in job["message"]
    text = (workspace / "models.py").read_text()
    (problem,) = [d for d in client.diagnostics[uri] if d.code == "export-timeout"]
    assert problem.range.start.line == text.splitlines().index("def slow():")


async def test_a_segfault_is_reported_and_the_next_export_works(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    (job,) = (await export(client, uri=uri, target="segfault"))["jobs"]
    assert job["status"] == "crashed" and "SIGSEGV" in job["message"]
    assert any(d.code == "export-crashed" for d in client.diagnostics[uri])
    (job,) = (await export(client, uri=uri, target="mlp"))["jobs"]
    assert job["status"] == "ok"


async def test_bad_target_return_is_located(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    text = (workspace / "models.py").read_text()
    (job,) = (await export(client, uri=uri, target="broken"))["jobs"]
    assert job["status"] == "failed" and "must return (model, args)" in job["message"]
    (problem,) = [d for d in client.diagnostics[uri] if d.code == "export-failed"]
    assert problem.range.start.line == text.splitlines().index("def broken():")  # the target that returned it


async def test_op_level_debug_inlay_hints_and_hover(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    text = (workspace / "models.py").read_text()
    client.refreshes.clear()
    (job,) = (await export(client, uri=uri, target="mlp", options={"opLevelDebug": True}))["jobs"]
    assert job["status"] == "ok"
    assert "inlayHint" in client.refreshes  # hints refresh after each export
    lines = text.splitlines()
    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=types.TextDocumentIdentifier(uri), range=types.Range(types.Position(0, 0), types.Position(len(lines), 0))))
    by_line = {h.position.line: h for h in hints}
    hidden, out = line_of(text, "mlp-hidden"), line_of(text, "mlp-out")
    assert set(by_line) >= {hidden, out}
    assert "Gemm" in by_line[hidden].label and "Sigmoid" in by_line[hidden].label and "max|Δ|" in by_line[hidden].label
    assert by_line[hidden].position.character == len(lines[hidden])
    hover = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(hidden, 8)))
    assert "aten.linear.default" in hover.contents.value and "aten.sigmoid.default" in hover.contents.value
    assert "✅" in hover.contents.value and "3×8" in hover.contents.value


async def test_code_lenses_on_targets(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    text = (workspace / "models.py").read_text()
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    exports = [l for l in lenses if l.command.title.endswith("Export to ONNX")]
    assert [l.command.arguments[0]["target"] for l in exports] == ["custom_op", "mlp", "slow", "segfault", "broken"]
    assert exports[1].range.start.line == text.splitlines().index("def mlp():") - 1
    assert any(l.command.title == "Open SARIF log" and l.command.command == "onnxlens.openSarifLog" for l in lenses)


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    lines = text.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        assert edit.range.start == edit.range.end  # the fixes only insert
        line = edit.range.start.line
        lines[line:line] = [edit.new_text]
    return "".join(lines)


async def test_stub_quick_fix_then_implementation_makes_fxe0011_go_away(client: LanguageClient, workspace: pathlib.Path):
    path = workspace / "models.py"
    uri = open_document(client, path)
    await export(client, uri=uri, target="custom_op")
    (fxe0011,) = [d for d in client.diagnostics[uri] if d.code == "FXE0011"]
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(uri), fxe0011.range, types.CodeActionContext(diagnostics=[fxe0011])))
    (stub,) = [a for a in actions if "stub" in a.title]
    fixed = apply_edits(path.read_text(), stub.edit.changes[uri])
    assert "def onnxlens_test_scaled_tanh(x, scale: float):" in fixed
    compile(fixed, "models.py", "exec")  # the template is complete Python
    implemented = fixed.replace("return op.Identity(x)", "return op.Mul(op.Tanh(x), op.CastLike(op.Constant(value_float=scale), x))")
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        [types.TextDocumentContentChangeWholeDocument(text=implemented)]))
    (job,) = (await export(client, uri=uri, target="custom_op"))["jobs"]  # the unsaved editor text is exported
    assert job["status"] == "ok", job
    assert not [d for d in client.diagnostics[uri] if d.code == "FXE0011"]
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=3),
        [types.TextDocumentContentChangeWholeDocument(text=path.read_text())]))


async def test_export_target_quick_fix_produces_an_exportable_target(client: LanguageClient, workspace: pathlib.Path):
    path = workspace / "models.py"
    uri = open_document(client, path)
    text = path.read_text()
    line = line_of(text, "untargeted")
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(uri), types.Range(types.Position(line, 6), types.Position(line, 6)), types.CodeActionContext(diagnostics=[])))
    (action,) = [a for a in actions if a.title == "Create an export target for Untargeted"]
    assert not [a for a in actions if "MLPModel" in a.title]  # MLPModel has a target already
    new_path = workspace / "untargeted.py"
    new_path.write_text(apply_edits(text, action.edit.changes[uri]))
    (job,) = (await export(client, uri=new_path.as_uri(), target="export_untargeted"))["jobs"]
    assert job["status"] == "ok", job


async def test_bad_requests_get_clear_errors(client: LanguageClient, workspace: pathlib.Path):
    uri = (workspace / "models.py").as_uri()
    for args, message in [
        ({"uri": (workspace / "nope.py").as_uri()}, "No such file"),
        ({"uri": "untitled:Untitled-1"}, "save it first"),
        ({"uri": (workspace / "custom_ops.py").as_uri()}, "no function decorated with @exporter.export_target"),
        ({"uri": uri, "target": "nope"}, "no export target 'nope'"),
        ({"uri": uri, "target": "mlp", "options": {"opset": "18"}}, "must be a int"),
        ({"uri": uri, "target": "mlp", "options": {"dynamic": True}}, "Unknown export option 'dynamic'"),
        ({}, "Missing or invalid 'uri'"),
    ]:
        with pytest.raises(JsonRpcInvalidParams, match=message):
            await export(client, **args)
    listed = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="onnxlens.server.listTargets", arguments=[{"uri": uri}]))
    assert [t["name"] for t in listed["targets"]] == ["custom_op", "mlp", "slow", "segfault", "broken"]


async def test_a_newer_request_for_the_same_target_wins(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    older = asyncio.ensure_future(export(client, uri=uri, target="slow", jobId="older"))
    await asyncio.sleep(2)
    newer = asyncio.ensure_future(export(client, uri=uri, target="slow", jobId="newer"))
    (job,) = (await asyncio.wait_for(older, timeout=10))["jobs"]
    assert job["status"] == "cancelled"
    await client.workspace_execute_command_async(types.ExecuteCommandParams(command="onnxlens.server.cancel", arguments=[{"jobId": "newer"}]))
    (job,) = (await asyncio.wait_for(newer, timeout=10))["jobs"]
    assert job["status"] == "cancelled"


async def test_problems_follow_edits_above_them(client: LanguageClient, workspace: pathlib.Path):
    path = workspace / "models.py"
    uri = open_document(client, path)
    text = path.read_text()
    await export(client, uri=uri, target="custom_op")
    line = line_of(text, "custom-op-call")
    assert [d.range.start.line for d in client.diagnostics[uri] if d.code == "FXE0011"] == [line]
    waiter = client.protocol.wait_for_notification_async(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=10),
        [types.TextDocumentContentChangePartial(range=types.Range(types.Position(0, 0), types.Position(0, 0)), text="import os\nimport sys\n")]))
    await asyncio.wait_for(waiter, timeout=10)
    assert [d.range.start.line for d in client.diagnostics[uri] if d.code == "FXE0011"] == [line + 2]
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=11),
        [types.TextDocumentContentChangeWholeDocument(text=text)]))
