"""Names and numbers shared by the exporter, the export worker and the language server.

A leaf module: it imports nothing heavy, so the server (which never imports torch) can use it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

DEFAULT_OPSET_VERSION = 18  # the seed's default; ExportOptions.opset_version changes it
PRODUCER_NAME = "onnxlens"
TWO_GIB = 2**31  # the protobuf limit: larger models keep their weights in external data

# Custom ONNX domains of the functions onnxlens writes.
DOMAIN_MODULES = "pkg.onnxlens.modules"  # one local function per nn.Module call
DOMAIN_COMPLEX = "pkg.onnxlens.complex"  # complex variants torchlib lacks
DOMAIN_CORRECTIONS = "pkg.onnxlens.corrections"  # where torchlib computes something else
DOMAIN_COMPOSITES = "pkg.onnxlens.composites"  # composite operators torchlib does not translate

# metadata_props keys linking ONNX nodes to their FX node and source.
METADATA_PREFIX = "pkg.onnxlens."  # every node metadata key of the exporter
METADATA_FX_NODE = "pkg.onnxlens.fx_node"
METADATA_STACK = "pkg.onnxlens.stack_trace"
METADATA_MODULE_STACK = "pkg.onnxlens.module_stack"
METADATA_MODULE_PATH = "pkg.onnxlens.module_path"


def ir_version(opset_version: int) -> int:
    """The newest ONNX IR version onnxruntime accepts together with `opset_version`."""
    return 10 if opset_version <= 21 else 11


class Stage(str, enum.Enum):
    """The stages of one export, in order, as reported to progress callbacks and timed in the SARIF log."""

    LOAD = "load"  # import the model file (worker and CLI)
    BUILD_TARGET = "build target"  # call the @export_target function
    CAPTURE = "capture"
    PASSES = "passes"
    ANALYSIS = "analysis"
    TRANSLATION = "translation"
    OP_LEVEL_DEBUG = "op-level debug"
    ONNX_PASSES = "onnx passes"
    SECOND_SIZE = "second-size check"  # a dynamic export run at other sizes (exporter.verify.second_size)
    VERIFY = "verify"  # the final model in onnxruntime against eager PyTorch (exporter.verify.accuracy)
    SAVE = "save"

    def __str__(self) -> str:
        return self.value


def progress_text(stage: str, info: Mapping[str, Any]) -> str:
    """How a progress report reads: the stage, and the nodes translated so far ("translation 12/40 nodes")."""
    return f"{stage} {info['done']}/{info['total']} nodes" if "done" in info else str(stage)
