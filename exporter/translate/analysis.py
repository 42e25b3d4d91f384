"""Find every FX node the registry cannot translate, before translation starts (FXE0012)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from typing import Any

import torch

from exporter.translate import dispatch
from exporter.diagnostics import DiagnosticContext, Level
from exporter.diagnostics import rules
from exporter.diagnostics.locations import stack_of
from exporter.translate.registry import OnnxRegistry
from exporter.translate.fx_to_onnx import STRUCTURAL_TARGETS


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
        ctx.report(rules.NO_SYMBOLIC_FUNCTION, Level.ERROR, reason, node=node, **properties, **(describe(node) if describe else {}))
    if unsupported:
        targets = sorted({str(n.target) for n in unsupported})
        ctx.report(
            rules.UNSUPPORTED_FX_NODE_ANALYSIS,
            Level.ERROR,
            f"Unsupported FX nodes: {', '.join(targets)}.",
            stack=stack_of(unsupported[0]),  # located at the first one; FXE0011 locates each
            unsupportedTargets=targets,
            unsupportedNodes={str(n.target): [m.name for m in unsupported if m.target == n.target] for n in unsupported},
        )
    return unsupported
