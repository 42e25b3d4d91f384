"""The exporter's public error."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporter.output import ExportOutput


class OnnxExporterError(RuntimeError):
    """The export failed; `export_output` holds the partial result and its diagnostics.

    ``err.export_output.save_diagnostics("report.sarif")`` writes what happened.
    """

    def __init__(self, export_output: ExportOutput, message: str) -> None:
        super().__init__(message)
        self.export_output = export_output
