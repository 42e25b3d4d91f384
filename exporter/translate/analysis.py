"""Find every FX node the registry cannot translate, before translation starts (FXE0012)."""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.diagnostics.locations import stack_of
from exporter.translate import dispatch
from exporter.translate.fx_to_onnx import STRUCTURAL_TARGETS
from exporter.translate.registry import OnnxRegistry


def call_nodes(module: torch.fx.GraphModule) -> Iterator[torch.fx.Node]:
    """All call_function nodes, including those of nested graphs (torch.cond branches)."""
    for node in module.graph.nodes:
        if node.op == "get_attr":
            sub = getattr(module, node.target, None)
            if isinstance(sub, torch.fx.GraphModule):
                yield from call_nodes(sub)
        elif node.op == "call_function":
            yield node


def find_unsupported(
    module: torch.fx.GraphModule,
    registry: OnnxRegistry,
    ctx: DiagnosticContext,
    describe: Callable[[torch.fx.Node], dict[str, Any]] | None = None,
) -> list[torch.fx.Node]:
    """Report one FXE0011 per untranslatable node (with the properties `describe` gives it) and one
    FXE0012 listing them all."""
    unsupported: list[torch.fx.Node] = []
    for node in call_nodes(module):
        if node.target in STRUCTURAL_TARGETS or node.target is operator.getitem:
            continue
        try:
            dispatch.candidate_functions(node, registry)
            continue
        except dispatch.UnsupportedOperatorError as e:
            reason = str(e)
        unsupported.append(node)
        schema = getattr(node.target, "_schema", None)
        properties = {"schema": str(schema)} if schema else {}
        origin = decomposed_from(node)
        if origin:
            reason = f"{user_call(node)} became {node.target}, which has no ONNX translation. {reason}"
            properties |= {"userCall": origin[0], "originalOperator": str(origin[1])}
        ctx.report(
            rules.NO_SYMBOLIC_FUNCTION,
            Level.ERROR,
            reason,
            node=node,
            **properties,
            **(describe(node) if describe else {}),
        )
    if unsupported:
        targets = sorted({str(n.target) for n in unsupported})
        ctx.report(
            rules.UNSUPPORTED_FX_NODE_ANALYSIS,
            Level.ERROR,
            f"Unsupported FX nodes: {summary(unsupported)}.",
            stack=stack_of(unsupported[0]),  # located at the first one; FXE0011 locates each
            unsupportedTargets=targets,
            unsupportedNodes={
                str(n.target): [m.name for m in unsupported if m.target == n.target] for n in unsupported
            },
        )
    return unsupported


def summary(nodes: list[torch.fx.Node]) -> str:
    """The unsupported operators, each decomposed one with what the user called and where:
    ``prims.bessel_j0.default (from torch.special.bessel_j0 at model.py:7)``."""
    calls: dict[str, list[str]] = {}
    for node in nodes:
        origins = calls.setdefault(str(node.target), [])
        if decomposed_from(node) and user_call(node) not in origins:
            origins.append(user_call(node))
    return ", ".join(
        f"{target} (from {'; '.join(origins)})" if origins else target for target, origins in sorted(calls.items())
    )


def decomposed_from(node: torch.fx.Node) -> tuple[str, torch._ops.OpOverload] | None:
    """For a node a decomposition produced, the Python name of the operator the user called and that
    operator (``("torch.cumprod", aten.cumprod.default)``); None for a node the user's code called."""
    original = node.meta.get("original_aten")
    if not isinstance(original, torch._ops.OpOverload) or str(original) == str(node.target):  # copies compare unequal
        return None
    return _python_name(original), original


def user_call(node: torch.fx.Node) -> str:
    """``torch.cumprod at model.py:7`` for a decomposed node (the innermost user frame of its stack)."""
    name = decomposed_from(node)[0]
    frames = [f for f in stack_of(node) if f.is_user_code]
    return f"{name} at {os.path.basename(frames[0].path)}:{frames[0].line}" if frames else name


_NAMESPACES = {
    "special_": ("torch.special", torch.special),
    "linalg_": ("torch.linalg", torch.linalg),
    "fft_": ("torch.fft", torch.fft),
}


def _python_name(op: torch._ops.OpOverload) -> str:
    """The Python function a user calls for an ATen operator (``aten::special_bessel_j0`` → ``torch.special.bessel_j0``),
    or the operator's own name where there is none."""
    name = op._schema.name.split("::")[-1]
    for prefix, (namespace, module) in _NAMESPACES.items():
        if name.startswith(prefix) and hasattr(module, name[len(prefix) :]):
            return f"{namespace}.{name[len(prefix) :]}"
    if op.namespace == "aten" and hasattr(torch, name):
        return f"torch.{name}"
    if op.namespace == "aten" and hasattr(torch.nn.functional, name):
        return f"torch.nn.functional.{name}"
    return str(op)
