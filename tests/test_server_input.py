"""Bad input to the language server: broken message framing, wrong command arguments and settings,
files that do not parse or decode, targets that cannot be exported, and a long file's lenses.

The framing tests write bytes to a raw server process; the rest drive the server with pytest-lsp.
None of them exports anything: every request here is refused (or answered) before a worker starts.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys
import textwrap
import time

import pytest
import pytest_lsp
from lsp_client import StdioClient, framed
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

from onnxlens_server.framing import STALL_SECONDS
from onnxlens_server.protocol import CANCEL, EXPORT, GRAPH, LIST_TARGETS, ErrorCode

INVALID_PARAMS = -32602

# --- message framing: a raw server process (tests/lsp_client.py) -------------------------------------

HOVER = {
    "id": 2,
    "method": "textDocument/hover",
    "params": {"textDocument": {"uri": "file:///x.py"}, "position": {"line": 0, "character": 0}},
}
HOVER_BODY = len(framed(HOVER).partition(b"\r\n\r\n")[2])


@pytest.mark.parametrize(
    "bad, reason",
    [
        (b"Content-Length: abc\r\n\r\n{}", "Content-Length 'abc' is not a positive integer"),
        (b"Content-Length: -5\r\n\r\n{}", "Content-Length '-5' is not a positive integer"),
        (b"Content-Length: 0\r\n\r\n", "Content-Length '0' is not a positive integer"),
        (
            b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{}",
            "a message without a Content-Length header",
        ),
        (b"Content-Length 12\r\n\r\n{}", "not a header line: b'Content-Length 12\\r\\n'"),
        (
            framed(HOVER, HOVER_BODY - 10),
            f"the {HOVER_BODY - 10}-byte body is not one JSON message (a wrong Content-Length?)",
        ),  # too small
        (
            framed(HOVER, HOVER_BODY + len(framed(HOVER))),
            f"the {HOVER_BODY + len(framed(HOVER))}-byte body is not one JSON message (a wrong Content-Length?)",
        ),  # too large: swallows the next message
        (
            framed(HOVER, HOVER_BODY + 10_000),
            f"the message stopped arriving ({STALL_SECONDS:g} s without a byte of it)",
        ),  # too large: waits for more
    ],
    ids=[
        "non-numeric",
        "negative",
        "zero",
        "missing",
        "malformed-header",
        "too-small",
        "too-large-swallows-next",
        "too-large-stalls",
    ],
)
def test_bad_framing_makes_the_server_exit_saying_why(bad: bytes, reason: str):
    """Before, the server stayed alive and never answered again; now it exits, the client restarts it."""
    server = StdioClient()
    try:
        assert "capabilities" in server.initialize(None).result
        server.write(bad + framed(HOVER))  # a valid request follows: it must not be answered as if nothing happened
        assert server.process.wait(timeout=STALL_SECONDS + 20) == 1
        server.wait_closed(timeout=10)
    finally:
        server.close()
    assert f"onnxlens-server: bad message from the client: {reason}; exiting" in server.stderr_text()
    assert server.received[-1].message.get("id") == 1  # nothing came after the initialize answer: not the hover's


def test_well_framed_messages_in_any_chunks_are_answered():
    server = StdioClient()
    try:
        data = framed(
            {"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": {}}}
        ) + framed(HOVER)
        for i in range(0, len(data), 7):  # split anywhere, headers included
            server.write(data[i : i + 7])
            time.sleep(0.001)
        assert "capabilities" in server.wait_for(lambda m: m.get("id") == 1, timeout=60).message["result"]
        assert server.wait_for(lambda m: m.get("id") == 2, timeout=60).message == {
            "jsonrpc": "2.0",
            "id": 2,
            "result": None,
        }
        server.write(framed({"id": 3, "method": "shutdown"}) + framed({"method": "exit"}))
        assert server.process.wait(timeout=20) == 0
    finally:
        server.close()


# --- the rest: pytest-lsp -----------------------------------------------------------------------

on_module_loop = pytest.mark.asyncio(loop_scope="module")  # the tests share one server

TARGETS = textwrap.dedent("""\
    import torch

    import exporter


    class Model(torch.nn.Module):
        def forward(self, x):
            return x + 1

        @exporter.export_target
        def as_method(self):
            return self, (torch.randn(2),)


    @exporter.export_target
    def first():
        @exporter.export_target
        def nested():
            return Model(), (torch.randn(2),)

        return Model(), (torch.randn(2),)


    if True:
        @exporter.export_target
        def second():
            return Model(), (torch.randn(3),)


    class Untargeted(torch.nn.Module):
        def forward(self, x):
            return x * 2
