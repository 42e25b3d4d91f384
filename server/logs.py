"""The server's log records go to the client's log (``window/logMessage``: VS Code's output channel)."""

from __future__ import annotations

import asyncio
import logging

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from onnxlens_server.protocol import RequestError

_TYPES = {
    logging.ERROR: types.MessageType.Error,
    logging.WARNING: types.MessageType.Warning,
    logging.INFO: types.MessageType.Info,
}


class ClientLogHandler(logging.Handler):
    """Sends records as ``window/logMessage``, from whichever thread logs them."""

    def __init__(self, ls: LanguageServer, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.ls = ls
        self.loop = loop

    def emit(self, record: logging.LogRecord) -> None:
        kind = next((t for level, t in _TYPES.items() if record.levelno >= level), types.MessageType.Log)
        params = types.LogMessageParams(type=kind, message=self.format(record))
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.ls.window_log_message, params)


class RefusalsAreAnswers(logging.Filter):
    """pygls logs every error answer as an error with its traceback. A refused request (`RequestError`:
    "not exported", a wrong argument) is an answer, not a fault: one info line of the server's instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, RequestError):
            logging.getLogger("onnxlens_server").info("Refused (%s): %s", error.code, error)
            return False
        return True


def log_to_client(ls: LanguageServer, level: int = logging.INFO) -> None:
    """Route the ``onnxlens_server`` loggers' records at `level` and above to the client (once), and
    refused requests as one line (`RefusalsAreAnswers`)."""
    logger = logging.getLogger("onnxlens_server")
    if not any(isinstance(h, ClientLogHandler) for h in logger.handlers):
        logger.addHandler(ClientLogHandler(ls, asyncio.get_running_loop()))
    logger.setLevel(level)
    rpc = logging.getLogger("pygls.protocol.json_rpc")
    if not any(isinstance(f, RefusalsAreAnswers) for f in rpc.filters):
        rpc.addFilter(RefusalsAreAnswers())
