"""Modularization: each ``nn.Module`` call becomes an ONNX local function (the "f" boxes Netron shows).

Every ONNX node carries its FX node's ``nn_module_stack`` (see `translate`). Maximal runs of
consecutive nodes under the same module call are moved into a function, recursively for
submodules. Runs are contiguous in topological order, so the rewrite can never create a cycle.
"""

from __future__ import annotations

import json

import onnx_ir as ir

from exporter.constants import DOMAIN_MODULES, METADATA_MODULE_PATH, METADATA_MODULE_STACK

Scope = tuple[str, str, str]  # (module_stack key, module path, class name)


class ModularizePass(ir.passes.InPlacePass):
    """Group the main graph's nodes into nested local functions per module call."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        functions = len(model.functions)
        _group(model, model.graph, depth=0)
        return ir.passes.PassResult(model, modified=len(model.functions) != functions)


def _scopes(node: ir.Node) -> list[Scope]:
    raw = node.metadata_props.get(METADATA_MODULE_STACK)
    if not raw:
        return []
    return [tuple(entry) for entry in json.loads(raw) if entry[1]]  # drop the root module


def _group(model: ir.Model, graph: ir.Graph, depth: int) -> None:
    nodes = list(graph)
    i = 0
    while i < len(nodes):
        scopes = _scopes(nodes[i])
        if len(scopes) <= depth:
            i += 1
            continue
        scope = scopes[depth]
        j = i + 1
        while j < len(nodes) and _scope_at(nodes[j], depth) == scope:
            j += 1
        run = nodes[i:j]
        if not any(_has_subgraph(n) for n in run):
            function = _extract(model, graph, run, scope)
            _group(model, function.graph, depth + 1)
        i = j


def _scope_at(node: ir.Node, depth: int) -> Scope | None:
    scopes = _scopes(node)
    return scopes[depth] if len(scopes) > depth else None


def _has_subgraph(node: ir.Node) -> bool:
    return any(attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for attr in node.attributes.values())


def _extract(model: ir.Model, graph: ir.Graph, run: list[ir.Node], scope: Scope) -> ir.Function:
    """Move `run` out of `graph` into a new function and call it where the run was."""
    members = set(run)
    external: dict[ir.Value, ir.Value] = {}
    for node in run:
        for value in node.inputs:
            if value is not None and value.producer() not in members and value not in external:
                external[value] = ir.Value(name=value.name, type=value.type, shape=value.shape)
    exported = [
        value
        for node in run
        for value in node.outputs
        if value.is_graph_output() or any(use.node not in members for use in value.uses())
    ]
    _, path, cls = scope
    # One function per call: "<Class>_<path>" (onnxruntime does not support function overloads).
    # A module called twice (or whose nodes are not contiguous) gets one function per run.
    base = f"{cls.rsplit('.', 1)[-1]}_{path.replace('.', '_')}"
    name, n = base, 0
    while (DOMAIN_MODULES, name, "") in model.functions:
        n += 1
        name = f"{base}_{n}"
    call = ir.Node(DOMAIN_MODULES, name, list(external), num_outputs=len(exported))
    call.metadata_props.update({k: v for k, v in run[0].metadata_props.items() if k != METADATA_MODULE_STACK})
    call.metadata_props[METADATA_MODULE_PATH] = path
    graph.insert_before(run[0], call)
    for old, new in zip(exported, call.outputs):
        new.name, new.type, new.shape = old.name, old.type, old.shape
        uses = [u for u in old.uses() if u.node not in members]
        for use in uses:
            use.node.replace_input_with(use.idx, new)
        if old.is_graph_output():
            graph.outputs[:] = [new if v is old else v for v in graph.outputs]
    graph.remove(run, safe=False)
    for node in run:
        for i, value in enumerate(node.inputs):
            if value in external:
                node.replace_input_with(i, external[value])
    graph.opset_imports[DOMAIN_MODULES] = 1
    body = ir.Graph(list(external.values()), exported, nodes=run, opset_imports=dict(graph.opset_imports))
    function = ir.Function(DOMAIN_MODULES, name, graph=body, attributes=[])
    model.functions[function.identifier()] = function
    return function
