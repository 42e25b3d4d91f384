"""One export, run inside a process forked by the fork server; it reports back over a socket.

Only the fork server (`onnxlens_server.forkserver`) imports this module, never the language server.
Messages sent (tuples, `wire`): ``("started", pid)``, ``("progress", stage, info)`` while exporting,
then exactly one ``("result", dict)`` (`exporter.runner.ExportResult.to_message`, plus ``seconds``).
If the process dies without a result (crash, ``os._exit``, kill), the server knows from the missing
result and the exit code the fork server sends.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import time
from typing import Any

from exporter.constants import Stage
from exporter.errors import TimeLimitExceeded, is_out_of_memory
from exporter.runner import ExportResult, export_file_target, failure
from onnxlens_server import wire
from onnxlens_server.request import ExportRequest


def run(request: ExportRequest, conn: socket.socket) -> None:
    """Process entry point: export `request.target` (`exporter.runner`), then send its result."""
    from exporter.diagnostics.locations import add_library_root

    signal.signal(wire.TIME_IS_UP, _time_is_up)
    wire.send(conn, ("started", os.getpid()))
    add_library_root(os.path.dirname(__file__))  # this package's frames are not the user's
    start, stage = time.perf_counter(), Stage.LOAD.value

    def progress(new_stage: str, info: dict[str, Any]) -> None:
        nonlocal stage
        stage = new_stage
        wire.send(conn, ("progress", new_stage, info))

    try:
        os.chdir(request.cwd)
        if request.memory_limit_mb:
            limit = request.memory_limit_mb << 20
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        os.makedirs(request.output_dir, exist_ok=True)
        result = export_file_target(
            request.path,
            request.target,
            request.settings,
            request.overrides,
            request.output_stem,
            source=request.source,
            progress=progress,
        )
    except BaseException as e:  # anything user code raises is a result, not a crash
        if is_out_of_memory(e):
            result = ExportResult("failed", _out_of_memory_message(stage, request.memory_limit_mb))
        else:
            result = failure(e)
    wire.send(conn, ("result", {**result.to_message(), "seconds": time.perf_counter() - start}))
    conn.close()


def _time_is_up(signum: int, frame: Any) -> None:
    raise TimeLimitExceeded("the export ran past its time limit")


def _out_of_memory_message(stage: str, limit_mb: int) -> str:
    if not limit_mb:
        return f"Out of memory at {stage}."
    return (
        f"Out of memory at {stage}: the export process reached its limit of {limit_mb} MiB "
        "(setting onnxlens.memoryLimitMB)."
    )
