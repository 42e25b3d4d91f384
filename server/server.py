"""The pygls wiring: which LSP messages and commands the server handles, and the module that answers each.

Commands and custom notifications are listed in `onnxlens_server.protocol`; exports run in
`commands`, document features in `features`, per-target results live in `state`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import attrs
from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from onnxlens_server import documents, features, notebooks, protocol
from onnxlens_server.commands import Commands
from onnxlens_server.logs import log_to_client
from onnxlens_server.settings import export_settings, read_configuration
from onnxlens_server.state import States, edit_changes
from onnxlens_server.worker import WorkerPool

VERSION = "0.1.0"
logger = logging.getLogger(__name__)


class OnnxlensServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("onnxlens", VERSION, notebook_document_sync=notebooks.SYNC_OPTIONS)
        self.pool = WorkerPool()
        self.states = States()
        self.commands = Commands(self, self.states, self.pool)

    def line_text(self, path: str, line: int) -> str | None:
        return documents.line_text(self.workspace, path, line)

    def text_of(self, uri: str) -> str | None:
        try:
            return documents.read(self.workspace, uri).source
        except protocol.RequestError:
            return None


server = OnnxlensServer()


# Commands take their JSON arguments as sent (`*arguments`) and check them in `protocol.parse_arguments`.


@server.command(protocol.EXPORT)
async def export_command(ls: OnnxlensServer, *arguments: Any) -> dict[str, Any]:
    return await ls.commands.export(protocol.parse_arguments(protocol.EXPORT, protocol.ExportArgs, arguments))


@server.command(protocol.LIST_TARGETS)
async def list_targets_command(ls: OnnxlensServer, *arguments: Any) -> dict[str, Any]:
    return await ls.commands.list_targets(
        protocol.parse_arguments(protocol.LIST_TARGETS, protocol.DocumentArgs, arguments)
    )


@server.command(protocol.CANCEL)
def cancel_command(ls: OnnxlensServer, *arguments: Any) -> dict[str, Any]:
    return ls.commands.cancel(protocol.parse_arguments(protocol.CANCEL, protocol.CancelArgs, arguments))


@server.command(protocol.GRAPH)
async def graph_command(ls: OnnxlensServer, *arguments: Any) -> dict[str, Any]:
    return await ls.commands.graph(protocol.parse_arguments(protocol.GRAPH, protocol.TargetArgs, arguments))


@server.command(protocol.GRAPH_FILE)
async def graph_file_command(ls: OnnxlensServer, *arguments: Any) -> dict[str, Any]:
    return await ls.commands.graph_file(protocol.parse_arguments(protocol.GRAPH_FILE, protocol.DocumentArgs, arguments))


@server.command(protocol.COMPARE_GRAPHS)
async def compare_graphs_command(ls: OnnxlensServer, *arguments: Any) -> dict[str, Any]:
    args = protocol.parse_arguments(protocol.COMPARE_GRAPHS, protocol.CompareArgs, arguments)
    return await ls.commands.compare_graphs(args)


@server.command(protocol.TENSOR)
async def tensor_command(ls: OnnxlensServer, *arguments: Any) -> dict[str, Any]:
    return await ls.commands.tensor(protocol.parse_arguments(protocol.TENSOR, protocol.TensorArgs, arguments))


@server.feature(types.INITIALIZED)
async def initialized(ls: OnnxlensServer, params: types.InitializedParams) -> None:
    log_to_client(ls)  # the fork server starts with the first model file (`Commands.discover`)


@server.feature(types.SHUTDOWN)
def shutdown(ls: OnnxlensServer, params: None) -> None:
    ls.pool.close()
    ls.commands.discoveries.close()


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def did_change_configuration(ls: OnnxlensServer, params: types.DidChangeConfigurationParams) -> None:
    """Exports read the settings when they start; a bad value is reported now rather than then."""
    configuration = await read_configuration(ls, None)
    try:
        export_settings(configuration, {})
    except protocol.RequestError as e:
        logger.warning("%s", e)
        ls.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"onnxlens: {e}"))
    else:
        logger.info("Settings changed: %s", configuration)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: OnnxlensServer, params: types.DidChangeTextDocumentParams) -> None:
    """Keep problems and inline traces on their lines while the file is edited (until the next export)."""
    path = to_fs_path(params.text_document.uri)
    changes = edit_changes(params)
    if path and changes and ls.states.follow_edits(path, changes):
        ls.commands.publish(path, params.text_document.version)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: OnnxlensServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.commands.discoveries.forget(params.text_document.uri)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
def notebook_did_change(ls: OnnxlensServer, params: types.DidChangeNotebookDocumentParams) -> None:
    """An edited cell's problems and traces go (its lines are stale); all the notebook's when cells were moved,
    deleted or changed language."""
    for key in ls.states.clear(notebooks.stale_cells(params, ls.workspace)):
        ls.commands.publish(key, None)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
def notebook_did_close(ls: OnnxlensServer, params: types.DidCloseNotebookDocumentParams) -> None:
    for key in ls.states.clear([cell.uri for cell in params.cell_text_documents]):
        ls.commands.publish(key, None)
    ls.commands.discoveries.forget(params.notebook_document.uri)


@server.feature(types.TEXT_DOCUMENT_CODE_LENS)
async def code_lens(ls: OnnxlensServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    uri = params.text_document.uri
    text, found = await ls.commands.discover(uri)
    if text.notebook is not None:  # a cell: the targets defined in it
        found = text.notebook.in_cell(found, uri)
    return features.code_lenses(uri, text.path, found, ls.states)


@server.feature(types.TEXT_DOCUMENT_INLAY_HINT)
def inlay_hints(ls: OnnxlensServer, params: types.InlayHintParams) -> list[types.InlayHint]:
    key = documents.key_of(params.text_document.uri)
    return features.inlay_hints(key, params.range, ls.states, ls.line_text) if key else []


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: OnnxlensServer, params: types.HoverParams) -> types.Hover | None:
    return features.hover(documents.key_of(params.text_document.uri), params.position.line, ls.states)


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix])
)
async def code_actions(ls: OnnxlensServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    text, found = await ls.commands.discover(uri)
    asked = params
    if text.notebook is not None:  # a cell: the program's lines in, the cells' edits out
        asked = attrs.evolve(params, range=text.notebook.to_program(params.range, uri) or params.range)
    actions = await features.code_actions(uri, text.source, found, asked, ls.text_of, ls.commands.discoveries.run)
    if text.notebook is not None:
        actions = text.notebook.in_cells(actions)
    if ls.protocol.trace != types.TraceValue.Off:  # the client asked for a trace (VS Code: the log level Trace)
        line = params.range.start.line
        trigger = params.context.trigger_kind.name.lower() if params.context.trigger_kind else "unknown"
        ls.log_trace(
            types.LogTraceParams(
                f"Code actions at {os.path.basename(to_fs_path(uri) or uri)}:{line + 1} ({trigger}): {len(actions)}"
            )
        )
    return actions
