"""Decomposition that keeps every operator the registry can translate."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from exporter.opname import OpName
from exporter.registry import OnnxRegistry


def onnx_friendly_decomposition_table(
    registry: OnnxRegistry, unsupported: set[torch._ops.OperatorBase] = frozenset()
) -> dict[torch._ops.OperatorBase, Callable]:
    """PyTorch's decompositions, minus those of operators the registry translates directly
    (except the `unsupported` ones, e.g. ops called on complex tensors that only have real functions)."""
    supported = registry.supported_targets() - unsupported
    table: dict[torch._ops.OperatorBase, Callable] = {}
    for op, fn in itertools.chain(
        torch.export.default_decompositions().items(),
        torch._decomp.decomposition_table.items(),
    ):
        if op in supported or op in table or not hasattr(op, "_schema"):
            continue
        table[op] = fn
    return table


def untranslatable_targets(program: torch.export.ExportedProgram, registry: OnnxRegistry) -> set[torch._ops.OpOverload]:
    """Operators in the graph the registry cannot translate as called (or that mutate inputs)."""
    supported = registry.supported_targets()
    found: set[torch._ops.OpOverload] = set()
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            target = node.target
            if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
                continue
            if target not in supported or target._schema.is_mutable:
                found.add(target)
            elif _has_complex_input(node) and not _has_complex_function(target, registry):
                found.add(target)
    return found


def decompose(program: torch.export.ExportedProgram, registry: OnnxRegistry) -> torch.export.ExportedProgram:
    """Run decompositions (and functionalization) on `program`, if it needs any.

    When every operator already has a direct translation, the (costly) re-tracing of
    `run_decompositions` is skipped.
    """
    untranslatable = untranslatable_targets(program, registry)
    if not untranslatable:
        return program
    return program.run_decompositions(onnx_friendly_decomposition_table(registry, untranslatable))


def _has_complex_input(node: torch.fx.Node) -> bool:
    return any(
        isinstance(a.meta.get("val"), torch.Tensor) and a.meta["val"].is_complex()
        for a in node.all_input_nodes
    )


def _has_complex_function(target: torch._ops.OpOverload, registry: OnnxRegistry) -> bool:
    functions, _ = registry.lookup(OpName.from_target(target))
    return any(f.is_complex for f in functions)
