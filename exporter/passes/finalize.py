"""Passes on the translated ONNX model: inline torchlib, optimize, convert the opset, modularize, check."""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from exporter.diagnostics import DiagnosticContext, Level
from exporter.diagnostics import rules
from exporter.passes import modularize as modularize_pass
from exporter.registry import DEFAULT_OPSET_VERSION

if TYPE_CHECKING:
    from exporter.api import ExportOptions

_CHECKABLE_BYTES = 2**31 - 2**26  # onnx.checker needs the model as one protobuf (< 2 GiB)


def finalize(model: ir.Model, opset_version: int, options: ExportOptions, ctx: DiagnosticContext) -> None:
    """Bring the translated model into its final shape, in place."""
    _run(ctx, "inline torchlib functions", common_passes.InlinePass(), model)
    if options.optimize:
        import onnxscript.optimizer

        _run(ctx, "optimize", lambda m: onnxscript.optimizer.optimize_ir(m, inline=False), model)
    _run(ctx, "remove unused nodes", common_passes.RemoveUnusedNodesPass(), model)
    if opset_version != DEFAULT_OPSET_VERSION:
        from onnxscript import version_converter

        _run(ctx, f"convert to opset {opset_version}", lambda m: version_converter.convert_version(m, opset_version, fallback=True), model)
    if options.modularize:
        _run(ctx, "modularize", modularize_pass.modularize, model)
    _run(ctx, "fix names", common_passes.NameFixPass(), model)
    _run(ctx, "remove unused opsets", common_passes.RemoveUnusedOpsetsPass(), model)
    check(model, ctx)


def check(model: ir.Model, ctx: DiagnosticContext) -> None:
    """Run onnx.checker; a failure is an error result (the model is still returned for inspection)."""
    size = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    if size > _CHECKABLE_BYTES:
        ctx.report(rules.ONNX_MODEL_CHECK, Level.NOTE, "Skipped onnx.checker: the weights exceed 2 GiB.")
        return
    proto = ir.serde.serialize_model(model)
    try:
        onnx.checker.check_model(proto, full_check=False)
    except onnx.checker.ValidationError as e:
        ctx.report(rules.ONNX_MODEL_CHECK, Level.ERROR, f"onnx.checker rejected the model: {e}", exception=e)
        return
    if ctx.wants(Level.NONE):
        del proto.graph.initializer[:]  # the dump shows structure, not weights
        ctx.report(rules.ONNX_MODEL_CHECK, Level.NONE, "onnx.checker accepted the model.", onnxGraph=onnx.printer.to_text(proto))


def _run(ctx: DiagnosticContext, name: str, fn, model: ir.Model) -> None:
    fn(model)
    ctx.report(rules.ONNX_MODEL_CHECK, Level.NONE, f"Ran ONNX pass {name}.", **{"pass": name})
