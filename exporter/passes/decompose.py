"""Decomposition that keeps every operator the registry can translate."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from exporter.registry import OnnxRegistry


def onnx_friendly_decomposition_table(registry: OnnxRegistry) -> dict[torch._ops.OperatorBase, Callable]:
    """PyTorch's decompositions, minus those of operators the registry translates directly."""
    supported = registry.supported_targets()
    table: dict[torch._ops.OperatorBase, Callable] = {}
    for op, fn in itertools.chain(
        torch.export.default_decompositions().items(),
        torch._decomp.decomposition_table.items(),
    ):
        if op in supported or op in table or not hasattr(op, "_schema"):
            continue
        table[op] = fn
    return table


def needs_decomposition(program: torch.export.ExportedProgram, registry: OnnxRegistry) -> bool:
    """Whether any operator lacks a direct translation or mutates its inputs.

    When neither is true the graph is already what translation needs, and the (costly)
    re-tracing of `run_decompositions` is skipped.
    """
    supported = registry.supported_targets()
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            if node.target not in supported or node.target._schema.is_mutable:
                return True
    return False


def decompose(program: torch.export.ExportedProgram, registry: OnnxRegistry) -> torch.export.ExportedProgram:
    """Run decompositions (and functionalization) on `program`, if it needs any."""
    if not needs_decomposition(program, registry):
        return program
    return program.run_decompositions(onnx_friendly_decomposition_table(registry))
