"""The language server, driven by pytest-lsp as a real client would drive it."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import sys
from collections.abc import Callable

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pytest_lsp import ClientServerConfig, LanguageClient

from onnxlens_server.protocol import (
    CANCEL,
    EXPORT,
    EXPORT_FINISHED,
    EXPORT_PROGRESS,
    EXPORT_TARGET,
    LIST_TARGETS,
    ErrorCode,
)

HERE = pathlib.Path(__file__).parent
SOURCE = HERE / "server_workspace"
pytestmark = pytest.mark.asyncio(loop_scope="module")


def line_of(text: str, marker: str) -> int:
    """0-based line of ``# MARK: <marker>``."""
    return next(i for i, line in enumerate(text.splitlines()) if line.rstrip().endswith(f"# MARK: {marker}"))


def statement_range(text: str, line: int, statement: str) -> types.Range:
    """Where a problem on `line` belongs: `statement`, which must be the line's whole code (only
    blanks before it, only blanks or a comment after it: the comment is not selected)."""
    line_text = text.splitlines()[line]
    start = line_text.index(statement)
    end = start + len(statement)
    assert not line_text[:start].strip(), f"{statement!r} is not the first code on line {line}: {line_text!r}"
    assert line_text[end:].strip()[:1] in ("", "#"), f"more code after {statement!r} on line {line}: {line_text!r}"
    return types.Range(types.Position(line, start), types.Position(line, end))


def plain(value):
    """pygls hands custom notifications' JSON objects over as named tuples: back to dicts."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    return [plain(v) for v in value] if isinstance(value, list) else value


def problems_in(client: LanguageClient, code: str, uri: str) -> list[types.Diagnostic]:
    """The published problems with `code`, all in the file `uri` (none published for another file)."""
    found = problems(client, code)
    assert set(found) <= {uri}, f"{code} published for {sorted(found)}"
    return found.get(uri, [])


def problems(client: LanguageClient, code: str) -> dict[str, list[types.Diagnostic]]:
    """The published problems with `code`, by the URI of the file they were published for."""
    found = {uri: [d for d in diagnostics if d.code == code] for uri, diagnostics in client.diagnostics.items()}
    return {uri: diagnostics for uri, diagnostics in found.items() if diagnostics}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("ws")
    for f in SOURCE.glob("*.py"):
        shutil.copy(f, root / f.name)
    shutil.copy(HERE / "fixtures" / "custom_ops.py", root / "custom_ops.py")  # the op models.py calls
    return root


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=[sys.executable, "-m", "onnxlens_server"]))
async def client(lsp_client: LanguageClient, workspace: pathlib.Path):
    lsp_client.refreshes = []  # what VS Code does on these requests: re-ask for lenses / hints

    @lsp_client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def code_lens_refresh(params):
        lsp_client.refreshes.append("codeLens")

    @lsp_client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)
    def inlay_hint_refresh(params):
        lsp_client.refreshes.append("inlayHint")

    lsp_client.traces = []  # $/logTrace messages (the server sends them while the trace is on)

    @lsp_client.feature(types.LOG_TRACE)
    def log_trace(params: types.LogTraceParams):
        lsp_client.traces.append(params.message)

    lsp_client.export_notifications = []  # (method, params as a dict) of the server's onnxlens/* notifications
    lsp_client.notification_waiters = []  # (predicate, future): see expect_notification

    def record(method: str, params) -> None:
        params = plain(params)
        lsp_client.export_notifications.append((method, params))
        for predicate, future in lsp_client.notification_waiters:
            if not future.done() and predicate(method, params):
                future.set_result(params)

    @lsp_client.feature(EXPORT_PROGRESS)
    def export_progress(params):
        record(EXPORT_PROGRESS, params)

    @lsp_client.feature(EXPORT_FINISHED)
    def export_finished(params):
        record(EXPORT_FINISHED, params)

    capabilities = pytest_lsp.client_capabilities("visual-studio-code")  # a VS Code 1.65 snapshot
    capabilities.workspace.inlay_hint = types.InlayHintWorkspaceClientCapabilities(
        refresh_support=True
    )  # as today's VS Code
    await lsp_client.initialize_session(types.InitializeParams(capabilities=capabilities, root_uri=workspace.as_uri()))
    lsp_client.set_configuration({"timeoutSeconds": 120}, section="onnxlens")
    lsp_client.protocol.notify(types.SET_TRACE, types.SetTraceParams(types.TraceValue.Messages))
    yield
    await lsp_client.shutdown_session()


def open_document(client: LanguageClient, path: pathlib.Path) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id="python", version=1, text=path.read_text())
        )
    )
    return uri


async def export(client: LanguageClient, **args) -> dict:
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command=EXPORT, arguments=[args]))


def expect_notification(client: LanguageClient, predicate: Callable[[str, dict], bool]) -> asyncio.Future:
    """A future for the server's next onnxlens/* notification that satisfies `predicate(method, params)`
    (create it before triggering the notification)."""
    future = asyncio.get_running_loop().create_future()
    client.notification_waiters.append((predicate, future))
    future.add_done_callback(lambda f: client.notification_waiters.remove((predicate, future)))
    return future


def expect_stage(client: LanguageClient, job_id: str, stage: str) -> asyncio.Future:
    """The server's progress notification of `stage` for job `job_id`."""
    return expect_notification(
        client, lambda method, p: method == EXPORT_PROGRESS and p["jobId"] == job_id and p["stage"] == stage
    )


