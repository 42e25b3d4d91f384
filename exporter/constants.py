"""Names and numbers shared by the exporter, the export worker and the language server.

A leaf module: it imports nothing heavy, so the server (which never imports torch) can use it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

DEFAULT_OPSET_VERSION = (
    20  # as torch.onnx.export since PyTorch 2.9 (the seed: 18); ExportOptions.opset_version changes it
)
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


class Prop:
    """Names of the SARIF result properties the exporter writes and the language server reads."""

    EXCEPTION = "exception"  # the Python traceback of a failure
    # The FX node a result is about (`exporter.diagnostics.context.node_properties`).
    FX_NODE = "fxNode"
    FX_TARGET = "fxTarget"
    MODULE_PATH = "modulePath"
    MODULE_CLASS = "moduleClass"
    INPUT_SHAPES = "inputShapes"
    INPUT_DTYPES = "inputDtypes"
    OUTPUT_SHAPES = "outputShapes"
    OUTPUT_DTYPES = "outputDtypes"
    ONNX_OP_TYPES = "onnxOpTypes"
    # FXE0011: the operator's schema and the function generated for it.
    SCHEMA = "schema"
    GENERATED_FUNCTION = "generatedFunction"
    # FXE0017: a capture strategy's attempt (a note beside the capture error).
    STRATEGY = "strategy"
    # FXE0020: the dimension fixed, where its example is, torch's suggested fix.
    INPUT = "input"
    DIM = "dim"
    SIZE = "size"
    ARGUMENT = "argument"
    DIM_NAME = "dimName"
    SUGGESTED_FIXES = "suggestedFixes"
    DYNAMIC_SHAPES = "dynamicShapes"
    SECOND_SIZE_CHECK = "secondSizeCheck"  # the second-size check's verdict: passed, failed, numerics
    # FXE0013 / FXE0021 per-line summaries: aggregate == SOURCE_LINE, one entry of `ops` per checked op.
    AGGREGATE = "aggregate"
    OPS = "ops"
    MISMATCHES = "mismatches"
    MAX_ABS_ERROR = "maxAbsError"
    # An op of `ops`: these, the FX node's names above and its check.
    OK = "ok"
    SKIPPED = "skipped"
    MAX_REL_ERROR = "maxRelError"
    ATOL = "atol"
    RTOL = "rtol"
    # FXE0021: the reproducer folder of the first divergence.
    REPRODUCER = "reproducer"
    # A result without a source line of its own, located at its export target's definition (for code scanning).
    AT_TARGET = "atExportTarget"


SOURCE_LINE = "sourceLine"  # Prop.AGGREGATE of a per-line summary
OUTCOME_PROPERTY = "onnxlens.outcome"  # the SARIF run property: the export's `exporter.outcome.Outcome`
