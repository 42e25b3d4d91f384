"""An exported model as a graph for the editor's view (the `GRAPH` command), as JSON.

The view is **inlined**: local functions are expanded, so `nodes` are the model's primitive ops
(ids: the call nodes' ids and the node's, joined by ``/``). Each module's function call
(``pkg.onnxlens.modules``, see `exporter.passes.modularize`) is a group: a node has its innermost one
(`group`, an entry of `groups`, nested by `parent`) and its module path. Edges link the node producing
a value to each node using it (``input:<name>`` and ``output:<name>`` for the graph's inputs and
outputs; initializers are listed, not linked). A node's source is the innermost user frame of the
stack the exporter recorded in its ``pkg.onnxlens.stack_trace`` metadata; op-level debug (FXE0013)
and verification (FXE0021) numbers come from the SARIF log's per-line results, by FX node. Nodes in
subgraphs (``If``, ``Loop``) are not listed.

The model is read without its external data and no tensor data goes into the JSON. Needs onnx_ir
(imported by the caller off the event loop: it takes most of a second).
"""

from __future__ import annotations

import functools
import json
import os
import re
import sysconfig
from typing import Any

import onnx_ir as ir

from exporter.constants import (
    DOMAIN_MODULES,
    METADATA_FX_NODE,
    METADATA_MODULE_PATH,
    METADATA_MODULE_STACK,
    METADATA_STACK,
    Prop,
)
from onnxlens_server.sarif_log import SarifLog

_CHECK_KEYS = (Prop.OK, Prop.MAX_ABS_ERROR, Prop.MAX_REL_ERROR, Prop.ATOL, Prop.RTOL, Prop.SKIPPED)
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_ROOTS = tuple(
    os.path.realpath(p) + os.sep
    for p in (
        os.path.join(_PACKAGE_ROOT, "exporter"),
        os.path.dirname(os.path.abspath(__file__)),  # this package
        *(sysconfig.get_paths()[key] for key in ("stdlib", "purelib", "platlib")),
    )
)
_DTYPES = {"FLOAT": "float32", "DOUBLE": "float64"}  # the others' ONNX names read well in lower case
_LIST_ITEMS = 16  # longer attribute lists are cut


def graph_json(onnx_path: str, log: SarifLog | None) -> dict[str, Any]:
    """The model at `onnx_path` (without its external data) as a graph, with the checks of its export's
    SARIF log `log` if there is one. Raises OSError or ValueError for a missing or unreadable model."""
    if not os.path.isfile(onnx_path):
        raise FileNotFoundError(f"{onnx_path} does not exist (deleted since the export?)")
    try:
        model = ir.load(onnx_path)
    except Exception as e:  # protobuf's DecodeError and friends
        raise ValueError(f"{onnx_path} is not a readable ONNX model ({type(e).__name__}: {e})") from None
    return {"path": onnx_path, **model_graph(model, node_checks(log) if log else {})}