async def code_actions(
    client: LanguageClient, uri: str, at: types.Range, diagnostics: list[types.Diagnostic]
) -> list[types.CodeAction]:
    return await client.text_document_code_action_async(
        types.CodeActionParams(
            types.TextDocumentIdentifier(uri),
            at,
            types.CodeActionContext(diagnostics=diagnostics, trigger_kind=types.CodeActionTriggerKind.Invoked),
        )
    )


async def test_unsupported_custom_op_is_a_problem_at_its_line(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    text = (workspace / "models.py").read_text()
    result = await export(client, uri=uri, target="custom_op")
    (job,) = result["jobs"]
    assert job["status"] == "failed" and job["onnx"] is None
    assert os.path.isfile(job["sarif"]) and pathlib.Path(job["sarif"]).parent == workspace / "onnxlens-out"
    assert not (workspace / "onnxlens-out" / "models.custom_op.onnx").exists()

    # Both problems are published for models.py only, on the statement that calls the op.
    call = statement_range(text, line_of(text, "custom-op-call"), "return scaled_tanh(x, 2.0)")
    stack = [  # the calls that led there, innermost first, each with its whole statement
        (
            uri,
            statement_range(text, line_of(text, "helper-call"), "return squash(x) + 1"),
            "postprocess (models.py:17)",
        ),
        (
            uri,
            statement_range(text, line_of(text, "forward-call"), "return postprocess(self.linear(x))"),
            "forward (models.py:26)",
        ),
    ]
    (fxe0011,) = problems_in(client, "FXE0011", uri)
    assert fxe0011.range == call
    assert (
        fxe0011.message
        == "No ONNX function is registered for onnxlens_test::scaled_tanh.default (called as onnxlens_test.scaled_tanh.default)."
    )
    assert fxe0011.severity == types.DiagnosticSeverity.Error and fxe0011.source == "onnxlens"
    assert fxe0011.code_description.href.endswith("#fxe0011-no-symbolic-function-for-call-function")
    assert [(r.location.uri, r.location.range, r.message) for r in fxe0011.related_information[:2]] == stack

    assert problems_in(client, "FXE0012", uri) == []  # the summary of the same cause: in the log only
    log = json.loads(pathlib.Path(job["sarif"]).read_text())
    assert [r["message"]["text"] for r in log["runs"][0]["results"] if r["ruleId"] == "FXE0012"] == [
        "Unsupported FX nodes: onnxlens_test.scaled_tanh.default."
    ]


async def test_a_capture_failure_is_one_problem_in_the_users_words(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    text = (workspace / "models.py").read_text()
    (job,) = (await export(client, uri=uri, target="branchy"))["jobs"]
    assert job["status"] == "failed"
    branch = statement_range(text, line_of(text, "data-dependent-branch"), "if x.sum() > 0:")
    (problem,) = [
        d for d in client.diagnostics[uri] if d.range.start.line == branch.start.line
    ]  # one problem for one cause
    assert problem.code == "FXE0017" and problem.range == branch
    assert problem.message.startswith("`if x.sum() > 0:` branches on a tensor's values")
    assert "torch.cond(" in problem.message and "u0" not in problem.message
    attempts = [r.message for r in problem.related_information]  # what each capture strategy said, at its line
    assert [m.split(" failed: ")[0] for m in attempts] == [
        "torch.export(strict=False)",
        "torch.export(strict=True, TorchDynamo)",
    ]
    assert all(r.location.uri == uri and r.location.range == branch for r in problem.related_information)


async def test_progress_arrives_in_order_and_success_clears_problems(client: LanguageClient, workspace: pathlib.Path):
    path = workspace / "models.py"
    uri = open_document(client, path)
    text = path.read_text()
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(  # mlp now returns no example inputs
            types.VersionedTextDocumentIdentifier(uri=uri, version=20),
            [
                types.TextDocumentContentChangeWholeDocument(
                    text=text.replace("def mlp():\n", "def mlp():\n    return MLPModel()\n")
                )
            ],
        )
    )
    (job,) = (await export(client, uri=uri, target="mlp"))["jobs"]
    assert job["status"] == "failed"
    mlp_line = text.splitlines().index("def mlp():")
    assert [
        d.range for d in problems(client, "export-failed").get(uri, []) if d.message.startswith("Export of mlp failed")
    ] == [statement_range(text, mlp_line, "def mlp():")]
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=21),
            [types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )

    client.progress_reports.clear()
    client.export_notifications.clear()
    (job,) = (await export(client, uri=uri, target="mlp", jobId="job-mlp"))["jobs"]
    assert job["status"] == "ok", job
    assert os.path.isfile(job["onnx"]) and os.path.isfile(job["sarif"])
    assert job["summary"]["inputs"] == 1 and job["summary"]["outputs"] == 1
    assert not [
        d for d in client.diagnostics[uri] if d.message.startswith("Export of mlp")
    ]  # the success cleared mlp's problem
    (reports,) = client.progress_reports.values()
    assert isinstance(reports[0], types.WorkDoneProgressBegin) and isinstance(reports[-1], types.WorkDoneProgressEnd)
    stages = [r.message.split(" ")[0] for r in reports[1:-1]]
    assert stages[:3] == ["load", "build", "capture"] and "translation" in stages and stages[-1] == "save"
    percents = [r.percentage for r in reports[1:-1]]
    assert percents == sorted(percents)
    # The same stages as custom notifications (what the VS Code extension shows), then the result.
    *progress, (finished_method, finished) = client.export_notifications
    assert [(method, p["jobId"], p["message"]) for method, p in progress] == [
        (EXPORT_PROGRESS, "job-mlp", r.message) for r in reports[1:-1]
    ]
    assert finished_method == EXPORT_FINISHED and finished == job


