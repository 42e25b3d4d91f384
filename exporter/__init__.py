"""onnxlens exporter: PyTorch → ONNX with TorchDynamo/torch.export, onnxscript's torchlib and SARIF diagnostics.

The API follows PyTorch 2.1's ``torch.onnx.dynamo_export``::

    import exporter
    export_output = exporter.dynamo_export(model, x)
    export_output.save("model.onnx")

The names below are imported on first use, so ``import exporter`` (e.g. for ``@export_target`` in
a model file, or by the language server) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DiagnosticContext": "exporter.diagnostics.context",
    "DiagnosticOptions": "exporter.options",
    "ExportOptions": "exporter.options",
    "ExportOutput": "exporter.output.program",
    "ExportOutputSerializer": "exporter.output.program",
    "GenerationCheckError": "exporter.errors",
    "GenerationExport": "exporter.generation.written",
    "Exporter": "exporter.api",
    "FXGraphExtractor": "exporter.capture.extractor",
    "ONNXFakeContext": "exporter.capture.fake",
    "ONNXProgram": "exporter.output.program",
    "OnnxExporterError": "exporter.errors",
    "OnnxRegistry": "exporter.translate.registry",
    "default_registry": "exporter.translate.registry",
    "dynamo_export": "exporter.api",
    "enable_fake_mode": "exporter.capture.fake",
    "export_for_generation": "exporter.generation.export",
    "export_target": "exporter.targets",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'exporter' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
