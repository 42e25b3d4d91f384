"""A language server client over stdio, by hand: for the tests and benchmarks that need the raw
JSON-RPC stream (bad framing, stdout purity, overlapping requests timed on arrival). Tests that only
talk LSP use pytest-lsp instead.

Every byte the server writes to stdout must belong to a well-formed message (``Content-Length`` and
``Content-Type`` headers, a JSON-RPC 2.0 body); anything else stops the reader and makes every wait
raise `ProtocolError`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

SERVER = [sys.executable, "-m", "onnxlens_server"]


class ProtocolError(AssertionError):
    """The server wrote something to stdout that is not a well-formed LSP message."""


def framed(message: dict, length: int | None = None) -> bytes:
    """`message` as JSON-RPC 2.0 on the wire; `length` overrides the Content-Length (to send bad framing)."""
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body) if length is None else length, body)


@dataclasses.dataclass(frozen=True)
class Received:
    arrived: float  # time.perf_counter() when it was read
    message: dict


@dataclasses.dataclass(frozen=True)
class Response:
    sent: float  # time.perf_counter() when the request was written
    arrived: float  # ... when its answer was read
    message: dict

    @property
    def seconds(self) -> float:
        return self.arrived - self.sent

    @property
    def result(self) -> Any:
        """The result; raises RuntimeError if the server answered with an error."""
        if "error" in self.message:
            raise RuntimeError(f"request {self.message.get('id')} failed: {self.message['error']}")
        return self.message.get("result")


class StdioClient:
    """The server in a child process (its own session), read by a thread that records every message
    with its arrival time. Requests may overlap: answers are matched by id.

    `log` receives the server's stderr; without it, stderr is kept in memory (`stderr_text`)."""

    def __init__(self, cwd: str | os.PathLike | None = None, log: pathlib.Path | None = None) -> None:
        with open(log, "wb") if log else contextlib.nullcontext(subprocess.PIPE) as stderr:
            self.process = subprocess.Popen(
                SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=cwd, start_new_session=True
            )
        self.received: list[Received] = []  # every message, in order
        self.error: str | None = None  # why the reader stopped before end-of-file
        self._ids = itertools.count(1)
        self._sent: dict[int, float] = {}
        self._responses: dict[int, Received] = {}
        self._write = threading.Lock()
        self._arrived = threading.Condition()
        self._eof = False
        self._stderr: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stderr_reader = threading.Thread(
            target=lambda: self._stderr.extend(self.process.stderr or ()), daemon=True
        )
        self._stderr_reader.start()

    # --- reading ----------------------------------------------------------------------------

    def _read(self) -> None:
        try:
            while (message := self._read_one()) is not None:
                received = Received(time.perf_counter(), message)
                with self._arrived:
                    self.received.append(received)
                    if "id" in message and "method" not in message:
                        self._responses[message["id"]] = received
                    self._arrived.notify_all()
        except ProtocolError as error:
            self.error = str(error)
        with self._arrived:
            self._eof = True
            self._arrived.notify_all()

    def _read_one(self) -> dict | None:
        """The next message; None at end-of-file between messages."""
        stream, headers = self.process.stdout, {}
        while (line := stream.readline()) != b"\r\n":
            if not line and not headers:
                return None
            if not line.endswith(b"\r\n"):
                raise ProtocolError(f"not a header line: {line!r}")
            name, sep, value = line.decode("ascii", errors="replace").partition(":")
            if not sep or name not in ("Content-Length", "Content-Type"):
                raise ProtocolError(f"not a header: {line!r}")
            headers[name] = value.strip()
        if "Content-Length" not in headers:
            raise ProtocolError(f"a message without a Content-Length: {headers}")
        body = stream.read(int(headers["Content-Length"]))
        try:
            message = json.loads(body)
        except ValueError:
            raise ProtocolError(f"not a JSON body: {body[:200]!r}") from None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            raise ProtocolError(f"not a JSON-RPC 2.0 message: {message!r}")
        return message

    def wait_for(self, condition: Callable[[dict], bool], timeout: float, start: int = 0) -> Received:
        """The first message from index `start` of `received` on that meets `condition`, waiting for it."""
        checked = start

        def found() -> Received | None:
            nonlocal checked
            match = next((r for r in self.received[checked:] if condition(r.message)), None)
            checked = len(self.received)
            return match

        return self._until(found, timeout, "the message")

    def _until(self, found: Callable[[], Received | None], timeout: float, what: str) -> Received:
        """`found()`, called again on each message, until it returns one; raises if the stream ends first."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while (received := found()) is None:
                if self.error:
                    raise ProtocolError(self.error)
                if self._eof:
                    raise RuntimeError(f"the server closed stdout (exit code {self.process.poll()}) before {what}")
                if (remaining := deadline - time.monotonic()) <= 0:
                    raise TimeoutError(f"no {what} within {timeout:g} s")
                self._arrived.wait(remaining)
            return received

    def wait_closed(self, timeout: float) -> None:
        """Until the server closed stdout and stderr (both read to the end)."""
        self._reader.join(timeout)
        self._stderr_reader.join(timeout)
        open_streams = self._reader.is_alive() or self._stderr_reader.is_alive()
        assert not open_streams, f"stdout or stderr still open after {timeout:g} s"
        if self.error:
            raise ProtocolError(self.error)

    def stderr_text(self) -> str:
        """What the server wrote to stderr so far (everything, after `wait_closed`)."""
        return b"".join(self._stderr).decode(errors="replace")

    # --- writing ----------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Raw bytes to the server's stdin."""
        with self._write:
            self.process.stdin.write(data)
            self.process.stdin.flush()

    def notify(self, method: str, params: dict | None = None) -> None:
        self.write(framed({"method": method, "params": params or {}}))

    def send_request(self, method: str, params: dict | None = None) -> int:
        """Send a request without waiting; its id (for `wait`)."""
        request_id = next(self._ids)
        message = framed({"id": request_id, "method": method, "params": params or {}})
        with self._write:
            self._sent[request_id] = time.perf_counter()
            self.process.stdin.write(message)
            self.process.stdin.flush()
        return request_id

    def wait(self, request_id: int, timeout: float = 300) -> Response:
        """The answer to request `request_id` (which `send_request` sent), waiting at most `timeout` s."""
        received = self._until(lambda: self._responses.get(request_id), timeout, f"answer to request {request_id}")
        return Response(self._sent[request_id], received.arrived, received.message)

    def answered(self, request_id: int) -> bool:
        """Whether the answer to request `request_id` has arrived."""
        with self._arrived:
            return request_id in self._responses

    def request(self, method: str, params: dict | None = None, timeout: float = 300) -> Response:
        return self.wait(self.send_request(method, params), timeout)

    def initialize(self, root: pathlib.Path | None, timeout: float = 60) -> Response:
        """The initialize request (no capabilities) for workspace `root`, then the initialized notification."""
        params = {"processId": os.getpid(), "rootUri": root.as_uri() if root else None, "capabilities": {}}
        response = self.request("initialize", params, timeout)
        self.notify("initialized")
        return response

    def close(self, timeout: float = 10) -> int | None:
        """Shut the server down politely if it answers, then kill whatever is left of its session;
        the exit code of a polite shutdown, else None."""
        code = None
        try:
            if self.process.poll() is None:
                self.request("shutdown", timeout=timeout)
                self.notify("exit")
                code = self.process.wait(timeout=timeout)
        except (OSError, RuntimeError, TimeoutError, ProtocolError, subprocess.TimeoutExpired):
            pass
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        return code