async def test_cancel_stops_a_running_export(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    sleeping = expect_stage(client, "job-slow", "build target")
    finished = expect_notification(client, lambda method, p: method == EXPORT_FINISHED and p["jobId"] == "job-slow")
    task = asyncio.ensure_future(export(client, uri=uri, target="slow", jobId="job-slow"))
    await asyncio.wait_for(sleeping, timeout=60)  # the target is sleeping in its own process now
    cancelled = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=CANCEL, arguments=[{"jobId": "job-slow"}])
    )
    (job,) = (await asyncio.wait_for(task, timeout=60))["jobs"]  # the target sleeps ten minutes
    assert cancelled == {"cancelled": True}
    assert job["status"] == "cancelled"
    assert job["message"] == "Cancelled during build target."
    assert (await finished)["status"] == "cancelled"
    text = (workspace / "models.py").read_text()
    (problem,) = problems_in(
        client, "export-cancelled", uri
    )  # the cancellation shows on the target, like other failures
    assert problem.range == statement_range(text, text.splitlines().index("def slow():"), "def slow():")
    assert problem.message == "Export of slow cancelled: Cancelled during build target."


async def test_a_hanging_target_hits_the_timeout(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    client.set_configuration(2, section="onnxlens.timeoutSeconds")
    try:
        (job,) = (await export(client, uri=uri, target="slow"))["jobs"]
    finally:
        client.set_configuration(120, section="onnxlens.timeoutSeconds")
    assert job["status"] == "timeout" and job["message"] == "Timed out after 2 s during build target."
    text = (workspace / "models.py").read_text()
    (problem,) = problems_in(client, "export-timeout", uri)  # where it hangs, as the process said before it died
    assert problem.range == statement_range(text, text.splitlines().index("    time.sleep(600)"), "time.sleep(600)")
    assert problem.message == "Export of slow timeout: Timed out after 2 s during build target."
    assert problem.severity == types.DiagnosticSeverity.Error


async def test_a_segfault_is_reported_and_the_next_export_works(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    text = (workspace / "models.py").read_text()
    (job,) = (await export(client, uri=uri, target="segfault"))["jobs"]
    assert (
        job["status"] == "crashed" and job["message"] == "The export process was killed by SIGSEGV during build target."
    )
    # No user frame survives a crash: the problem sits on the target's def line, in models.py only.
    (problem,) = problems_in(client, "export-crashed", uri)
    assert problem.range == statement_range(text, text.splitlines().index("def segfault():"), "def segfault():")
    assert (
        problem.message == "Export of segfault crashed: The export process was killed by SIGSEGV during build target."
    )
    assert problem.severity == types.DiagnosticSeverity.Error and problem.source == "onnxlens"
    (job,) = (await export(client, uri=uri, target="mlp"))["jobs"]
    assert job["status"] == "ok"


async def test_bad_target_return_is_located(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    text = (workspace / "models.py").read_text()
    (job,) = (await export(client, uri=uri, target="broken"))["jobs"]
    assert job["status"] == "failed" and "must return (model, args)" in job["message"]
    (problem,) = [d for d in problems_in(client, "export-failed", uri) if d.message.startswith("Export of broken")]
    assert problem.range == statement_range(
        text, text.splitlines().index("def broken():"), "def broken():"
    )  # the target that returned it
    assert problem.message == f"Export of broken failed: {job['message']}"


async def test_op_level_debug_inlay_hints_and_hover(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    text = (workspace / "models.py").read_text()
    client.refreshes.clear()
    (job,) = (await export(client, uri=uri, target="mlp", options={"opLevelDebug": True}))["jobs"]
    assert job["status"] == "ok"
    assert "inlayHint" in client.refreshes  # hints refresh after each export
    lines = text.splitlines()
    hints = await client.text_document_inlay_hint_async(
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri),
            range=types.Range(types.Position(0, 0), types.Position(len(lines), 0)),
        )
    )
    by_line = {h.position.line: h for h in hints}
    hidden, out = line_of(text, "mlp-hidden"), line_of(text, "mlp-out")
    assert set(by_line) >= {hidden, out}
    assert (
        "Gemm" in by_line[hidden].label
        and "Sigmoid" in by_line[hidden].label
        and by_line[hidden].label.startswith("Δ ")
    )
    assert by_line[hidden].position.character == len(lines[hidden])
    hover = await client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(hidden, 8))
    )
    assert "aten.linear.default" in hover.contents.value and "aten.sigmoid.default" in hover.contents.value
    assert "$(check)" in hover.contents.value and "3×8" in hover.contents.value


