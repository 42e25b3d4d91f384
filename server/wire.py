"""Messages between the language server, the fork server and export processes: pickled objects,
each preceded by its length (4 bytes, big-endian), over Unix stream sockets.

The fork server and export processes send and receive blocking (`send`, `receive`); the language
server reads on its event loop (`read`) and writes with `frame`.
"""

from __future__ import annotations

import asyncio
import pickle
import signal
import socket
import struct
from typing import Any

_HEADER = struct.Struct("!I")
# Sent to an export process out of time: it raises `exporter.errors.TimeLimitExceeded` where it is and
# sends that as its result (where it hangs), then it is killed.
TIME_IS_UP = signal.SIGUSR1


def frame(message: Any) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def send(sock: socket.socket, message: Any) -> None:
    sock.sendall(frame(message))


def receive(sock: socket.socket) -> Any:
    """The next message; `EOFError` when the other side has closed."""
    (size,) = _HEADER.unpack(_receive_exactly(sock, _HEADER.size))
    return pickle.loads(_receive_exactly(sock, size))


async def read(reader: asyncio.StreamReader) -> Any | None:
    """The next message, or None when every other holder of the socket has closed it."""
    try:
        (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
        return pickle.loads(await reader.readexactly(size))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
