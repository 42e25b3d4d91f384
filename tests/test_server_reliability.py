"""The language server under hostile model code: each test starts its own server over stdio (as the
editor does, with the workspace as its working directory) and checks that it stays up, answers, and
keeps what the model starts or writes where it belongs. How fast it answers is measured by
benchmarks/server_reliability.py, not asserted here."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import sys
import textwrap
import time
from collections.abc import AsyncIterator

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient
from pytest_lsp.client import make_test_lsp_client

from onnxlens_server.protocol import EXPORT, EXPORT_PROGRESS, ErrorCode

pytestmark = pytest.mark.asyncio

# A model file's header and a small model; `{body}` is the target's code before it returns it.
MODEL = """\
import os, subprocess, sys, time
import torch
import exporter


class Small(torch.nn.Module):
    def __init__(self, width: int = 4):
        super().__init__()
        self.linear = torch.nn.Linear(width, 2)

    def forward(self, x):
{forward}
        return self.linear(x).relu()


@exporter.export_target
def t():
{body}
    return Small(), (torch.randn(3, 4),)
"""


def model(forward: str = "", body: str = "") -> str:
    return MODEL.format(
        forward=textwrap.indent(forward, " " * 8) or "        pass", body=textwrap.indent(body, " " * 4) or "    pass"
    )


@contextlib.asynccontextmanager
async def server(
    root: pathlib.Path, configuration: dict | None = None, env: dict | None = None
) -> AsyncIterator[LanguageClient]:
    """A server for workspace `root`, started in it as VS Code does; its onnxlens/exportProgress
    notifications are recorded in ``client.stages`` as (job id, stage)."""
    client = make_test_lsp_client()
    client.stages = []

    @client.feature(EXPORT_PROGRESS)
    def progress(params):
        client.stages.append((params.jobId, params.stage))

    await client.start_io(sys.executable, "-m", "onnxlens_server", cwd=root, env={**os.environ, **(env or {})})
    capabilities = types.ClientCapabilities(workspace=types.WorkspaceClientCapabilities(configuration=True))
    await client.initialize_session(types.InitializeParams(capabilities=capabilities, root_uri=root.as_uri()))
    client.set_configuration({"timeoutSeconds": 120, **(configuration or {})}, section="onnxlens")
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.shutdown_session(), 10)
        with contextlib.suppress(ProcessLookupError):
            client._server.kill()  # one that stopped answering


ANSWER_TIMEOUT = 90  # seconds: a server that stopped answering fails the test instead of hanging it


async def export(client: LanguageClient, path: pathlib.Path, target: str = "t", **args) -> dict:
    (job,) = (
        await asyncio.wait_for(
            client.workspace_execute_command_async(
                types.ExecuteCommandParams(command=EXPORT, arguments=[{"uri": path.as_uri(), "target": target, **args}])
            ),
            ANSWER_TIMEOUT,
        )
    )["jobs"]
    return job


async def cancel(client: LanguageClient, job_id: str) -> None:
    await asyncio.wait_for(
        client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="onnxlens.server.cancel", arguments=[{"jobId": job_id}])
        ),
        ANSWER_TIMEOUT,
    )


async def until(condition, what: str) -> None:
    """Wait for `condition()` (polling), at most ANSWER_TIMEOUT seconds."""
    deadline = time.monotonic() + ANSWER_TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"no {what} in {ANSWER_TIMEOUT} s"
        await asyncio.sleep(0.01)


async def hovers_while(client: LanguageClient, path: pathlib.Path, task: asyncio.Future) -> int:
    """How many hovers were answered before `task` was done, one hover asked 20 ms after each answer."""
    answered = 0
    while not task.done():
        await asyncio.wait_for(
            client.text_document_hover_async(
                types.HoverParams(types.TextDocumentIdentifier(path.as_uri()), types.Position(0, 0))
            ),
            ANSWER_TIMEOUT,
        )
        answered += 1
        await asyncio.sleep(0.02)
    return answered


def processes_with(argument: str) -> list[int]:
    """Live processes (not zombies) whose command line has `argument`."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and argument in (entry / "cmdline").read_bytes().decode(errors="replace").split(
                "\0"
            ):
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry.name))
        except OSError:
            pass
    return found


