"""Export jobs in separate processes, forked from a warm fork server.

The fork server imports torch, onnxscript and the exporter's registry once (`onnxlens_server.warm`); each
export is a fresh fork of it, so edited user code is picked up, and a crash, a hang or a leak in
user code dies with its process. The language server's own process never imports torch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import signal
import time
from collections.abc import Callable
from typing import Any

from onnxlens_server.job import ExportRequest, run


@dataclasses.dataclass
class JobResult:
    status: str  # ok | failed | crashed | timeout | cancelled
    request: ExportRequest
    message: str = ""
    stage: str = ""  # the last stage reported before the job ended
    data: dict[str, Any] = dataclasses.field(default_factory=dict)  # what the job sent (paths, summary, ...)
    seconds: float = 0.0


Progress = Callable[[str, dict[str, Any]], None]


class WorkerPool:
    """Runs one export at a time; a newer request for the same target replaces a running one."""

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(["onnxlens_server.warm"])
        self._running: dict[str, tuple[multiprocessing.Process, ExportRequest]] = {}
        self._queued: set[str] = set()  # job ids waiting for the slot
        self._cancelled: set[str] = set()
        self._slot = asyncio.Semaphore(1)

    def warm_up(self) -> None:
        """Start the fork server now (it imports torch: seconds) rather than on the first export."""
        process = self._context.Process(target=_noop, daemon=True)
        process.start()
        process.join()

    async def export(self, request: ExportRequest, progress: Progress, timeout: float) -> JobResult:
        key = request.key
        if key in self._running:  # the newer request wins
            self.cancel(self._running[key][1].job_id)
        self._queued.add(request.job_id)
        try:
            async with self._slot:
                self._queued.discard(request.job_id)
                if request.job_id in self._cancelled:
                    return JobResult("cancelled", request, "Cancelled before it started.")
                return await self._run(request, progress, timeout)
        finally:
            self._queued.discard(request.job_id)
            self._cancelled.discard(request.job_id)

    def cancel(self, job_id: str) -> bool:
        """Kill the job's process (within milliseconds), or drop it if it is still queued;
        False if there is no such job."""
        if job_id in self._queued:
            self._cancelled.add(job_id)
            return True
        for process, request in self._running.values():
            if request.job_id == job_id:
                self._cancelled.add(job_id)
                process.kill()
                return True
        return False

    async def _run(self, request: ExportRequest, progress: Progress, timeout: float) -> JobResult:
        loop = asyncio.get_running_loop()
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(target=run, args=(request, sender), daemon=True)
        start = time.perf_counter()
        process.start()
        sender.close()
        key = request.key
        self._running[key] = (process, request)
        messages: asyncio.Queue = asyncio.Queue()

        def readable() -> None:
            try:
                messages.put_nowait(receiver.recv())
            except (EOFError, OSError):
                loop.remove_reader(receiver.fileno())
                messages.put_nowait(None)

        loop.add_reader(receiver.fileno(), readable)
        stage, result = "start", None
        try:
            async with asyncio.timeout(timeout):
                while (message := await messages.get()) is not None:
                    if message[0] == "progress":
                        stage = message[1]
                        progress(message[1], message[2])
                    else:
                        result = message[1]
        except TimeoutError:
            process.kill()
            return JobResult("timeout", request, f"Timed out after {timeout:g} s during {stage}.", stage, seconds=timeout)
        finally:
            if receiver.fileno() >= 0:
                loop.remove_reader(receiver.fileno())
            receiver.close()
            await loop.run_in_executor(None, process.join)
            if self._running.get(key, (None,))[0] is process:
                del self._running[key]
        seconds = time.perf_counter() - start
        if request.job_id in self._cancelled:
            return JobResult("cancelled", request, f"Cancelled during {stage}.", stage, seconds=seconds)
        if result is None:
            return JobResult("crashed", request, f"The export process {_describe_exit(process.exitcode)} during {stage}.", stage, seconds=seconds)
        return JobResult(result["status"], request, result.get("message", ""), stage, result, seconds)


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {code} without a result"


def _noop() -> None:
    pass