""")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("ws")
    (root / "targets.py").write_text(TARGETS)
    (root / "latin1.py").write_bytes("# café\nimport exporter\n".encode("latin-1"))
    return root


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=[sys.executable, "-m", "onnxlens_server"]))
async def client(lsp_client: LanguageClient, workspace: pathlib.Path):
    capabilities = pytest_lsp.client_capabilities("visual-studio-code")
    await lsp_client.initialize_session(types.InitializeParams(capabilities=capabilities, root_uri=workspace.as_uri()))
    lsp_client.set_configuration({}, section="onnxlens")
    yield
    await lsp_client.shutdown_session()


async def execute(client: LanguageClient, command: str, *arguments) -> dict:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=command, arguments=list(arguments))
    )


async def refused(client: LanguageClient, command: str, *arguments) -> tuple[int, str, object]:
    """(code, message, data) of the error a command is answered with."""
    with pytest.raises(JsonRpcException) as raised:
        await execute(client, command, *arguments)
    return raised.value.code, raised.value.message, raised.value.data


def open_document(client: LanguageClient, path: pathlib.Path, text: str) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
    )
    return uri


def change_document(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            [types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


async def lenses_by_target(client: LanguageClient, uri: str) -> dict[str, int]:
    """The export lenses of `uri`: target -> the line they sit on."""
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    return {
        lens_.command.arguments[0]["target"]: lens_.range.start.line
        for lens_ in lenses
        if lens_.command.title.endswith("Export to ONNX")
    }


async def code_actions(client: LanguageClient, uri: str, at: types.Range) -> list[types.CodeAction]:
    return list(
        await client.text_document_code_action_async(
            types.CodeActionParams(
                types.TextDocumentIdentifier(uri),
                at,
                types.CodeActionContext(diagnostics=[], trigger_kind=types.CodeActionTriggerKind.Invoked),
            )
        )
    )


EXPORT_FIELDS = "uri, target, line, all, options, jobId"


@on_module_loop
@pytest.mark.parametrize(
    "arguments, message",
    [
        ((), f"onnxlens.server.export: expects one argument, an object with {EXPORT_FIELDS}"),
        (([],), f"onnxlens.server.export: expects one argument, an object with {EXPORT_FIELDS}"),
        (
            ({"uri": "file:///a.py"}, {}),
            f"onnxlens.server.export: expects one argument, an object with {EXPORT_FIELDS}",
        ),
        (({},), "onnxlens.server.export: missing argument 'uri'"),
        (
            ({"uri": "file:///a.py", "target": "mlp", "jobid": "j"},),
            f"onnxlens.server.export: unknown argument 'jobid' (known: {EXPORT_FIELDS})",
        ),
        (({"uri": 5},), "onnxlens.server.export: argument 'uri' must be a string, got 5"),
        (
            ({"uri": "file:///a.py", "jobId": ["j"]},),
            "onnxlens.server.export: argument 'jobId' must be a string or null, got [\"j\"]",
        ),
        (
            ({"uri": "file:///a.py", "line": "3"},),
            "onnxlens.server.export: argument 'line' must be an integer, got \"3\"",
        ),
        (
            ({"uri": "file:///a.py", "line": 1.5},),
            "onnxlens.server.export: argument 'line' must be an integer, got 1.5",
        ),
        (({"uri": "file:///a.py", "line": -1},), "onnxlens.server.export: argument 'line' must be 0 or more, got -1"),
        (
            ({"uri": "file:///a.py", "all": "false"},),
            "onnxlens.server.export: argument 'all' must be a boolean, got \"false\"",
        ),
        (
            ({"uri": "file:///a.py", "target": True},),
            "onnxlens.server.export: argument 'target' must be a string or null, got true",
        ),
        (
            ({"uri": "file:///a.py", "options": []},),
            "onnxlens.server.export: argument 'options' must be an object, got []",
        ),
    ],
)
async def test_bad_export_arguments_are_invalid_params_in_one_line(
    client: LanguageClient, arguments: tuple, message: str
):
    assert await refused(client, EXPORT, *arguments) == (INVALID_PARAMS, message, None)


@on_module_loop
@pytest.mark.parametrize(
    "command, arguments, message",
    [
        (CANCEL, [{"jobId": ["j"]}], "onnxlens.server.cancel: argument 'jobId' must be a string, got [\"j\"]"),
        (CANCEL, [], "onnxlens.server.cancel: expects one argument, an object with jobId"),
        (LIST_TARGETS, [{"uri": None}], "onnxlens.server.listTargets: argument 'uri' must be a string, got null"),
        (GRAPH, [{"uri": "file:///a.py"}], "onnxlens.server.graph: missing argument 'target'"),
        (
            GRAPH,
            [{"uri": "file:///a.py", "target": None}],
            "onnxlens.server.graph: argument 'target' must be a string, got null",
        ),
        (
            GRAPH,
            [{"uri": "file:///a.py", "target": "t", "line": 3}],
            "onnxlens.server.graph: unknown argument 'line' (known: uri, target)",
        ),
    ],
)
async def test_bad_arguments_of_other_commands(client: LanguageClient, command: str, arguments: list, message: str):
    assert await refused(client, command, *arguments) == (INVALID_PARAMS, message, None)


@on_module_loop
async def test_missing_arguments_field_is_invalid_params(client: LanguageClient):
    with pytest.raises(JsonRpcException) as raised:  # `arguments` left out of the request, not an empty list
        await client.workspace_execute_command_async(types.ExecuteCommandParams(command=CANCEL))
    assert (raised.value.code, raised.value.message) == (
        INVALID_PARAMS,
        "onnxlens.server.cancel: expects one argument, an object with jobId",
    )


@on_module_loop
@pytest.mark.parametrize(
    "configuration, options, message",
    [
        (
            {"timeoutSeconds": "abc"},
            {},
            "Invalid onnxlens settings: timeoutSeconds must be a positive number of seconds, got 'abc'",
        ),
        (
            {"timeoutSeconds": -1},
            {},
            "Invalid onnxlens settings: timeoutSeconds must be a positive number of seconds, got -1",
        ),
        (
            {"timeoutSeconds": 0},
            {},
            "Invalid onnxlens settings: timeoutSeconds must be a positive number of seconds, got 0",
        ),
        (
            {"timeoutSeconds": True},
            {},
            "Invalid onnxlens settings: timeoutSeconds must be a positive number of seconds, got True",
        ),
        ({"outputFolder": 5}, {}, "Invalid onnxlens settings: outputFolder must be a string (a folder path), got 5"),
        ({}, {"opset": "18"}, "Invalid onnxlens settings: export option 'opset_version' must be an integer, got '18'"),
    ],
)
async def test_bad_settings_are_invalid_params(
    client: LanguageClient, workspace: pathlib.Path, configuration: dict, options: dict, message: str
):
    client.set_configuration(configuration, section="onnxlens")
    try:
        answer = await refused(
            client, EXPORT, {"uri": (workspace / "targets.py").as_uri(), "target": "first", "options": options}
        )
    finally:
        client.set_configuration({}, section="onnxlens")
    assert answer == (INVALID_PARAMS, message, None)


@on_module_loop
async def test_a_bad_setting_is_reported_when_it_is_set(client: LanguageClient):
    client.set_configuration({"timeoutSeconds": "abc"}, section="onnxlens")
    try:
        shown = client.protocol.wait_for_notification_async(types.WINDOW_SHOW_MESSAGE)
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        shown = await asyncio.wait_for(shown, timeout=60)
    finally:
        client.set_configuration({}, section="onnxlens")
    assert (shown.type, shown.message) == (
        types.MessageType.Warning,
        "onnxlens: Invalid onnxlens settings: timeoutSeconds must be a positive number of seconds, got 'abc'",
    )


@on_module_loop
@pytest.mark.parametrize("command", [EXPORT, LIST_TARGETS])
async def test_a_file_that_is_not_utf8_is_refused_in_one_line(
    client: LanguageClient, workspace: pathlib.Path, command: str
):
    path = workspace / "latin1.py"
    assert await refused(client, command, {"uri": path.as_uri()}) == (
        ErrorCode.UNREADABLE_FILE,
        f"{path} is not UTF-8 text (byte 0xe9 at offset 5): save it as UTF-8",
        None,
    )


@on_module_loop
async def test_only_module_level_functions_are_targets(client: LanguageClient, workspace: pathlib.Path):
    """The worker looks targets up in the module's namespace: a method or a nested function is not there."""
    uri = (workspace / "targets.py").as_uri()
    listed = await execute(client, LIST_TARGETS, {"uri": uri})
    assert listed["targets"] == [{"name": "first", "line": 15}, {"name": "second", "line": 25}]
    assert await lenses_by_target(client, open_document(client, workspace / "targets.py", TARGETS)) == {
        "first": 14,
        "second": 24,
    }
    assert await refused(client, EXPORT, {"uri": uri, "target": "as_method"}) == (
        ErrorCode.UNKNOWN_TARGET,
        "targets.py has no export target 'as_method'; targets: first, second",
        None,
    )