async def test_code_lenses_on_targets(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    text = (workspace / "models.py").read_text()
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    exports = [lens_ for lens_ in lenses if lens_.command.title.endswith("Export to ONNX")]
    assert [lens_.command.arguments[0]["target"] for lens_ in exports] == [
        "custom_op",
        "branchy",
        "mlp",
        "slow",
        "segfault",
        "broken",
    ]
    assert exports[2].range.start.line == text.splitlines().index("def mlp():") - 1
    # Through the extension's command, which shows the result as every export does:
    assert [
        (lens_.command.command, list(lens_.command.arguments))
        for lens_ in lenses
        if lens_.range == exports[2].range and "Export" in lens_.command.title
    ] == [
        (EXPORT_TARGET, [{"uri": uri, "target": "mlp"}]),
        (EXPORT_TARGET, [{"uri": uri, "target": "mlp", "options": {"opLevelDebug": True}}]),
        (EXPORT_TARGET, [{"uri": uri, "target": "mlp", "options": {"verify": True}}]),
    ]
    assert any(
        lens_.command.title == "Open SARIF log" and lens_.command.command == "onnxlens.openSarifLog" for lens_ in lenses
    )


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    lines = text.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        assert edit.range.start == edit.range.end  # the fixes only insert
        line = edit.range.start.line
        lines[line:line] = [edit.new_text]
    return "".join(lines)


async def test_stub_quick_fix_then_implementation_makes_fxe0011_go_away(
    client: LanguageClient, workspace: pathlib.Path
):
    path = workspace / "models.py"
    uri = open_document(client, path)
    await export(client, uri=uri, target="custom_op")
    (fxe0011,) = problems_in(client, "FXE0011", uri)
    client.traces.clear()
    answers = [
        await code_actions(client, uri, fxe0011.range, [fxe0011]) for _ in range(3)
    ]  # asked again, answered again
    for actions in answers:
        assert [(a.title, a.kind, list(a.diagnostics), a.is_preferred) for a in actions] == [
            (
                "Insert generated ONNX function for onnxlens_test::scaled_tanh (verified)",
                types.CodeActionKind.QuickFix,
                [fxe0011],
                True,
            ),
            (
                "Add an ONNX function stub for onnxlens_test::scaled_tanh and register it",
                types.CodeActionKind.QuickFix,
                [fxe0011],
                False,
            ),
        ]
    line = line_of(path.read_text(), "custom-op-call") + 1
    assert (
        client.traces == [f"Code actions at models.py:{line} (invoked): 2"] * 3
    )  # what the e2e test reads in VS Code's log
    _, stub = answers[-1]
    fixed = apply_edits(path.read_text(), stub.edit.changes[uri])
    assert "def onnxlens_test_scaled_tanh(x, scale: float):" in fixed
    compile(fixed, "models.py", "exec")  # the template is complete Python
    implemented = fixed.replace(
        "return op.Identity(x)", "return op.Mul(op.Tanh(x), op.CastLike(op.Constant(value_float=scale), x))"
    )
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            [types.TextDocumentContentChangeWholeDocument(text=implemented)],
        )
    )
    (job,) = (await export(client, uri=uri, target="custom_op"))["jobs"]  # the unsaved editor text is exported
    assert job["status"] == "ok", job
    assert not [d for d in client.diagnostics[uri] if d.code == "FXE0011"]
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=3),
            [types.TextDocumentContentChangeWholeDocument(text=path.read_text())],
        )
    )