def descendants(pid: int) -> list[int]:
    children = []
    for entry in pathlib.Path(f"/proc/{pid}/task").glob("*/children"):
        children += [int(c) for c in entry.read_text().split()]
    return children + [d for child in children for d in descendants(child)]


def forkserver_of(client: LanguageClient) -> int:
    (pid,) = forkservers_of(client)
    return pid


def forkservers_of(client: LanguageClient) -> list[int]:
    return [
        p
        for p in descendants(client._server.pid)
        if b"onnxlens_server.forkserver" in pathlib.Path(f"/proc/{p}/cmdline").read_bytes()
    ]


async def code_lenses(client: LanguageClient, path: pathlib.Path) -> list[types.CodeLens]:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(path.as_uri(), "python", 1, path.read_text()))
    )
    return await asyncio.wait_for(
        client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(path.as_uri()))),
        ANSWER_TIMEOUT,
    )


async def test_torch_loads_only_once_a_model_file_is_open(tmp_path: pathlib.Path):
    """The fork server (torch, about 400 MiB) starts with the first file that imports torch, once."""
    plain, other = tmp_path / "plain.py", tmp_path / "other.py"
    plain.write_text("import json\n\n\ndef f():\n    return json.dumps({})\n")
    other.write_text("import torch\n")
    path = tmp_path / "m.py"
    path.write_text(model())
    async with server(tmp_path) as client:
        assert not await code_lenses(client, plain)
        await asyncio.sleep(1.0)
        assert forkservers_of(client) == []
        found, other_found = await asyncio.gather(code_lenses(client, path), code_lenses(client, other))
        assert found and not other_found  # an export target, a torch import: each starts it
        await until(lambda: forkservers_of(client), "fork server")
        await asyncio.sleep(0.5)
        assert len(forkservers_of(client)) == 1
        assert (await export(client, path))["status"] == "ok"
        assert len(forkservers_of(client)) == 1


def loaded_libraries(pid: int) -> str:
    return pathlib.Path(f"/proc/{pid}/maps").read_text()


async def test_the_graph_reader_loads_after_the_first_export_not_before(tmp_path: pathlib.Path):
    """The server starts without onnx_ir (ml_dtypes' library tells); the first export that wrote a model
    loads it in the background, so Show Graph does not wait for the import (most of a second)."""
    path = tmp_path / "m.py"
    path.write_text(model())
    async with server(tmp_path) as client:
        assert await code_lenses(client, path)
        assert "_ml_dtypes_ext" not in loaded_libraries(client._server.pid)
        assert (await export(client, path))["status"] == "ok"
        await until(lambda: "_ml_dtypes_ext" in loaded_libraries(client._server.pid), "onnx_ir in the server")


async def test_model_code_cannot_read_the_editors_messages(tmp_path: pathlib.Path):
    """Reading stdin (directly, or in a child process) gets end-of-file, not the editor's messages."""
    path = tmp_path / "m.py"
    path.write_text(
        model(
            body="got = sys.stdin.read() + os.read(0, 1 << 16).decode()\n"
            'got += subprocess.run(["cat"], capture_output=True, text=True, timeout=5).stdout\n'
            "assert not got, got"
        )
    )
    async with server(tmp_path) as client:
        job = asyncio.ensure_future(export(client, path))
        hovers = await hovers_while(client, path, job)  # the messages the model would have stolen
        assert job.result()["status"] == "ok", job.result()
        assert hovers > 3  # answered while the export ran
        assert (await export(client, path))["status"] == "ok"  # and the server still answers


async def test_workspace_modules_do_not_run_before_an_export(tmp_path: pathlib.Path):
    """Modules in the workspace root named like what the server or its helpers import never load."""
    for name in ("multiprocessing", "torch", "onnx", "subprocess", "socket", "pygls"):
        (tmp_path / f"{name}.py").write_text(f"open({str(tmp_path / ('imported-' + name))!r}, 'w').close()\n")
    path = tmp_path / "m.py"
    path.write_text(model())
    async with server(tmp_path) as client:
        lenses = await asyncio.wait_for(
            client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(path.as_uri()))),
            ANSWER_TIMEOUT,
        )
        assert lenses  # found by the parser process, which does not import the workspace's modules either
        assert (await export(client, path))["status"] == "ok"  # with the real torch, in a warm worker
    assert sorted(p.name for p in tmp_path.glob("imported-*")) == []