@on_module_loop
async def test_a_syntax_error_keeps_the_lenses_and_an_export_reports_its_line(
    client: LanguageClient, workspace: pathlib.Path
):
    path = workspace / "syntax.py"
    path.write_text(TARGETS)
    uri = open_document(client, path, TARGETS)
    good = await lenses_by_target(client, uri)
    assert good == {"first": 14, "second": 24}

    untargeted = types.Range(types.Position(29, 6), types.Position(29, 6))
    assert [a.title for a in await code_actions(client, uri, untargeted)] == ["Create an export target for Untargeted"]

    broken = TARGETS.replace("        return Model(), (torch.randn(3),)", "        return Model(), (torch.randn(3),) +")
    change_document(client, uri, 2, broken)
    assert await lenses_by_target(client, uri) == good  # the last good lenses stay while the file does not parse
    assert await code_actions(client, uri, untargeted) == []  # their lines may be stale: no edit is offered
    published = client.protocol.wait_for_notification_async(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    assert await refused(client, EXPORT, {"uri": uri, "target": "first"}) == (
        ErrorCode.SYNTAX_ERROR,
        "syntax.py:27: SyntaxError: invalid syntax",
        None,
    )
    published = await asyncio.wait_for(published, timeout=60)
    (problem,) = published.diagnostics
    assert (published.uri, problem.code, problem.message, problem.severity) == (
        uri,
        "syntax-error",
        "SyntaxError: invalid syntax",
        types.DiagnosticSeverity.Error,
    )
    assert problem.range == types.Range(types.Position(26, 8), types.Position(26, len(broken.splitlines()[26])))

    published = client.protocol.wait_for_notification_async(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    change_document(client, uri, 3, TARGETS)
    assert await lenses_by_target(client, uri) == good
    published = await asyncio.wait_for(published, timeout=60)  # the file parses again: its syntax problem goes
    assert (published.uri, list(published.diagnostics)) == (uri, [])


def long_source(lines: int) -> str:
    """A model file of about `lines` lines: a module class and a target for it, over and over."""
    block = textwrap.dedent("""\
        class Block{i}(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(16, 32)
                self.norm = nn.LayerNorm(32)

            def forward(self, x):
                h = self.linear(x)
                h = torch.relu(self.norm(h)) * 2.0 + x.sum(dim=-1, keepdim=True)
                return h[:, :8]


        @exporter.export_target
        def block{i}():
            return Block{i}(), (torch.randn(2, 16),)


    """)
    return "import torch\nfrom torch import nn\nimport exporter\n\n\n" + "".join(
        block.format(i=i) for i in range(lines // block.count("\n"))
    )


@on_module_loop
async def test_hovers_do_not_wait_for_the_lenses_of_a_long_file(client: LanguageClient, workspace: pathlib.Path):
    """Each edit makes the editor ask for lenses again; a hover asked meanwhile is answered first.
    (benchmarks/long_file_hovers.py measures how quickly.)"""
    text = long_source(10_000)
    uri = open_document(client, workspace / "long.py", text)
    hover = types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(5, 0))
    order = []
    for version in range(2, 8):
        change_document(client, uri, version, f"{text}# edit {version}\n")
        lenses = asyncio.wrap_future(
            client.text_document_code_lens(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
        )  # sent now
        lenses.add_done_callback(lambda _: order.append("lenses"))
        await client.text_document_hover_async(hover)
        order.append("hover")
        assert len(await lenses) == 3 * text.count("@exporter.export_target")  # export, with op-level debug, verified
    assert order == ["hover", "lenses"] * 6
