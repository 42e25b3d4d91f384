"""Bisection to the first FX node whose ONNX value diverges from PyTorch in onnxruntime.

Every ONNX value the exporter named after an FX node (``translate`` names a node's outputs ``<node>``
or ``<node>_<i>`` and tags their ONNX nodes with it; the names and tags survive inlining,
optimization and modularization) becomes an extra output of **one** onnxruntime session over the
final model (its local functions inlined). The FX graph runs once in `torch.fx.Interpreter`; its
values are compared with onnxruntime's in topological order, a chunk of outputs at a time, so
at most about two chunks of activations are held at once (``budget_bytes`` each).

A node *diverges* when its value is out of tolerance; a value without an ONNX counterpart inherits
the divergence of its inputs. Values that depend on random numbers (`seeded`) are not compared, and
indices that pick other elements of equal values (`ties`) do not diverge. The *first* divergence is the
first node in topological order that diverges while none of its inputs do; later diverging nodes with a
diverging input only inherit it.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common_passes
import torch

from exporter.constants import METADATA_FX_NODE
from exporter.translate.fx_to_onnx import value_name
from exporter.verify import ort_session, seeded, ties
from exporter.verify.numerics import Comparison, compare, dtype_name, to_numpy
from exporter.verify.op_debug import placeholder_feeds

DEFAULT_BUDGET_BYTES = 256 * 2**20  # activations per onnxruntime run (and as many from PyTorch)


@dataclasses.dataclass
class Divergence:
    """The first diverging node and what the bisection saw."""

    node: torch.fx.Node
    comparison: Comparison
    onnx_op_types: list[str]
    inherited: int  # later nodes that diverge only because an input does
    independent: list[str]  # later nodes that diverge while their inputs match (other first divergences)
    repro_graph: ir.Graph  # for the reproducer: the ONNX nodes from the nearest known values to the node's value
    repro_inputs: dict[str, np.ndarray]  # PyTorch's values of that graph's inputs
    expected: np.ndarray  # PyTorch's value of the node


@dataclasses.dataclass
class Bisection:
    """The outcome: the first divergence (None if every compared value matches) and the effort."""

    divergence: Divergence | None
    compared: int  # FX nodes compared
    mapped_fraction: float  # of the FX nodes with a tensor value, those with an ONNX value to compare
    ort_runs: int
    results: dict[torch.fx.Node, Comparison]  # every compared node's numbers
    op_types: dict[str, list[str]]  # FX node name → the ONNX op types it became in the final model
    ties: dict[str, torch.fx.Node]  # ONNX value name → the op whose indices differ among equal values only


def onnx_name(node: ir.Node | None) -> str | None:
    """The FX node an ONNX node was translated from (its ``pkg.onnxlens.fx_node`` tag)."""
    if node is None:
        return None
    tag = node.metadata_props.get(METADATA_FX_NODE)
    return tag.split(": ", 1)[0] if tag else None


def map_values(program: torch.export.ExportedProgram, graph: ir.Graph) -> dict[torch.fx.Node, ir.Value]:
    """FX node → the ONNX value of `graph` holding its (tensor) output.

    A multi-output node is compared through its ``getitem`` users (outputs nothing uses may differ).
    """
    values = {v.name: v for n in graph for v in n.outputs if v.name}
    mapped: dict[torch.fx.Node, ir.Value] = {}
    for node in program.graph.nodes:
        if node.op != "call_function" or not isinstance(node.meta.get("val"), torch.Tensor):
            continue
        owner = node.args[0].name if node.target is operator.getitem else node.name
        value = values.get(value_name(node))
        if value is not None and onnx_name(value.producer()) == owner:
            mapped[node] = value
    return mapped


def probe_model(
    model: ir.Model, program: torch.export.ExportedProgram
) -> tuple[ir.Model, dict[torch.fx.Node, ir.Value]]:
    """The final model with its local functions inlined and every mapped value as an extra output."""
    probe = model.clone()
    common_passes.InlinePass()(probe)
    mapped = map_values(program, probe.graph)
    for value in mapped.values():
        if not value.is_graph_output():
            probe.graph.outputs.append(value)
    return probe, mapped


def bisect(
    program: torch.export.ExportedProgram,
    model: ir.Model,
    feeds: dict[str, np.ndarray],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    tols: dict[str, tuple[float, float]],
    *,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
) -> Bisection:
    """Find the first FX node of `program` whose value in `model` (run in onnxruntime on `feeds`)
    diverges from PyTorch's on `args`/`kwargs`."""
    probe, mapped = probe_model(model, program)
    session = ort_session.session(probe)
    walker = _Walker(program, probe.graph, mapped, session, feeds, tols, budget_bytes, seeded.random_sources(program))
    with torch.no_grad():
        walker.run(*placeholder_feeds(program, args, kwargs, {**program.state_dict, **program.constants}))
    walker.flush()
    tensors = sum(
        1 for n in program.graph.nodes if n.op == "call_function" and isinstance(n.meta.get("val"), torch.Tensor)
    )
    op_types: dict[str, list[str]] = {}
    for onnx_node in probe.graph:
        op_types.setdefault(onnx_name(onnx_node) or "", []).append(onnx_node.op_type)
    return Bisection(
        walker.divergence,
        len(walker.results),
        len(mapped) / tensors if tensors else 1.0,
        walker.ort_runs,
        walker.results,
        op_types,
        {value_name(n): ties.indexing_op(n) for n in walker.ties},
    )


