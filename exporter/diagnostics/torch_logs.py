"""Keep torch's own log output and Python warnings out of the user's terminal during an export.

torch attaches stderr handlers to many of its loggers (``torch._dynamo``, ``torch.export``,
``torch.fx.experimental.symbolic_shapes`` …), logs ``W1202 …`` lines there and prints partial
graphs straight to ``sys.stderr`` when a capture fails. During an export those records, what is
written to ``sys.stderr``, and the warnings raised are kept as `LogRecord`s in the diagnostics
context instead: the SARIF log holds them at DEBUG verbosity (``toolExecutionNotifications``) and
the CLI prints them with ``--verbose``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import warnings
from collections.abc import Iterator

_CAPTURED_ROOTS = ("torch", "onnxscript", "onnx_ir")


@dataclasses.dataclass(frozen=True)
class LogRecord:
    """One log line or warning raised during the export."""

    source: str  # logger name, or the warning's category
    level: int  # a `logging` level
    message: str


class _Recorder(logging.Handler):
    def __init__(self, records: list[LogRecord]) -> None:
        super().__init__(logging.DEBUG)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record must not break the export
            message = str(record.msg)
        self.records.append(LogRecord(record.name, record.levelno, message))


@contextlib.contextmanager
def captured_logs(records: list[LogRecord]) -> Iterator[None]:
    """Route torch's (and onnxscript's) log output, ``sys.stderr`` and all warnings into `records`."""
    recorder = _Recorder(records)
    loggers = [
        logger
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and name.split(".")[0] in _CAPTURED_ROOTS and name != "torch.__trace"
    ]
    loggers += [logging.getLogger(root) for root in _CAPTURED_ROOTS]
    saved = {logger: (logger.handlers[:], logger.propagate) for logger in loggers}
    for logger in saved:
        # Only handlers that print; others (torch's structured trace is left alone above) stay.
        logger.handlers = [h for h in logger.handlers if not isinstance(h, logging.StreamHandler)]
        if logger.name in _CAPTURED_ROOTS:
            logger.addHandler(recorder)
            logger.propagate = False
        elif len(logger.handlers) < len(saved[logger][0]):
            logger.addHandler(recorder)
    stderr = io.StringIO()
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(stderr):
            warnings.simplefilter("default")
            yield
    finally:
        for logger, (handlers, propagate) in saved.items():
            logger.handlers = handlers
            logger.propagate = propagate
        if stderr.getvalue().strip():
            records.append(LogRecord("stderr", logging.WARNING, stderr.getvalue().strip()))
        records.extend(
            LogRecord(w.category.__name__, logging.WARNING, f"{w.filename}:{w.lineno}: {w.message}") for w in caught
        )
