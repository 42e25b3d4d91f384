"""onnxlens exporter: PyTorch → ONNX with TorchDynamo/torch.export, onnxscript's torchlib and SARIF diagnostics.

The API follows PyTorch 2.1's ``torch.onnx.dynamo_export``::

    import exporter
    export_output = exporter.dynamo_export(model, x)
    export_output.save("model.onnx")
"""

from exporter.api import Exporter, ExportOptions, default_registry, dynamo_export
from exporter.capture import FXGraphExtractor
from exporter.diagnostics import DiagnosticContext, DiagnosticOptions
from exporter.errors import OnnxExporterError
from exporter.fake import ONNXFakeContext, enable_fake_mode
from exporter.output import ExportOutput, ExportOutputSerializer, ONNXProgram
from exporter.registry import OnnxRegistry
from exporter.targets import export_target

__all__ = [
    "DiagnosticContext",
    "DiagnosticOptions",
    "ExportOptions",
    "ExportOutput",
    "ExportOutputSerializer",
    "Exporter",
    "FXGraphExtractor",
    "ONNXFakeContext",
    "ONNXProgram",
    "OnnxExporterError",
    "OnnxRegistry",
    "default_registry",
    "dynamo_export",
    "enable_fake_mode",
    "export_target",
]