async def test_generated_function_quick_fix_makes_the_export_succeed_and_match(
    client: LanguageClient, workspace: pathlib.Path
):
    path = workspace / "models.py"
    uri = open_document(client, path)
    await export(client, uri=uri, target="custom_op")
    (fxe0011,) = problems_in(client, "FXE0011", uri)
    actions = await code_actions(client, uri, fxe0011.range, [fxe0011])
    (generated,) = [
        a for a in actions if a.title == "Insert generated ONNX function for onnxlens_test::scaled_tanh (verified)"
    ]
    fixed = apply_edits(path.read_text(), generated.edit.changes[uri])
    assert "def onnxlens_test_scaled_tanh(x, scale: float):" in fixed and "TODO" not in fixed
    assert fixed.endswith(
        'exporter.default_registry().register_op(onnxlens_test_scaled_tanh, "onnxlens_test", "scaled_tanh", "default")\n'
    )
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=30),
            [types.TextDocumentContentChangeWholeDocument(text=fixed)],
        )
    )
    (job,) = (await export(client, uri=uri, target="custom_op"))["jobs"]  # the unsaved editor text is exported
    assert job["status"] == "ok", job
    assert problems_in(client, "FXE0011", uri) == [] and problems_in(client, "FXE0013", uri) == []
    results = json.loads(pathlib.Path(job["sarif"]).read_text())["runs"][0]["results"]
    assert not [r for r in results if r["ruleId"] in ("FXE0011", "FXE0013") and r.get("level") in ("error", "warning")]
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=31),
            [types.TextDocumentContentChangeWholeDocument(text=path.read_text())],
        )
    )


