"""Notebooks in the language server: LSP 3.17 notebook sync driven by pytest-lsp as VS Code drives it
(cells as text documents with VS Code's cell URIs, fragments escaped), exports of targets defined in
cells, and every result on the cell and line it belongs to."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from exporter.diagnostics.notebook_program import program
from onnxlens_server.protocol import EXPORT, EXPORT_FINISHED, EXPORT_PROGRESS, EXPORT_TARGET, GRAPH

IMPORTS = "import torch\n%load_ext autoreload\nimport exporter"
NOTES = "# The model\nA custom op without an ONNX translation."
MODEL = """@torch.library.custom_op("nbtest::twist", mutates_args=())
def twist(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twist.register_fake
def _(x):
    return torch.empty_like(x)


class Net(torch.nn.Module):
    def forward(self, x):
        return twist(x) + 1"""
TARGET = """@exporter.export_target
def net():
    return Net(), (torch.randn(2, 3),)"""
SMALL = """class Small(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid(x) * 2


@exporter.export_target
def small():
    return Small(), (torch.randn(2, 3),)"""
KINDS = {"python": types.NotebookCellKind.Code, "markdown": types.NotebookCellKind.Markup}
CELLS = [("python", IMPORTS), ("markdown", NOTES), ("python", MODEL), ("python", TARGET), ("python", SMALL)]


def cell_uri(notebook: pathlib.Path, index: int) -> str:
    """A cell URI as VS Code makes it: the notebook's path, the cell's handle in an escaped base64 fragment."""
    return f"vscode-notebook-cell:{notebook.as_posix()}#W{index}sZmlsZQ%3D%3D"


def line_in(text: str, code: str) -> int:
    return next(i for i, line in enumerate(text.splitlines()) if line.strip() == code)


def write_notebook(path: pathlib.Path) -> None:
    cells = [
        {
            "cell_type": "code" if language == "python" else "markdown",
            "metadata": {},
            "source": text,
            **({"outputs": [], "execution_count": None} if language == "python" else {}),
        }
        for language, text in CELLS
    ]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


@pytest.fixture(scope="module")
def notebook(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("ws") / "model.ipynb"
    write_notebook(path)
    return path


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=[sys.executable, "-m", "onnxlens_server"]))
async def client(lsp_client: LanguageClient, notebook: pathlib.Path):
    refreshes = (types.WORKSPACE_CODE_LENS_REFRESH, types.WORKSPACE_INLAY_HINT_REFRESH)
    for method in (*refreshes, EXPORT_PROGRESS, EXPORT_FINISHED):
        lsp_client.feature(method)(lambda params: None)  # what VS Code does with them does not matter here
    capabilities = pytest_lsp.client_capabilities("visual-studio-code")
    capabilities.notebook_document = types.NotebookDocumentClientCapabilities(
        synchronization=types.NotebookDocumentSyncClientCapabilities()
    )
    capabilities.workspace.inlay_hint = types.InlayHintWorkspaceClientCapabilities(refresh_support=True)
    lsp_client.initialized = await lsp_client.initialize_session(
        types.InitializeParams(capabilities=capabilities, root_uri=notebook.parent.as_uri())
    )
    lsp_client.set_configuration({"timeoutSeconds": 120}, section="onnxlens")
    yield
    await lsp_client.shutdown_session()


def open_notebook(client: LanguageClient, notebook: pathlib.Path) -> list[str]:
    uris = [cell_uri(notebook, i) for i in range(len(CELLS))]
    client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=notebook.as_uri(),
                notebook_type="jupyter-notebook",
                version=1,
                cells=[
                    types.NotebookCell(kind=KINDS[language], document=uri) for uri, (language, _) in zip(uris, CELLS)
                ],
            ),
            cell_text_documents=[
                types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)
                for uri, (language, text) in zip(uris, CELLS)
            ],
        )
    )
    return uris


async def export(client: LanguageClient, **args) -> dict:
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command=EXPORT, arguments=[args]))


async def hover(client: LanguageClient, uri: str, line: int) -> types.Hover | None:
    at = types.Position(line, 8)
    return await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri), at))


def problems(client: LanguageClient, code: str) -> dict[str, list[types.Diagnostic]]:
    found = {uri: [d for d in diagnostics if d.code == code] for uri, diagnostics in client.diagnostics.items()}
    return {uri: diagnostics for uri, diagnostics in found.items() if diagnostics}


def test_program_keeps_every_line_of_every_cell():
    built = program([IMPORTS, "", MODEL, "%%time\nx = 1"])
    assert built.source.splitlines()[1] == "pass  # %load_ext autoreload"  # a magic: a line that parses
    assert built.source.splitlines()[-2:] == ["# %%time", "# x = 1"]  # a cell magic: its cell is not Python
    compile(built.source, "model.ipynb", "exec")
    twist_line = line_in(MODEL, "return twist(x) + 1")
    assert built.cell_at(built.line_of(2, twist_line)) == (2, twist_line)
    assert built.cell_at(3) == (2, 0)  # the empty cell holds no line
    assert built.cell_at(len(built.source.splitlines())) is None


@pytest.mark.asyncio(loop_scope="module")
async def test_notebook_sync_export_and_results_on_cells(client: LanguageClient, notebook: pathlib.Path):
    assert client.initialized.capabilities.notebook_document_sync is not None
    uris = open_notebook(client, notebook)
    imports, model, target, small = uris[0], uris[2], uris[3], uris[4]

    # Code lenses: on the cell defining the target, at its decorator's line in the cell.
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(target)))
    assert {(lens.range.start.line, lens.command.command) for lens in lenses} == {(0, EXPORT_TARGET)}
    assert lenses[0].command.arguments[0]["uri"] == target
    assert not await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(model)))

    # Export by the cell's cursor line: the problem is on the model's cell, at its line there.
    (job,) = (await export(client, uri=target, line=2))["jobs"]
    assert (job["target"], job["status"]) == ("net", "failed")
    found = problems(client, "FXE0011")
    assert set(found) == {model}  # published to the cell's URI exactly as given (its fragment escaped)
    twist_line = line_in(MODEL, "return twist(x) + 1")
    start = MODEL.splitlines()[twist_line].index("return")
    assert [(d.range.start.line, d.range.start.character) for d in found[model]] == [(twist_line, start)]
    assert not [uri for uri in client.diagnostics if uri.startswith("file:") and client.diagnostics[uri]]

    # The quick fix's stub goes after the last Python cell's code, its imports after the imports' cell.
    diagnostic = found[model][0]
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            types.TextDocumentIdentifier(model), diagnostic.range, types.CodeActionContext(diagnostics=[diagnostic])
        )
    )
    stub = next(a for a in actions if a.title.startswith("Add an ONNX function stub"))
    changes = stub.edit.changes
    assert set(changes) == {imports, small}
    assert [e.range.start for e in changes[imports]] == [types.Position(3, 0)]
    assert changes[imports][0].new_text.startswith("\nimport onnxscript\n")  # the cell's last line has no newline
    assert [e.range.start for e in changes[small]] == [types.Position(len(SMALL.splitlines()), 0)]
    assert "def nbtest_twist(" in changes[small][0].new_text

    # Editing another cell leaves the model cell's problem; moving a cell clears the notebook's results.
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(version=2, uri=notebook.as_uri()),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(
                    text_content=[
                        types.NotebookDocumentCellContentChanges(
                            document=types.VersionedTextDocumentIdentifier(version=2, uri=small),
                            changes=[
                                types.TextDocumentContentChangePartial(
                                    range=types.Range(types.Position(0, 0), types.Position(0, 0)), text="# small\n"
                                )
                            ],
                        )
                    ]
                )
            ),
        )
    )
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(small)))
    assert [lens.range.start.line for lens in lenses][:1] == [line_in("# small\n" + SMALL, "@exporter.export_target")]
    assert problems(client, "FXE0011") == {model: found[model]}

    move = types.NotebookCellArrayChange(
        start=2,
        delete_count=2,
        cells=[
            types.NotebookCell(kind=types.NotebookCellKind.Code, document=target),
            types.NotebookCell(kind=types.NotebookCellKind.Code, document=model),
        ],
    )
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(version=3, uri=notebook.as_uri()),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(structure=types.NotebookDocumentCellChangeStructure(array=move))
            ),
        )
    )
    await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(target)))  # processed
    assert problems(client, "FXE0011") == {}
    assert model in client.diagnostics and not client.diagnostics[model]  # published empty

    # Exported again after the move (the target's cell now before the model's): the same cell and line.
    await export(client, uri=target, target="net")
    assert [(d.range.start.line) for d in problems(client, "FXE0011")[model]] == [twist_line]

    # Editing the model's cell makes its problems stale.
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(version=4, uri=notebook.as_uri()),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(
                    text_content=[
                        types.NotebookDocumentCellContentChanges(
                            document=types.VersionedTextDocumentIdentifier(version=2, uri=model),
                            changes=[
                                types.TextDocumentContentChangePartial(
                                    range=types.Range(types.Position(0, 0), types.Position(0, 0)), text="# edited\n"
                                )
                            ],
                        )
                    ]
                )
            ),
        )
    )
    await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(target)))
    assert problems(client, "FXE0011") == {}


@pytest.mark.asyncio(loop_scope="module")
async def test_op_level_debug_hints_and_hovers_on_a_cell(client: LanguageClient, notebook: pathlib.Path):
    small = cell_uri(notebook, 4)
    text = "# small\n" + SMALL  # as edited above
    (job,) = (await export(client, uri=small, target="small", options={"opLevelDebug": True}))["jobs"]
    assert job["status"] == "ok", job["message"]
    line = line_in(text, "return torch.sigmoid(x) * 2")
    whole = types.Range(types.Position(0, 0), types.Position(len(text.splitlines()), 0))
    hints = await client.text_document_inlay_hint_async(
        types.InlayHintParams(types.TextDocumentIdentifier(small), whole)
    )
    assert [h.position for h in hints] == [types.Position(line, len(text.splitlines()[line]))]
    assert "Sigmoid" in hints[0].label
    assert "aten.sigmoid" in (await hover(client, small, line)).contents.value
    assert await hover(client, cell_uri(notebook, 0), 0) is None  # another cell's line

    # The graph view's node -> line links: the cell's URI and its (1-based) line.
    graph = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=GRAPH, arguments=[{"uri": small, "target": "small"}])
    )
    sources = {(n["op"], n["source"]["path"], n["source"]["line"]) for n in graph["nodes"] if n["source"]}
    assert ("Sigmoid", small, line + 1) in sources


@pytest.mark.asyncio(loop_scope="module")
async def test_closing_the_notebook_clears_its_cells(client: LanguageClient, notebook: pathlib.Path):
    uris = [cell_uri(notebook, i) for i in range(len(CELLS))]
    await export(client, uri=uris[3], target="net")
    assert set(problems(client, "FXE0011")) == {uris[2]}
    client.notebook_document_did_close(
        types.DidCloseNotebookDocumentParams(
            notebook_document=types.NotebookDocumentIdentifier(notebook.as_uri()),
            cell_text_documents=[types.TextDocumentIdentifier(uri) for uri in uris],
        )
    )
    await hover(client, uris[0], 0)  # the close has been handled
    assert problems(client, "FXE0011") == {}


SQUEEZES = """class SqueezesOne(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 1:
            x = x.squeeze(0).unsqueeze(0)
        return torch.softmax(x @ x.T, -1)"""
DYNAMIC_TARGET = """@exporter.export_target(dynamic_shapes=True)
def t():
    x = torch.randn(1, 6)
    return SqueezesOne(), (x,)"""


@pytest.mark.asyncio(loop_scope="module")
async def test_a_fixed_dimension_and_its_fix_on_cells(client: LanguageClient, notebook: pathlib.Path):
    from test_server_dynamic import read_code_actions_as_vscode_does

    path = notebook.parent / "dynamic.ipynb"
    path.write_text("{}")
    uris = [cell_uri(path, i) for i in range(3)]
    client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=path.as_uri(),
                notebook_type="jupyter-notebook",
                version=1,
                cells=[types.NotebookCell(kind=types.NotebookCellKind.Code, document=uri) for uri in uris],
            ),
            cell_text_documents=[
                types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
                for uri, text in zip(uris, ["import torch\nimport exporter", SQUEEZES, DYNAMIC_TARGET])
            ],
        )
    )
    (job,) = (await export(client, uri=uris[2], target="t"))["jobs"]
    assert job["status"] == "ok", job["message"]
    (note,) = problems(client, "FXE0020")[uris[1]]  # on the line of the model's cell that fixed the batch
    assert note.range.start.line == line_in(SQUEEZES, "if x.shape[0] == 1:")
    assert note.data["targetUri"] == uris[2]

    read_code_actions_as_vscode_does(client)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            types.TextDocumentIdentifier(uris[1]), note.range, types.CodeActionContext(diagnostics=[note])
        )
    )
    (fix,) = [a for a in actions if a.is_preferred]
    assert list(fix.command.arguments) == [{"uri": uris[2], "target": "t"}]
    line = line_in(DYNAMIC_TARGET, "x = torch.randn(1, 6)")
    start = DYNAMIC_TARGET.splitlines()[line].index("1, 6")
    assert {uri: list(edits) for uri, edits in fix.edit.changes.items()} == {
        uris[2]: [types.TextEdit(types.Range(types.Position(line, start), types.Position(line, start + 1)), "2")]
    }


@pytest.mark.asyncio(loop_scope="module")
async def test_a_syntax_error_is_on_its_cell(client: LanguageClient, notebook: pathlib.Path):
    path = notebook.parent / "broken.ipynb"
    path.write_text("{}")
    uris = [cell_uri(path, i) for i in range(2)]
    client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=path.as_uri(),
                notebook_type="jupyter-notebook",
                version=1,
                cells=[types.NotebookCell(kind=types.NotebookCellKind.Code, document=uri) for uri in uris],
            ),
            cell_text_documents=[
                types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
                for uri, text in zip(uris, ["import exporter", TARGET.replace("net():", "net(:")])
            ],
        )
    )
    with pytest.raises(Exception, match=r"broken\.ipynb:3: SyntaxError"):  # the program's line in the message
        await export(client, uri=uris[1], target="net")
    (problem,) = problems(client, "syntax-error")[uris[1]]  # on the cell, at its line
    assert problem.range.start.line == 1