class _Walker(torch.fx.Interpreter):
    """Runs the FX graph, collecting the mapped nodes' values; every `budget_bytes` of them, runs
    onnxruntime for the same values and compares, deciding which nodes diverge."""

    def __init__(self, program, graph: ir.Graph, mapped, session, feeds, tols, budget_bytes: int, random) -> None:
        super().__init__(program.graph_module)
        self.random = random  # values that depend on random numbers: onnxruntime draws its own, not compared
        self.indexed: dict[torch.fx.Node, torch.Tensor] = {}  # the input of an op whose indices are compared
        self.ties: set[torch.fx.Node] = set()  # indices that pick other elements of the same values
        self.onnx_graph, self.mapped, self.session, self.feeds, self.tols = graph, mapped, session, feeds, tols
        self.budget_bytes = budget_bytes
        self.pending: dict[torch.fx.Node, torch.Tensor] = {}
        self.inputs: dict[torch.fx.Node, Any] = {}  # values of the pending nodes' inputs (for the reproducer)
        self.pending_bytes = 0
        self.order = list(program.graph.nodes)
        self.position = {n: i for i, n in enumerate(self.order)}
        self.cursor = 0  # nodes before it have their divergence decided
        self.diverges: dict[torch.fx.Node, bool] = {}
        self.results: dict[torch.fx.Node, Comparison] = {}
        self.divergence: Divergence | None = None
        self.ort_runs = 0

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if n.target in ties.INDEXED and any(ties.indexing_op(u) is n and u in self.mapped for u in n.users):
            self.indexed[n] = self.env[n.args[0]]  # until its compared indices are decided
        if n in self.mapped and n not in self.random:
            self.pending[n] = result
            self.inputs.update({i: self.env[i] for i in n.all_input_nodes if i in self.env})
            self.pending_bytes += result.numel() * result.element_size()
            if self.pending_bytes >= self.budget_bytes:
                self.flush()
        return result

    def flush(self) -> None:
        """Compare the pending values with onnxruntime's and decide the divergence of the nodes up to them."""
        if self.pending:
            names = [self.mapped[n].name for n in self.pending]
            actual = self.session.run(names, self.feeds)
            self.ort_runs += 1
            for (node, expected), value in zip(self.pending.items(), actual):
                self.results[node] = compare(value, to_numpy(expected), dtype_name(expected), self.tols)
                op = ties.indexing_op(node)
                values = self.indexed.pop(op, None) if op is not None else None
                if not self.results[node].ok and values is not None:
                    if ties.same_values(values, ties.dim_of(op), expected, torch.from_numpy(value)):
                        self.ties.add(node)
            del actual
        last = max((self.position[n] for n in self.pending), default=len(self.order) - 1)
        for node in self.order[self.cursor : last + 1]:
            self._decide(node)
        self.cursor = last + 1
        self.pending.clear()
        self.inputs.clear()
        self.pending_bytes = 0

    def _decide(self, node: torch.fx.Node) -> None:
        if node in self.ties:
            self.diverges[node] = False
            return
        inputs_diverge = any(self.diverges.get(i, False) for i in node.all_input_nodes)
        result = self.results.get(node)
        self.diverges[node] = inputs_diverge if result is None else not result.ok
        if result is None or result.ok:
            return
        if inputs_diverge:
            if self.divergence is not None:
                self.divergence.inherited += 1
        elif self.divergence is None:
            self.divergence = self._first(node, result)
        else:
            self.divergence.independent.append(node.name)

    def _first(self, node: torch.fx.Node, result: Comparison) -> Divergence:
        target = node.args[0] if node.target is operator.getitem else node
        op_types = [n.op_type for n in self.onnx_graph if onnx_name(n) == target.name]
        known = {
            self.mapped[n]: to_numpy(v)
            for n, v in {**self.inputs, **self.pending}.items()
            if n in self.mapped and n is not node
        }
        inputs, sub = _region(self.onnx_graph, self.mapped[node], known, self.feeds)
        return Divergence(target, result, op_types, 0, [], sub, inputs, to_numpy(self.pending[node]))


def _region(
    graph: ir.Graph, output: ir.Value, known: dict[ir.Value, np.ndarray], feeds: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], ir.Graph]:
    """The ONNX nodes computing `output` from the nearest values with a known PyTorch value (or the
    graph's inputs, or initializers), as a graph of its own, and its input values by name."""
    graph_inputs = set(graph.inputs)
    boundary: dict[ir.Value, np.ndarray] = {}
    stack, seen = [output], {output}
    while stack:
        value = stack.pop()
        if value is not output and value in known:
            boundary[value] = known[value]
            continue
        if value in graph_inputs:
            boundary[value] = feeds[value.name]
            continue
        producer = value.producer()
        if producer is None:  # an initializer: extracted with the nodes
            continue
        for v in producer.inputs:
            if v is not None and v not in seen:
                seen.add(v)
                stack.append(v)
    ordered = sorted(boundary, key=lambda v: v.name or "")
    sub = ir.convenience.extract(graph, ordered, [output])
    return {v.name: boundary[v] for v in ordered}, sub