async def test_export_target_quick_fix_produces_an_exportable_target(client: LanguageClient, workspace: pathlib.Path):
    path = workspace / "models.py"
    uri = open_document(client, path)
    text = path.read_text()
    line = line_of(text, "untargeted")
    at = types.Range(types.Position(line, 6), types.Position(line, 6))
    answers = [await code_actions(client, uri, at, []) for _ in range(3)]  # asked again, answered again
    for actions in answers:  # (MLPModel has a target already: no action for it)
        assert [a.title for a in actions] == ["Create an export target for Untargeted"]
    (action,) = answers[-1]
    new_path = workspace / "untargeted.py"
    new_path.write_text(apply_edits(text, action.edit.changes[uri]))
    (job,) = (await export(client, uri=new_path.as_uri(), target="export_untargeted"))["jobs"]
    assert job["status"] == "ok", job


async def test_bad_requests_get_clear_errors(client: LanguageClient, workspace: pathlib.Path):
    uri = (workspace / "models.py").as_uri()
    for args, code, message in [
        ({"uri": (workspace / "nope.py").as_uri()}, ErrorCode.NO_SUCH_FILE, "No such file"),
        ({"uri": "untitled:Untitled-1"}, ErrorCode.NOT_ON_DISK, "save it first"),
        (
            {"uri": (workspace / "custom_ops.py").as_uri()},
            ErrorCode.NO_EXPORT_TARGET,
            "no function decorated with @exporter.export_target",
        ),
        ({"uri": uri, "target": "nope"}, ErrorCode.UNKNOWN_TARGET, "no export target 'nope'"),
        ({"uri": uri, "target": "mlp", "options": {"opset": "18"}}, ErrorCode.INVALID_OPTIONS, "must be an integer"),
        (
            {"uri": uri, "target": "mlp", "options": {"dynamic": True}},
            ErrorCode.INVALID_OPTIONS,
            "Unknown export option 'dynamic'",
        ),
        (
            {},
            JsonRpcInvalidParams.CODE,
            "^onnxlens.server.export: missing argument 'uri'$",
        ),  # more in test_server_input.py
    ]:
        with pytest.raises(JsonRpcException, match=message) as raised:
            await export(client, **args)
        assert raised.value.code == code
    listed = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=LIST_TARGETS, arguments=[{"uri": uri}])
    )
    assert [t["name"] for t in listed["targets"]] == ["custom_op", "branchy", "mlp", "slow", "segfault", "broken"]


async def test_settings_changes_are_checked_when_they_happen(client: LanguageClient):
    client.set_configuration({"timeoutSeconds": 120, "opset": "18"}, section="onnxlens")
    try:
        waiter = client.protocol.wait_for_notification_async(types.WINDOW_SHOW_MESSAGE)
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        shown = await asyncio.wait_for(waiter, timeout=10)
    finally:
        client.set_configuration({"timeoutSeconds": 120}, section="onnxlens")
    assert shown.type == types.MessageType.Warning
    assert (
        shown.message
        == "onnxlens: Invalid onnxlens settings: export option 'opset_version' must be an integer, got '18'"
    )


async def test_a_newer_request_for_the_same_target_wins(client: LanguageClient, workspace: pathlib.Path):
    uri = open_document(client, workspace / "models.py")
    older_sleeping = expect_stage(client, "older", "build target")
    older = asyncio.ensure_future(export(client, uri=uri, target="slow", jobId="older"))
    await asyncio.wait_for(older_sleeping, timeout=60)
    newer_sleeping = expect_stage(client, "newer", "build target")
    newer = asyncio.ensure_future(export(client, uri=uri, target="slow", jobId="newer"))
    (job,) = (await asyncio.wait_for(older, timeout=10))["jobs"]
    assert job["status"] == "cancelled"
    await asyncio.wait_for(newer_sleeping, timeout=60)  # it started once the older one had stopped
    await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=CANCEL, arguments=[{"jobId": "newer"}])
    )
    (job,) = (await asyncio.wait_for(newer, timeout=10))["jobs"]
    assert job["status"] == "cancelled"