def model_graph(model: ir.Model, checks: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """`model` inlined as a graph; `checks` are each FX node's numbers (`node_checks`)."""
    return _Builder(model, checks).build()


def node_checks(log: SarifLog) -> dict[str, list[dict[str, Any]]]:
    """The op-level debug and verification numbers of each FX node, from the per-line results of a SARIF log."""
    checks: dict[str, list[dict[str, Any]]] = {}
    for trace in log.traces:
        for op in trace.ops:
            if Prop.FX_NODE in op:
                check = {"rule": trace.rule_id, **{k: op[k] for k in _CHECK_KEYS if k in op}}
                checks.setdefault(op[Prop.FX_NODE], []).append(check)
    return checks


class _Builder:
    def __init__(self, model: ir.Model, checks: dict[str, list[dict[str, Any]]]) -> None:
        self.model = model
        self.checks = checks
        self.values: dict[str, dict[str, Any]] = {}  # value id -> {name, dtype, shape}
        self.producers: dict[str, str] = {}  # value id -> node id, or "input:<name>"
        self.nodes: list[dict[str, Any]] = []
        self.groups: list[dict[str, Any]] = []
        self.edges: list[dict[str, str]] = []
        self.classes: dict[str, str] = {}  # module path -> class name (from the nodes' module stacks)
        self.group_modules: dict[str | None, str] = {None: ""}  # group id -> module path

    def build(self) -> dict[str, Any]:
        graph = self.model.graph
        env: dict[ir.Value, str] = {}
        for value in graph.inputs:
            env[value] = self._define(value, value.name or "", f"input:{value.name}")
        for value in graph.initializers.values():
            if value not in env:
                env[value] = self._define(value, value.name or "", None)
        self._walk(graph, env, "", None)
        outputs = []
        for value in graph.outputs:
            vid = env[value]
            if vid in self.producers:
                self.edges.append({"from": self.producers[vid], "to": f"output:{value.name}", "value": value.name or ""})
            outputs.append(_value_info(value))
        for group in self.groups:
            group["class"] = self.classes.get(group["module"])
        return {
            "opset": self.model.opset_imports.get("", None),
            "producer": self.model.producer_name,
            "inputs": [_value_info(v) for v in graph.inputs],
            "outputs": outputs,
            "initializers": [
                {**_value_info(v), "external": isinstance(v.const_value, ir.ExternalTensor)} for v in graph.initializers.values()
            ],
            "groups": self.groups,
            "nodes": self.nodes,
            "edges": self.edges,
        }

    def _define(self, value: ir.Value, vid: str, producer: str | None) -> str:
        self.values[vid] = _value_info(value)
        if producer is not None:
            self.producers[vid] = producer
        return vid

    def _walk(self, graph: ir.Graph, env: dict[ir.Value, str], prefix: str, group: str | None) -> None:
        """Add `graph`'s nodes (a function's body under call `group`), expanding function calls."""
        for index, node in enumerate(graph):
            node_id = f"{prefix}{node.name or f'{node.op_type}_{index}'}"
            inputs = [env.get(v, v.name or "") if v is not None else None for v in node.inputs]
            function = self.model.functions.get(node.op_identifier())
            if function is not None:
                self._call(node, node_id, function, inputs, env, group)
                continue
            for value in node.outputs:
                env[value] = self._define(value, f"{prefix}{value.name}", node_id)
            self._add_node(node, node_id, inputs, [env[v] for v in node.outputs], group)

    def _call(self, node: ir.Node, node_id: str, function: ir.Function, inputs: list[str | None], env: dict[ir.Value, str], group: str | None) -> None:
        """Expand a function call: a module's call is a group of its own, other functions join `group`."""
        if node.domain == DOMAIN_MODULES:
            source, _ = _source(node)
            module = node.metadata_props.get(METADATA_MODULE_PATH, "")
            self.groups.append({"id": node_id, "parent": group, "function": function.name, "module": module, "source": source})
            self.group_modules[node_id] = module
            group = node_id
        inner = {formal: actual for formal, actual in zip(function.inputs, inputs) if actual is not None}
        self._walk(function.graph, inner, f"{node_id}/", group)
        for output, formal in zip(node.outputs, function.outputs):
            env[output] = inner[formal]

    def _add_node(self, node: ir.Node, node_id: str, inputs: list[str | None], outputs: list[str], group: str | None) -> None:
        for vid in inputs:
            if vid in self.producers:  # a node's output or a graph input (initializers have no producer)
                self.edges.append({"from": self.producers[vid], "to": node_id, "value": self.values[vid]["name"]})
        modules = _module_stack(node)
        for path, cls in modules:
            self.classes.setdefault(path, cls)
        fx_node = node.metadata_props.get(METADATA_FX_NODE, "").split(": ", 1)[0] or None
        source, stack = _source(node)
        self.nodes.append(
            {
                "id": node_id,
                "op": node.op_type,
                "domain": node.domain,
                "name": node.name or "",
                "group": group,
                "module": modules[-1][0] if modules else self.group_modules[group],  # nodes the optimizer made have no stack
                "inputs": [self.values.get(vid, {"name": vid}) if vid is not None else None for vid in inputs],
                "outputs": [self.values[vid] for vid in outputs],
                "attributes": {name: _attribute_text(attr) for name, attr in node.attributes.items()},
                "fxNode": fx_node,
                "source": source,
                "stack": stack,
                "checks": self.checks.get(fx_node, []) if fx_node else [],
            }
        )


def _value_info(value: ir.Value) -> dict[str, Any]:
    shape = None if value.shape is None else [d if isinstance(d, int) else str(d) for d in value.shape]
    return {"name": value.name or "", "dtype": _dtype(value.dtype), "shape": shape}


def _dtype(dtype: ir.DataType | None) -> str | None:
    return None if dtype is None else _DTYPES.get(dtype.name, dtype.name.lower())


def _module_stack(node: ir.Node) -> list[tuple[str, str]]:
    """(module path, class name) of each module call around the node, outermost first, the root module left out."""
    raw = node.metadata_props.get(METADATA_MODULE_STACK)
    return [(path, cls.rsplit(".", 1)[-1]) for _, path, cls in json.loads(raw) if path] if raw else []


def _source(node: ir.Node) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The innermost user frame of the node's recorded stack, and the whole stack, innermost first."""
    stack = [
        {"path": m["path"], "line": int(m["line"]), "function": m["function"].strip()}
        for line in node.metadata_props.get(METADATA_STACK, "").splitlines()
        if (m := _FRAME.match(line))
    ][::-1]
    return next((f for f in stack if _is_user_file(f["path"])), None), stack


@functools.lru_cache(maxsize=4096)
def _is_user_file(path: str) -> bool:
    """The model author's files: not the standard library, installed packages or onnxlens itself."""
    if path.startswith("<"):
        return False
    real = os.path.realpath(path)
    return not real.startswith(_LIBRARY_ROOTS) and "site-packages" not in real and "dist-packages" not in real


def _attribute_text(attr: ir.Attr) -> str:
    """A short readable value: numbers, strings and lists as written, tensors and graphs by their type only."""
    if attr.is_ref():
        return f"@{attr.ref_attr_name}"
    kind, value = attr.type, attr.value
    if kind == ir.AttributeType.TENSOR:
        return f"tensor {_dtype(value.dtype)}{list(value.shape)}"
    if kind == ir.AttributeType.GRAPH:
        return f"graph ({len(value)} nodes)"
    if kind == ir.AttributeType.GRAPHS:
        return f"{len(value)} graphs"
    if kind in (ir.AttributeType.INTS, ir.AttributeType.FLOATS, ir.AttributeType.STRINGS):
        items = [_scalar_text(v) for v in value[:_LIST_ITEMS]]
        return f"[{', '.join(items)}{', …' if len(value) > _LIST_ITEMS else ''}]"
    if kind in (ir.AttributeType.INT, ir.AttributeType.FLOAT, ir.AttributeType.STRING):
        return _scalar_text(value)
    return kind.name.lower()  # type protos, sparse tensors


def _scalar_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value)
