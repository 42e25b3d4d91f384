"""Rotations made before the heads move, redone after it, so that rotary and attention fuse.

GPT-J and CodeGen rotate q and k on ``(batch, sequence, heads, size)`` and only then move the heads
(``Transpose(perm=[0, 2, 1, 3])``); the rotary and attention fusions match a rotation on ``(batch, heads,
sequence, size)``. A rotation slices, concatenates, stacks and multiplies along the last axis only, so it
commutes with that transpose (of axes 1 and 2): `move_heads_first` transposes each value the rotation
reads (the heads, and the cos and sin tables) and repeats the rotation's nodes on them, in place of the transpose of
its result. Anything else on the way (an op across axes, a tensor broadcast from another rank) leaves the
graph as it is.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import _ir_utils

from exporter.generation.graph_constants import int64_initializer, ints

_PERM = (0, 2, 1, 3)
_ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Neg"}
_PARAMETERS = {"Slice": range(1, 5), "Unsqueeze": range(1, 2), "Reshape": range(1, 2)}  # constant inputs
_MAX_NODES = 100  # the most nodes a rotation takes (GPT-J's: 20 for q or k)


def move_heads_first(graph: ir.Graph) -> int:
    """Rewrite each transpose of a rotation's result in `graph` (in place); how many."""
    moved, repeated = 0, {}  # a value (of a rotation, or one it reads) -> its transposed repetition
    for transpose in [n for n in graph if n.op_type == "Transpose" and n.domain == ""]:
        if tuple(transpose.attributes.get_ints("perm", ())) != _PERM or transpose.outputs[0].is_graph_output():
            continue
        rotation = _rotation(transpose.inputs[0])
        if rotation is None:
            continue
        nodes, sources = rotation
        moved_value = _repeat_transposed(graph, transpose, nodes, sources, repeated)
        ir.convenience.replace_all_uses_with(transpose.outputs[0], moved_value)
        moved += 1
    return moved


def _rotation(value: ir.Value) -> tuple[list[ir.Node], list[ir.Value]] | None:
    """The nodes computing `value` along its last axis, inputs before their readers, and the values (4-D
    or more) they read from elsewhere; None if `value` is not computed so or no ``Neg`` (a rotation) is among them."""
    nodes: list[ir.Node] = []
    sources: list[ir.Value] = []
    seen: set[ir.Node] = set()

    def visit(v: ir.Value) -> bool:
        node = v.producer()
        if node is None or not _along_last_axis(node):
            if v.const_value is not None and len(v.shape or ()) <= 1:  # broadcast along the last axis
                return True
            if v.shape is None or len(v.shape) < 4:
                return False
            if v not in sources:
                sources.append(v)
            return True
        if node not in seen:
            if len(seen) == _MAX_NODES:  # not a rotation: a longer computation
                return False
            seen.add(node)
            parameters = _PARAMETERS.get(node.op_type, ())
            if not all(inp is None or i in parameters or visit(inp) for i, inp in enumerate(node.inputs)):
                return False
            nodes.append(node)
        return True

    if not visit(value) or not any(node.op_type == "Neg" for node in nodes):
        return None
    return nodes, sources


def _along_last_axis(node: ir.Node) -> bool:
    """Whether `node` computes along the last axis only, each other axis kept in its place."""
    rank = len(node.outputs[0].shape) if node.outputs[0].shape is not None else 0
    if node.domain != "" or rank < 4:  # the heads' axes, and the last
        return False
    if node.op_type in _ELEMENTWISE:  # operands of another rank broadcast across other axes
        return all(len(v.shape or ()) in (rank, 0, 1) if v.const_value is not None else len(v.shape or ()) == rank
                   for v in node.inputs)  # fmt: skip
    if node.op_type == "Concat":
        return node.attributes.get_int("axis", 0) in (-1, rank - 1)
    if node.op_type == "Slice":
        axes = ints(node.inputs[3]) if len(node.inputs) > 3 else None
        return axes is not None and all(a in (-1, rank - 1) for a in axes) and _all_constant(node.inputs[1:])
    if node.op_type == "Unsqueeze":  # a new last axis
        return ints(node.inputs[1]) in ([-1], [rank - 1])
    if node.op_type == "Reshape":  # the last two axes merged: (…, a, b) → (…, a·b)
        before, after = node.inputs[0].shape, node.outputs[0].shape
        return (
            before is not None
            and len(before) == rank + 1 >= 5
            and list(before[:-2]) == list(after[:-1])
            and all(isinstance(d, int) or d.value is not None for d in after[:-1])
            and isinstance(after[-1], int)
        )
    return False


def _repeat_transposed(
    graph: ir.Graph, transpose: ir.Node, nodes: list[ir.Node], sources: list[ir.Value], new: dict[ir.Value, ir.Value]
) -> ir.Value:
    """`nodes` repeated on the `sources` transposed, before `transpose`, except those `new` already holds
    (a cos table the key's rotation shares with the query's); the value in place of its result."""
    created: list[ir.Node] = []
    for source in sources:
        if source in new:
            continue
        perm = [*_PERM, *range(4, len(source.shape))]
        node = ir.node("Transpose", [source], {"perm": perm}, name=f"{source.name}_heads_first")
        new[source] = _typed(node.outputs[0], source)
        created.append(node)
    for node in nodes:
        if node.outputs[0] in new:
            continue
        inputs = [new.get(v, v) if v is not None else None for v in node.inputs]
        if node.op_type == "Reshape":
            merged = [0] * (len(node.outputs[0].shape) - 1) + [node.outputs[0].shape[-1]]
            inputs[1] = int64_initializer(graph, f"{node.name}_heads_first_shape", merged)
        attributes = {name: attr.value for name, attr in node.attributes.items()}
        if node.op_type == "Reshape":
            attributes.pop("allowzero", None)  # 0 copies the dimension: the merged shape says so
        repeated = ir.node(node.op_type, inputs, attributes, name=f"{node.name}_heads_first")
        new[node.outputs[0]] = _typed(repeated.outputs[0], node.outputs[0])
        created.append(repeated)
    graph.insert_before(transpose, created)
    return new[transpose.inputs[0]]


def _typed(value: ir.Value, like: ir.Value) -> ir.Value:
    """`value` given `like`'s type and shape with axes 1 and 2 swapped."""
    dims = list(like.shape)
    dims[1], dims[2] = dims[2], dims[1]
    value.shape, value.dtype = ir.Shape(dims), like.dtype
    return value


def _all_constant(values) -> bool:
    return all(v is None or _ir_utils.get_numpy_value(v) is not None for v in values)