async def test_problems_follow_edits_above_them(client: LanguageClient, workspace: pathlib.Path):
    path = workspace / "models.py"
    uri = open_document(client, path)
    text = path.read_text()
    await export(client, uri=uri, target="custom_op")
    call = "return scaled_tanh(x, 2.0)"
    assert [d.range for d in problems(client, "FXE0011")[uri]] == [
        statement_range(text, line_of(text, "custom-op-call"), call)
    ]
    waiter = client.protocol.wait_for_notification_async(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=10),
            [
                types.TextDocumentContentChangePartial(
                    range=types.Range(types.Position(0, 0), types.Position(0, 0)), text="import os\nimport sys\n"
                )
            ],
        )
    )
    await asyncio.wait_for(waiter, timeout=10)
    edited = "import os\nimport sys\n" + text
    (fxe0011,) = problems_in(client, "FXE0011", uri)
    assert fxe0011.range == statement_range(edited, line_of(edited, "custom-op-call"), call)
    assert [r.location.range for r in fxe0011.related_information[:2]] == [
        statement_range(edited, line_of(edited, "helper-call"), "return squash(x) + 1"),
        statement_range(edited, line_of(edited, "forward-call"), "return postprocess(self.linear(x))"),
    ]
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=11),
            [types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


GENERATION_TARGET = """\
import torch
import exporter
from transformers import AutoModelForCausalLM, GPT2Config


@exporter.export_target(task="text-generation")
def lm():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=256, eos_token_id=2, pad_token_id=0)
    return AutoModelForCausalLM.from_config(config).eval()
"""


async def test_text_generation_target_exports_for_generation(client: LanguageClient, workspace: pathlib.Path):
    path = workspace / "lm.py"
    path.write_text(GENERATION_TARGET)
    uri = open_document(client, path)
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    assert [(lens_.command.title, lens_.command.command, list(lens_.command.arguments)) for lens_ in lenses] == [
        ("$(export) Export for Generation", EXPORT_TARGET, [{"uri": uri, "target": "lm"}])
    ]
    (job,) = (await export(client, uri=uri, target="lm"))["jobs"]
    assert job["status"] == "ok", job
    folder = os.path.dirname(job["onnx"])
    assert os.path.basename(job["onnx"]) == "model.onnx" and os.path.isfile(os.path.join(folder, "genai_config.json"))
    assert job["summary"]["generation"] == "16 greedy tokens for 2 prompts identical to generate()"
    assert json.load(open(job["sarif"]))["runs"][0]["results"]  # the log beside it, as for every export


async def test_problems_carry_the_document_version_the_export_started_from(client: LanguageClient, workspace):
    """An edit while the export runs makes a newer version; the problems are those of the version exported."""
    path = workspace / "versioned.py"
    shutil.copy(workspace / "models.py", path)
    uri, text = path.as_uri(), path.read_text()
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "python", 7, text)))

    def edit(version: int, line: int, new_text: str) -> None:
        at = types.Range(types.Position(line, 0), types.Position(line, 0))
        document = types.VersionedTextDocumentIdentifier(uri=uri, version=version)
        change = types.TextDocumentContentChangePartial(range=at, text=new_text)
        client.text_document_did_change(types.DidChangeTextDocumentParams(document, [change]))

    edit(8, 0, "# edited\n")  # unsaved: the export sees the editor's text
    started = expect_notification(client, lambda method, p: method == EXPORT_PROGRESS and p["jobId"] == "versioned")
    exported = asyncio.ensure_future(export(client, uri=uri, target="broken", jobId="versioned"))
    await started
    edit(9, len(text.splitlines()) + 1, "# more\n")  # while the export runs, below every line it reports
    params = await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    while params.uri != uri:
        params = await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    (job,) = (await exported)["jobs"]
    assert job["status"] == "failed" and "must return (model, args)" in job["message"]
    assert params.version == 8
    (problem,) = params.diagnostics
    assert problem.message.startswith("Export of broken")
    assert problem.range.start.line == text.splitlines().index("def broken():") + 1  # the target's line in version 8
