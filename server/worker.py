"""Export jobs in separate processes, forked from a warm fork server (`onnxlens_server.forkserver`).

Each export is a fresh fork, so edited user code is picked up, and a crash, a hang or a leak in
user code dies with its process group. The language server's own process never imports torch and
never waits for the fork server: it is started, and restarted after it dies, without blocking the
event loop; exports queue until it is warm.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from exporter.output.files import remove_stale_temporaries
from onnxlens_server import wire
from onnxlens_server.request import ExportRequest

logger = logging.getLogger(__name__)
worker_logger = logging.getLogger("onnxlens_server.workers")  # what export processes write

# The fork server's working directory: the one holding this package, not the workspace, so no
# module of the workspace shadows one the fork server imports.
_NEUTRAL_DIRECTORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_GRACE_SECONDS = 2.0  # for an export out of time to say where it is, before it is killed


@dataclasses.dataclass
class JobResult:
    status: str  # ok | failed | crashed | timeout | cancelled
    request: ExportRequest
    message: str = ""
    stage: str = ""  # the last stage reported before the job ended
    data: dict[str, Any] = dataclasses.field(default_factory=dict)  # what the job sent (paths, summary, ...)
    seconds: float = 0.0


Progress = Callable[[str, dict[str, Any]], None]


@dataclasses.dataclass(eq=False)
class _Job:
    request: ExportRequest
    pid: int | None = None  # the export process (and its process group), once started
    ended: bool = False  # its process has exited
    cancelled: str = ""  # why it was cancelled ("" while it is not)
    waiting: asyncio.Future | None = None  # its wait for the export slot

    def cancel(self, why: str) -> None:
        self.cancelled = self.cancelled or why
        if self.waiting is not None:
            self.waiting.cancel()  # a no-op once it has the slot
        self.kill()

    def kill(self) -> None:
        if self.pid is not None and not self.ended:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class WorkerPool:
    """Runs one export at a time; a new request for a target cancels its earlier ones, queued or running."""

    def __init__(self) -> None:
        self._forkserver: asyncio.subprocess.Process | None = None
        self._control: socket.socket | None = None  # passes each export's socket to the fork server
        self._jobs: dict[str, _Job] = {}  # by job id: queued and running
        self._slot = asyncio.Semaphore(1)
        self._starting = asyncio.Lock()

    @property
    def forkserver_pid(self) -> int | None:
        return self._forkserver.pid if self._forkserver else None

    def warm(self) -> None:
        """Start the fork server in the background unless it runs (the first model file opened)."""
        if not self._running():
            asyncio.ensure_future(self.start())

    def _running(self) -> bool:
        return self._forkserver is not None and self._forkserver.returncode is None

    async def start(self) -> None:
        """Start the fork server unless it runs (it warms up in the background: seconds)."""
        async with self._starting:  # one fork server, however many ask at once
            if not self._running():
                await self._start()

    async def _start(self) -> None:
        ours, theirs = socket.socketpair()
        self._forkserver = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "onnxlens_server.forkserver",
            str(theirs.fileno()),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(theirs.fileno(),),
            cwd=_NEUTRAL_DIRECTORY,
        )
        theirs.close()
        asyncio.ensure_future(_log_output(self._forkserver.stdout))
        if self._control is not None:
            self._control.close()
        self._control = ours
        logger.info("Export fork server started (pid %d)", self._forkserver.pid)
        asyncio.ensure_future(self._watch(self._forkserver))

    def close(self) -> None:
        """Stop every export; the fork server exits when it sees its control socket closed."""
        for job in self._jobs.values():
            job.cancel("The server is shutting down")
        if self._control is not None:
            self._control.close()
            self._control = None

    async def export(self, request: ExportRequest, progress: Progress, timeout: float) -> JobResult:
        for earlier in [job for job in self._jobs.values() if job.request.key == request.key]:
            earlier.cancel("Superseded by a newer export of this target")
        job = self._jobs[request.job_id] = _Job(request)
        try:
            job.waiting = asyncio.ensure_future(self._slot.acquire())
            try:
                await job.waiting
            except asyncio.CancelledError:
                if not job.cancelled:
                    raise
            if job.cancelled:  # while it waited (or as it got the slot)
                if job.waiting.done() and not job.waiting.cancelled():
                    self._slot.release()
                return JobResult("cancelled", request, f"{job.cancelled} before it started.")
            try:
                return await self._run(job, progress, timeout)
            finally:
                self._slot.release()
        finally:
            if self._jobs.get(request.job_id) is job:
                del self._jobs[request.job_id]

    def cancel(self, job_id: str) -> bool:
        """Kill the job's process group (within milliseconds), or drop it if it is still queued;
        False if there is no such job."""
        job = self._jobs.get(job_id)
        if job is None:
            return False
        job.cancel("Cancelled")
        return True

    async def _run(self, job: _Job, progress: Progress, timeout: float) -> JobResult:
        request = job.request
        remove_stale_temporaries(request.output_dir)
        await self.start()
        ours, theirs = socket.socketpair()
        try:
            try:
                socket.send_fds(self._control, [b"j"], [theirs.fileno()])
            except OSError:  # the fork server died and nobody noticed yet
                self._forkserver = None
                await self.start()
                socket.send_fds(self._control, [b"j"], [theirs.fileno()])
        finally:
            theirs.close()
        ours.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        writer.write(wire.frame(request))
        start = time.perf_counter()
        stage, result, code = "start", None, None
        try:
            async with asyncio.timeout(timeout):
                while (message := await wire.read(reader)) is not None:
                    if message[0] == "started":
                        job.pid = message[1]
                        if job.cancelled:
                            job.kill()
                    elif message[0] == "progress":
                        stage = message[1]
                        progress(message[1], message[2])
                    elif message[0] == "result":
                        result = message[1]
                    else:  # ("exit", code): the fork server has reaped it and killed its group
                        code, job.ended = message[1], True
        except TimeoutError:
            frames = await _where_it_hangs(job, reader)
            job.kill()
            message = f"Timed out after {timeout:g} s during {stage}."
            return JobResult("timeout", request, message, stage, {"frames": frames}, seconds=timeout)
        finally:
            writer.close()
            if code is None:  # the fork server died first: nobody else kills what the export started
                job.kill()
            if result is None and job.pid is not None:
                remove_stale_temporaries(request.output_dir, job.pid)
        seconds = time.perf_counter() - start
        if job.cancelled:
            return JobResult("cancelled", request, f"{job.cancelled} during {stage}.", stage, seconds=seconds)
        if result is None:
            return JobResult(
                "crashed", request, f"The export process {_describe_exit(code)} during {stage}.", stage, seconds=seconds
            )
        return JobResult(result["status"], request, result.get("message", ""), stage, result, seconds)

    async def _watch(self, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        if process is self._forkserver:
            logger.warning("The export fork server exited (%s); the next export starts a new one", _describe_code(code))


async def _where_it_hangs(job: _Job, reader: asyncio.StreamReader) -> list[dict[str, Any]]:
    """The user frames (innermost first) of a job out of time, as its process reports them once told
    (`wire.TIME_IS_UP`); none if it does not within `_GRACE_SECONDS` (blocked in native code)."""
    if job.pid is None or job.ended:
        return []
    try:
        os.kill(job.pid, wire.TIME_IS_UP)
        async with asyncio.timeout(_GRACE_SECONDS):
            while (message := await wire.read(reader)) is not None:
                if message[0] == "result":
                    return message[1].get("frames") or []
    except Exception:  # gone, silent, or cut mid-message (unpickling garbage raises anything): killed all the same
        pass
    return []


async def _log_output(stream: asyncio.StreamReader) -> None:
    """Log each line the fork server and export processes write: their log records at the level they
    name (library warnings at DEBUG), anything else (user code's prints, native libraries) at INFO."""
    while line := await stream.readline():
        text = line.decode(errors="replace").rstrip()
        level_name, _, rest = text.partition(" ")
        level = logging.getLevelName(level_name)
        if not isinstance(level, int):
            worker_logger.info("%s", text)
        else:
            worker_logger.log(logging.DEBUG if rest.startswith("py.warnings") else level, "%s", rest)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "ended without a result (the fork server stopped)"
    if code < 0:
        return f"was killed by {_signal_name(-code)}" + (" (out of memory?)" if code == -signal.SIGKILL else "")
    return f"exited with code {code} without a result"


def _describe_code(code: int) -> str:
    return f"killed by {_signal_name(-code)}" if code < 0 else f"code {code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
