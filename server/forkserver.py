"""The export fork server: one warm process that forks a fresh process for every export.

`WorkerPool` starts it as ``python -m onnxlens_server.forkserver FD`` with stdin from /dev/null,
stdout and stderr to a pipe the server logs from, and a neutral working directory: neither the editor's messages nor the
workspace's modules can reach it. It imports torch, torchlib and the registry and does one tiny
export (`onnxlens_server.warm`), then serves: for each socket the server passes over the control
socket FD, it reads an `ExportRequest` and forks; the child runs the export in a session of its
own (`child.run`). When an export process exits, its whole process group is killed (what the model
started dies with it) and ``("exit", code)`` is the last message on its socket.

It exits when the server closes the control socket or is gone, killing the exports still running.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import sys
import time

from onnxlens_server import child, wire

logger = logging.getLogger("onnxlens_server.forkserver")


def main() -> None:
    # Its output and that of the export processes (their logs, warnings, user code's prints) is read by
    # the server (`WorkerPool`), which logs each line at the level its first word names.
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s[%(process)d]: %(message)s"
    )
    logging.captureWarnings(True)
    sys.stdout.reconfigure(line_buffering=True)  # a pipe: user code's prints reach the log as they happen
    control = socket.socket(fileno=int(sys.argv[1]))
    server = os.getppid()
    start = time.perf_counter()
    import onnxlens_server.warm  # noqa: F401  (seconds: torch, torchlib, one export)

    logger.info("fork server warm in %.1f s", time.perf_counter() - start)
    jobs: dict[int, socket.socket] = {}  # export process id -> its socket
    exited, wake = os.pipe()  # SIGCHLD writes a byte: an export process has exited
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    try:
        while os.getppid() == server:
            readable, _, _ = select.select([control, exited], [], [], 1.0)
            if exited in readable:
                os.read(exited, 4096)
            if control in readable and not _fork_next(control, jobs):
                break
            _reap(jobs)
    finally:
        for pid in jobs:
            _kill_group(pid)


def _fork_next(control: socket.socket, jobs: dict[int, socket.socket]) -> bool:
    """Start the export whose socket arrives on `control`; False when the server has closed it."""
    _, fds, _, _ = socket.recv_fds(control, 1, 1)
    if not fds:
        return False
    conn = socket.socket(fileno=fds[0])
    try:
        request = wire.receive(conn)
    except (EOFError, OSError):  # the server gave up on it already
        conn.close()
        return True
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            control.close()
            for other in jobs.values():
                other.close()
            os.setsid()
            child.run(request, conn)
            code = 0
        finally:
            for stream in (sys.stdout, sys.stderr):  # os._exit does not flush
                stream.flush()
            os._exit(code)
    jobs[pid] = conn
    return True


def _reap(jobs: dict[int, socket.socket]) -> None:
    """For each export process that has exited: kill its process group, then report its exit code.
    (The zombie is reaped only after the kill, so its group id cannot have been reused.)"""
    while jobs:
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is None:
            return
        _kill_group(info.si_pid)
        _, status = os.waitpid(info.si_pid, 0)
        conn = jobs.pop(info.si_pid, None)
        if conn is not None:
            try:
                wire.send(conn, ("exit", os.waitstatus_to_exitcode(status)))
            except OSError:
                pass
            conn.close()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


if __name__ == "__main__":
    main()
