"""The exporter's public error, and how it tells running out of memory from a failure of the model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exporter.output.program import ExportOutput


class OnnxExporterError(RuntimeError):
    """The export failed; `export_output` holds the partial result and its diagnostics.

    ``err.export_output.save_diagnostics("report.sarif")`` writes what happened.
    """

    def __init__(self, export_output: ExportOutput, message: str) -> None:
        super().__init__(message)
        self.export_output = export_output


class GenerationCheckError(OnnxExporterError):
    """`export_for_generation` wrote its folder, then a check of it failed (FXE0022, FXE0023): a model that
    exists but is wrong. `written` is what was written (`GenerationExport` or `Seq2SeqExport`)."""

    def __init__(self, written: Any, message: str) -> None:
        super().__init__(written.export_output, message)
        self.written = written


class TimeLimitExceeded(BaseException):
    """Raised, by a signal's handler, in the code an export was running when it ran out of time: its
    traceback says where that was. A BaseException, so that ``except Exception`` in user code or in the
    exporter does not swallow it."""


def is_out_of_memory(error: BaseException) -> bool:
    """A failed allocation: Python's MemoryError, or the RuntimeError of torch's CPU allocator.
    The export does not go on (no other capture strategy, no partial result): it is re-raised."""
    return isinstance(error, MemoryError) or (isinstance(error, RuntimeError) and "can't allocate memory" in str(error))
