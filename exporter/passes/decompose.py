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


def decompose(program: torch.export.ExportedProgram, registry: OnnxRegistry) -> torch.export.ExportedProgram:
    """Run decompositions (and functionalization) on `program`."""
    return program.run_decompositions(onnx_friendly_decomposition_table(registry))
