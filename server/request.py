"""What the language server asks of an export process: `ExportRequest`, and a target's key.

Imported by the language server's own process: nothing here imports torch or the exporter's
pipeline (the export process runs `onnxlens_server.child`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any


@dataclasses.dataclass(frozen=True)
class ExportRequest:
    job_id: str
    path: str  # the model file (absolute)
    target: str  # an @exporter.export_target function in it
    settings: dict[str, Any]  # the editor's configuration, parsed (`exporter.options.parse_settings`)
    overrides: dict[str, Any]  # the request's, parsed the same way (`exporter.runner.merge_settings`)
    output_stem: str  # the output files' path without suffix (`onnx_path`, `sarif_path`)
    cwd: str  # the working directory of the export (the workspace folder)
    memory_limit_mb: int = 0  # the export process's data size limit; 0: none
    source: str | None = None  # the editor's text of `path` (may be unsaved); None: read the file

    @property
    def key(self) -> str:
        return target_key(self.path, self.target)

    @property
    def output_dir(self) -> str:
        return os.path.dirname(self.output_stem)

    @property
    def onnx_path(self) -> str:
        return self.output_stem + ".onnx"

    @property
    def sarif_path(self) -> str:
        return self.output_stem + ".sarif"


def target_key(path: str, target: str) -> str:
    """The key of a target: one state, and one running export, per target."""
    return f"{path}::{target}"