async def test_a_leaking_forward_stops_at_the_memory_limit(tmp_path: pathlib.Path):
    path = tmp_path / "m.py"
    path.write_text(model(forward="leak = [bytearray(64 << 20) for _ in range(1000)]"))
    async with server(tmp_path, {"memoryLimitMB": 1200}) as client:
        job = await export(client, path)
    assert job["status"] == "failed"
    assert job["message"].startswith("Out of memory at capture: the export process reached its limit of 1200 MiB")
    (problem,) = [
        d for d in client.diagnostics[path.as_uri()] if d.message.startswith("Export of t failed: Out of memory")
    ]
    assert problem.range.start.line == path.read_text().splitlines().index("def t():")


async def test_what_a_model_starts_dies_with_its_export(tmp_path: pathlib.Path):
    """A process started by the model is killed when the export ends, and when it is cancelled."""
    done, hung = f"771.{os.getpid()}", f"772.{os.getpid()}"  # sleep's argument tells this run's processes
    path = tmp_path / "m.py"
    path.write_text(model(body=f'subprocess.Popen(["sleep", "{done}"])'))
    hanging = tmp_path / "h.py"
    hanging.write_text(model(body=f'subprocess.Popen(["sleep", "{hung}"])\ntime.sleep(600)'))
    async with server(tmp_path) as client:
        assert (await export(client, path))["status"] == "ok"
        await asyncio.sleep(0.2)
        assert processes_with(done) == []
        job = asyncio.ensure_future(export(client, hanging, jobId="hang"))
        await until(lambda: processes_with(hung), "sleep process")
        await cancel(client, "hang")
        assert (await job)["status"] == "cancelled"
        await asyncio.sleep(0.2)
        assert processes_with(hung) == []


async def test_hovers_never_wait_for_the_fork_server(tmp_path: pathlib.Path):
    """Neither the first export after start-up nor one after the fork server died blocks hovers."""
    path = tmp_path / "m.py"
    path.write_text(model())
    async with server(tmp_path) as client:
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(path.as_uri(), "python", 1, path.read_text()))
        )
        first = asyncio.ensure_future(export(client, path))
        at_start = await hovers_while(client, path, first)
        assert first.result()["status"] == "ok"
        os.kill(forkserver_of(client), signal.SIGKILL)
        await asyncio.sleep(0.2)
        again = asyncio.ensure_future(export(client, path))
        at_restart = await hovers_while(client, path, again)
        assert again.result()["status"] == "ok"
    # The export takes seconds (the fork server warms up meanwhile): hovers waiting for it would be answered
    # once or twice, after it.
    assert at_start > 10 and at_restart > 10, (at_start, at_restart)


async def test_a_new_request_cancels_every_earlier_one_of_its_target(tmp_path: pathlib.Path):
    path = tmp_path / "m.py"
    path.write_text(model(body="time.sleep(0.5)"))
    async with server(tmp_path) as client:
        for _ in range(2):  # warm: the second export runs as every later one does
            assert (await export(client, path))["status"] == "ok"
        client.stages.clear()
        jobs = await asyncio.gather(*(export(client, path, jobId=f"burst-{i}") for i in range(20)))
    assert [job["status"] for job in jobs] == ["cancelled"] * 19 + ["ok"]
    # The requests arrive one by one (a loaded machine spaces them): a job may start building between two,
    # and the next one cancels it within its 0.5 s build. Past the build, the newest only, and at most one
    # more where two requests came 0.5 s apart.
    captured = {job_id for job_id, stage in client.stages if stage == "capture"}
    assert "burst-19" in captured and len(captured) <= 2, sorted(captured)


