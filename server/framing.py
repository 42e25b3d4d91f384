"""The client's messages on stdin, checked before pygls reads them.

pygls skips header lines it does not understand and trusts ``Content-Length``, so a wrong header or
length leaves it reading bodies as headers (or waiting for bytes that never come): the server stays
alive and never answers again. `CheckedStdin` is the stream pygls reads instead (``readline`` for
headers, ``read`` for a body); at the first framing error it records why and reads as the end of
input, so the server exits and the client restarts it.
"""

from __future__ import annotations

import json
import os
import select

STALL_SECONDS = 5.0  # a client writes a message at once: a pause this long inside one means a wrong length
MAX_HEADER_LINE = 1024


class FramingError(Exception):
    """The stream is out of step with its messages."""


class CheckedStdin:
    """A file descriptor read as well-framed LSP messages (and only those)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._length: int | None = None  # the current message's Content-Length, once read
        self._in_message = False  # a byte of the current message has been read
        self.error: str | None = None  # why reading stopped early

    def readline(self) -> bytes:
        """The next header line (the blank one ends the headers); b"" at the end of input."""
        try:
            return self._header(self._take_line())
        except FramingError as e:
            return self._stop(e)

    def read(self, n: int) -> bytes:
        """The body of the current message (`n`: its Content-Length), which must be one JSON value."""
        try:
            body = self._take(n)
            json.loads(body)
        except ValueError:
            return self._stop(FramingError(f"the {n}-byte body is not one JSON message (a wrong Content-Length?)"))
        except FramingError as e:
            return self._stop(e)
        self._length, self._in_message = None, False
        return body

    def _header(self, line: bytes) -> bytes:
        if not line:
            return line
        if line == b"\r\n":
            if self._length is None:
                raise FramingError("a message without a Content-Length header")
            return line
        name, colon, value = line.partition(b":")
        if not colon or not name.replace(b"-", b"").isalnum() or not line.endswith(b"\r\n"):
            raise FramingError(f"not a header line: {line[:80]!r}")
        if name.lower() != b"content-length":
            return line
        if self._length is not None:
            raise FramingError("two Content-Length headers")
        text = value.strip().decode("ascii", "replace")
        if not text.isdigit() or int(text) == 0:
            raise FramingError(f"Content-Length {text[:40]!r} is not a positive integer")
        self._length = int(text)
        return b"Content-Length: %d\r\n" % self._length  # as pygls spells it

    def _take_line(self) -> bytes:
        while (end := self._buffer.find(b"\n") + 1) == 0:
            if len(self._buffer) > MAX_HEADER_LINE:
                raise FramingError(f"not a header line: {bytes(self._buffer[:80])!r}")
            if not self._fill():
                return b""
        return self._pop(end)

    def _take(self, n: int) -> bytes:
        while len(self._buffer) < n:
            if not self._fill():
                raise FramingError("the input ended inside a message")
        return self._pop(n)

    def _pop(self, n: int) -> bytes:
        self._in_message = True
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    def _fill(self) -> bool:
        """Read what the client has sent; False at the end of input (inside a message: a `FramingError`).
        Between messages the client may be silent for ever, inside one not for `STALL_SECONDS`."""
        inside = self._in_message or bool(self._buffer)
        if inside and not select.select([self._fd], [], [], STALL_SECONDS)[0]:
            raise FramingError(f"the message stopped arriving ({STALL_SECONDS:g} s without a byte of it)")
        chunk = os.read(self._fd, 1 << 16)
        if not chunk and inside:
            raise FramingError("the input ended inside a message")
        self._buffer += chunk
        return bool(chunk)

    def _stop(self, error: FramingError) -> bytes:
        self.error = str(error)
        return b""
