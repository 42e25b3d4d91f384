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

A node is ``plumbing`` when what it computes depends on no graph input's values: constants, initializers, shapes,
and ops over only those (the view folds them away by default). A node at the line of a located FXE0020 result
(a dimension the export specialized) has that result in its ``marks``. Another producer's model (no module
functions) is grouped by the module scopes it recorded: torch.onnx's ``pkg.torch.onnx.name_scopes`` metadata,
else the ``/``-separated scopes of its node names (``/encoder/layer.0/MatMul``); without either it is flat.

The model is read without its external data and no tensor data goes into the JSON (an initializer's size in
``bytes`` is from its type); `tensor_json` reads the first values of one tensor, and only those bytes. Needs onnx_ir
(imported by the caller off the event loop: it takes most of a second).
"""

from __future__ import annotations

import ast
import functools
import json
import math
import os
import re
import sysconfig
from typing import Any

import numpy as np
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
_MARK_RULES = ("FXE0020",)  # located results whose line's nodes are marked (a dimension specialized)
_STATIC_OPS = ("Constant", "Shape", "Size")  # outputs known without any graph input's values
_TORCH_SCOPES = "pkg.torch.onnx.name_scopes"  # torch.onnx's node metadata: each level's module path, then the op
_TORCH_CLASSES = "pkg.torch.onnx.class_hierarchy"  # each level's class, then the op's target
_TENSOR_VALUES = 16  # the values `tensor_json` reads
_DTYPES = {"FLOAT": "float32", "DOUBLE": "float64"}  # the others' ONNX names read well in lower case
_LIST_ITEMS = 16  # longer attribute lists are cut


def graph_json(onnx_path: str, log: SarifLog | None) -> dict[str, Any]:
    """The model at `onnx_path` (without its external data) as a graph, with the checks of its export's
    SARIF log `log` if there is one. Raises OSError or ValueError for a missing or unreadable model."""
    model = load(onnx_path)
    return {"path": onnx_path, **model_graph(model, node_checks(log) if log else {}, line_marks(log) if log else {})}


def load(onnx_path: str) -> ir.Model:
    """The model at `onnx_path`, its external data not read (onnx_ir reads a tensor's bytes when asked for them)."""
    if not os.path.isfile(onnx_path):
        raise FileNotFoundError(f"{onnx_path} does not exist (deleted since the export?)")
    try:
        return ir.load(onnx_path)
    except Exception as e:  # protobuf's DecodeError and friends
        raise ValueError(f"{onnx_path} is not a readable ONNX model ({type(e).__name__}: {e})") from None


Marks = dict[tuple[str, int], list[dict[str, Any]]]  # located results by (path, 1-based line)


def model_graph(model: ir.Model, checks: dict[str, list[dict[str, Any]]], marks: Marks | None = None) -> dict[str, Any]:
    """`model` inlined as a graph; `checks` are each FX node's numbers (`node_checks`), `marks` each source line's
    results (`line_marks`)."""
    return _Builder(model, checks, marks or {}).build()


def line_marks(log: SarifLog) -> Marks:
    """The located results of `_MARK_RULES` (levels error and warning) by (path, 1-based line)."""
    marks: Marks = {}
    for result in log.results:
        if result.rule_id in _MARK_RULES and result.level in ("error", "warning") and result.location is not None:
            mark = {"rule": result.rule_id, "level": result.level, "message": result.message.splitlines()[0]}
            marks.setdefault((result.location.path, result.location.line + 1), []).append(mark)
    return marks


def tensor_json(onnx_path: str, name: str, count: int = _TENSOR_VALUES) -> dict[str, Any]:
    """Initializer `name` of the model at `onnx_path`: its type and size, where its bytes are, and its first `count`
    values, read from its external data file (only those bytes: `read`) or from the model."""
    model = load(onnx_path)
    value = model.graph.initializers.get(name)
    if value is None or value.const_value is None:
        raise KeyError(f"{os.path.basename(onnx_path)} has no initializer {name!r}")
    tensor, dtype = value.const_value, value.const_value.dtype
    info = {**_value_info(value), "bytes": _nbytes(value), "external": None, "values": [], "read": 0}
    itemsize = dtype.itemsize
    if isinstance(tensor, ir.ExternalTensor):
        info["external"] = {"location": tensor.location, "offset": tensor.offset or 0, "length": tensor.length}
        if itemsize != int(itemsize) or dtype.numpy() is None:
            return info  # sub-byte types: their bytes are not values one by one
        wanted = min(count, math.prod(tensor.shape.numpy())) * int(itemsize)
        with open(os.path.join(tensor.base_dir, tensor.location), "rb") as f:
            f.seek(tensor.offset or 0)
            data = f.read(wanted)
        info["read"] = len(data)
        values = np.frombuffer(data, dtype=dtype.numpy())
    else:
        values = tensor.numpy().reshape(-1)[:count]
    info["values"] = [_scalar_text(v.item()) for v in values]
    return info


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
    def __init__(self, model: ir.Model, checks: dict[str, list[dict[str, Any]]], marks: Marks) -> None:
        self.model = model
        self.checks = checks
        self.marks = marks
        self.static: set[str] = set()  # value ids computed from no graph input's values
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
                self.static.add(env[value])
        self._walk(graph, env, "", None)
        scopes = [node.pop("scopes") for node in self.nodes]
        if not self.groups:
            self._scope_groups(scopes)
        outputs = []
        for value in graph.outputs:
            vid = env[value]
            if vid in self.producers:
                self.edges.append(
                    {"from": self.producers[vid], "to": f"output:{value.name}", "value": value.name or ""}
                )
            outputs.append(_value_info(value))
        for group in self.groups:
            group["class"] = self.classes.get(group["module"])
        return {
            "opset": self.model.opset_imports.get("", None),
            "producer": self.model.producer_name,
            "inputs": [_value_info(v) for v in graph.inputs],
            "outputs": outputs,
            "initializers": [
                {**_value_info(v), "bytes": _nbytes(v), "external": isinstance(v.const_value, ir.ExternalTensor)}
                for v in graph.initializers.values()
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

    def _call(
        self,
        node: ir.Node,
        node_id: str,
        function: ir.Function,
        inputs: list[str | None],
        env: dict[ir.Value, str],
        group: str | None,
    ) -> None:
        """Expand a function call: a module's call is a group of its own, other functions join `group`."""
        if node.domain == DOMAIN_MODULES:
            source, _ = _source(node)
            module = node.metadata_props.get(METADATA_MODULE_PATH, "")
            self.groups.append(
                {"id": node_id, "parent": group, "function": function.name, "module": module, "source": source}
            )
            self.group_modules[node_id] = module
            group = node_id
        inner = {formal: actual for formal, actual in zip(function.inputs, inputs) if actual is not None}
        self._walk(function.graph, inner, f"{node_id}/", group)
        for output, formal in zip(node.outputs, function.outputs):
            env[output] = inner[formal]

    def _add_node(
        self, node: ir.Node, node_id: str, inputs: list[str | None], outputs: list[str], group: str | None
    ) -> None:
        for vid in inputs:
            if vid in self.producers:  # a node's output or a graph input (initializers have no producer)
                self.edges.append({"from": self.producers[vid], "to": node_id, "value": self.values[vid]["name"]})
        modules = _module_stack(node)
        for path, cls in modules:
            self.classes.setdefault(path, cls)
        fx_node = node.metadata_props.get(METADATA_FX_NODE, "").split(": ", 1)[0] or None
        source, stack = _source(node)
        present = [vid for vid in inputs if vid is not None]
        plumbing = node.op_type in _STATIC_OPS or (bool(present) and all(vid in self.static for vid in present))
        if plumbing:
            self.static.update(outputs)
        self.nodes.append(
            {
                "id": node_id,
                "op": node.op_type,
                "domain": node.domain,
                "name": node.name or "",
                "group": group,
                "module": modules[-1][0]
                if modules
                else self.group_modules[group],  # nodes the optimizer made have no stack
                "inputs": [self.values.get(vid, {"name": vid}) if vid is not None else None for vid in inputs],
                "outputs": [self.values[vid] for vid in outputs],
                "attributes": {name: _attribute_text(attr) for name, attr in node.attributes.items()},
                "fxNode": fx_node,
                "source": source,
                "stack": stack,
                "checks": self.checks.get(fx_node, []) if fx_node else [],
                "marks": self.marks.get((source["path"], source["line"]), []) if source else [],
                "plumbing": plumbing,
                "scopes": _scopes(node),
            }
        )

    def _scope_groups(self, node_scopes: list[list[tuple[str, str | None]]]) -> None:
        """Groups from the module scopes another producer recorded (`_scopes`, of each node), one per distinct path."""
        ids: dict[tuple[str, ...], str] = {}
        for node, scopes in zip(self.nodes, node_scopes):
            for depth, (module, cls) in enumerate(scopes, 1):
                path = tuple(m for m, _ in scopes[:depth])
                if path not in ids:
                    ids[path] = f"scope:{'/'.join(path)}"
                    group = {"id": ids[path], "parent": ids.get(path[:-1]), "function": module, "module": module}
                    self.groups.append({**group, "source": None})
                    self.classes.setdefault(module, cls)
            if scopes:
                node["group"], node["module"] = ids[tuple(m for m, _ in scopes)], scopes[-1][0]


def _scopes(node: ir.Node) -> list[tuple[str, str | None]]:
    """The module scopes another producer recorded for `node`, outermost first (the root module left out): each
    (module path, class name or None)."""
    raw = node.metadata_props.get(_TORCH_SCOPES)  # "['', 'layers', 'layers.0', 'linear']": the last is the op's
    if raw:
        try:
            names = ast.literal_eval(raw)
            classes = ast.literal_eval(node.metadata_props.get(_TORCH_CLASSES, "[]"))
        except (ValueError, SyntaxError):
            return []
        classes = [c.rsplit(".", 1)[-1] for c in classes] if len(classes) == len(names) else [None] * len(names)
        return [(name, cls) for name, cls in zip(names[1:-1], classes[1:-1]) if name]
    name = node.name or ""  # torch.onnx's older exporter: "/layers/layers.0/Gemm"
    return [(part, None) for part in name.split("/")[1:-1] if part] if name.startswith("/") else []


def _nbytes(value: ir.Value) -> int | None:
    """The size of an initializer's data, from its type and shape (nothing read)."""
    if value.dtype is None or value.shape is None or not all(isinstance(d, int) for d in value.shape):
        return None
    return math.ceil(math.prod(value.shape) * value.dtype.itemsize)


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
