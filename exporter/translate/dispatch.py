"""Pick the ONNX function for an FX node: overload lookup (FXE0016) and schema match (FXE0014)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import onnx_ir as ir
import torch

from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.translate.opname import OpName
from exporter.translate.registry import ONNXFunction, OnnxRegistry


class UnsupportedOperatorError(RuntimeError):
    """No ONNX function can translate an FX node."""

    def __init__(self, node: torch.fx.Node, reason: str) -> None:
        super().__init__(reason)
        self.node = node


def op_name(node: torch.fx.Node) -> OpName:
    name = OpName.from_target(node.target)
    if name is None:
        raise UnsupportedOperatorError(node, f"Unknown call_function target: {node.target!r}")
    return name


def candidate_functions(node: torch.fx.Node, registry: OnnxRegistry) -> tuple[list[ONNXFunction], bool]:
    """The functions that can translate `node` (complex or real as its inputs require), and whether
    they were found only under the operator's default overload. Raises `UnsupportedOperatorError`."""
    name = op_name(node)
    functions, fell_back = registry.lookup(name)
    if not functions:
        raise UnsupportedOperatorError(node, f"No ONNX function is registered for {name} (called as {node.target}).")
    complex_inputs = any(_is_complex(arg) for arg in node.args)
    matching = [f for f in functions if f.is_complex == complex_inputs]
    if not matching:
        kind = "complex" if complex_inputs else "real"
        raise UnsupportedOperatorError(node, f"{name} has ONNX functions, but none for {kind} inputs.")
    return matching, fell_back


def find_functions(node: torch.fx.Node, registry: OnnxRegistry, ctx: DiagnosticContext) -> list[ONNXFunction]:
    """`candidate_functions`, reporting a fallback to the default overload (FXE0016)."""
    functions, fell_back = candidate_functions(node, registry)
    if fell_back:
        ctx.report(
            rules.FIND_OPERATOR_OVERLOADS_IN_ONNX_REGISTRY,
            Level.WARNING,
            f"Operator overload {op_name(node)} is not in the ONNX registry; using its default overload.",
            node=node,
            requestedOverload=op_name(node).qualified_name(),
        )
    return functions


def select_function(
    node: torch.fx.Node,
    candidates: list[ONNXFunction],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    ctx: DiagnosticContext,
) -> ONNXFunction:
    """The first candidate whose schema accepts the input types, else the nearest one (FXE0014)."""
    scored = [(_match_score(fn, args, kwargs), i, fn) for i, fn in enumerate(candidates)]
    perfect = [fn for (score, total), _, fn in scored if score == total]
    if perfect:
        return perfect[0]
    (score, total), _, best = max(scored, key=lambda s: (s[0][0], -s[1]))
    ctx.report(
        rules.FIND_OPSCHEMA_MATCHED_SYMBOLIC_FUNCTION,
        Level.WARNING,
        f"No ONNX function for {node.target} accepts the input types exactly; "
        f"using the nearest match {best.name} ({score}/{total} inputs match).",
        node=node,
        onnxFunction=best.name,
        matchScore=score,
        matchTotal=total,
    )
    return best


# Types PyTorch only views, copies and casts (it has no arithmetic on them), which ONNX's shape and cast ops take
# though torchlib's signatures predate them: no function is a nearer match than another.
_MOVED_ONLY = frozenset(
    {
        ir.DataType.FLOAT8E4M3FN,
        ir.DataType.FLOAT8E4M3FNUZ,
        ir.DataType.FLOAT8E5M2,
        ir.DataType.FLOAT8E5M2FNUZ,
        ir.DataType.FLOAT8E8M0,
    }
)


def _match_score(fn: ONNXFunction, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[int, int]:
    """(inputs whose dtype the schema allows, inputs checked)."""
    signature = getattr(fn.onnx_function, "op_signature", None)
    if signature is None:
        return 0, 0
    values = list(args)
    score = total = 0
    for param in signature.params:
        if not isinstance(param, ir.schemas.Parameter):
            if values:
                values.pop(0)
            continue
        value = values.pop(0) if values else kwargs.get(param.name)
        if not isinstance(value, ir.Value) or value.dtype is None:
            continue
        total += 1
        allowed = {t.dtype for t in param.type_constraint.allowed_types}
        score += value.dtype in allowed or value.dtype in _MOVED_ONLY
    return score, total


def _is_complex(arg: Any) -> bool:
    if isinstance(arg, torch.fx.Node):
        val = arg.meta.get("val")
        return isinstance(val, torch.Tensor) and val.is_complex()
    if isinstance(arg, (list, tuple)):
        return any(_is_complex(a) for a in arg)
    return False