@pytest.mark.parametrize("folder", ["../outside", "{outside}", "~/onnxlens-out", "link/out"])
async def test_the_workspace_settings_cannot_write_outside_it(tmp_path: pathlib.Path, folder: str):
    root, outside = tmp_path / "ws", tmp_path / "outside"
    folder = folder.format(outside=outside)  # an absolute path
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)  # a symlink committed in the repository
    path = root / "m.py"
    path.write_text(model())
    async with server(
        root, {"outputFolder": folder, "outputFolderScope": "workspace"}, env={"HOME": str(outside)}
    ) as client:
        with pytest.raises(JsonRpcException) as refused:
            await export(client, path)
    assert refused.value.code == ErrorCode.OUTSIDE_WORKSPACE
    assert f"The output folder {folder!r} leads outside the workspace folder {root}" in refused.value.message
    assert list(outside.rglob("*")) == [] and not (root / "~").exists()


async def test_the_users_own_settings_may_write_anywhere(tmp_path: pathlib.Path):
    root, home = tmp_path / "ws", tmp_path / "home"
    root.mkdir()
    path = root / "m.py"
    path.write_text(model())
    async with server(
        root, {"outputFolder": "~/exports", "outputFolderScope": "user"}, env={"HOME": str(home)}
    ) as client:
        job = await export(client, path)
    assert job["status"] == "ok" and job["onnx"] == str(home / "exports" / "m.t.onnx")


async def test_a_file_outside_the_workspace_is_not_exported(tmp_path: pathlib.Path):
    root = tmp_path / "ws"
    root.mkdir()
    path = tmp_path / "m.py"
    path.write_text(model())
    async with server(root) as client:
        with pytest.raises(JsonRpcException) as refused:
            await export(client, path)
    assert (
        refused.value.code == ErrorCode.OUTSIDE_WORKSPACE
        and "is outside the workspace folders" in refused.value.message
    )
    assert not (tmp_path / "onnxlens-out").exists() and not (root / "onnxlens-out").exists()


async def test_same_named_files_and_targets_get_their_own_outputs(tmp_path: pathlib.Path):
    a, b = tmp_path / "a" / "model.py", tmp_path / "b" / "model.py"
    for path, width in ((a, 4), (b, 6)):
        path.parent.mkdir()
        path.write_text(model().replace("Small(), (torch.randn(3, 4),)", f"Small({width}), (torch.randn(3, {width}),)"))
    async with server(tmp_path) as client:
        job_a, job_b = await export(client, a), await export(client, b)
    out = tmp_path / "onnxlens-out"
    assert (job_a["onnx"], job_a["sarif"]) == (str(out / "a" / "model.t.onnx"), str(out / "a" / "model.t.sarif"))
    assert (job_b["onnx"], job_b["sarif"]) == (str(out / "b" / "model.t.onnx"), str(out / "b" / "model.t.sarif"))
    import onnx

    widths = [onnx.load(job["onnx"]).graph.input[0].type.tensor_type.shape.dim[1].dim_value for job in (job_a, job_b)]
    assert widths == [4, 6]


async def test_temporary_files_of_killed_exports_are_removed(tmp_path: pathlib.Path):
    """A cancel while saving leaves no temporary file; ones a dead process left are swept."""
    out = tmp_path / "onnxlens-out"
    out.mkdir()
    stale, live = out / ".tmp-999999999-m.t.onnx", out / f".tmp-{os.getpid()}-m.t.onnx"  # no such pid / a live one
    stale.write_bytes(b"x")
    live.write_bytes(b"x")
    path = tmp_path / "m.py"
    path.write_text(
        model()
        .replace("Small(), (torch.randn(3, 4),)", "Small(8192), (torch.randn(3, 8192),)")
        .replace("torch.nn.Linear(width, 2)", "torch.nn.Linear(width, 8192)")
    )  # 256 MiB of weights: seconds to save
    async with server(tmp_path) as client:
        job = asyncio.ensure_future(export(client, path, jobId="big"))
        await until(lambda: ("big", "save") in client.stages, "save stage")
        await asyncio.sleep(0.05)
        await cancel(client, "big")
        assert (await job)["status"] == "cancelled"
    assert sorted(p.name for p in out.iterdir()) == [live.name]
