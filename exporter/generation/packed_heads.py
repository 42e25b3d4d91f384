"""Packed multi-query projections split before their heads are formed, so that attention fuses.

Falcon, GPT-BigCode and CodeGen compute q, k and v with one linear layer and split them after shaping
heads: Falcon reshapes it to ``(batch, sequence, heads + 2, size)`` and splits the heads axis; GPT-BigCode
adds a heads axis of 1 (``Unsqueeze``) and splits the last one; CodeGen reshapes it to ``(batch, sequence,
groups, 3 x size)`` and splits the last one, each group holding its part of q, v and k.
`split_packed_heads` splits the 3-D projection instead, each part shaped into heads as a separate
projection would be (``Transpose(Reshape(part, [0, 0, heads, size]))``), the form
`fusions._GroupQueryAttention` matches. The values are the same: the parts are contiguous channels of
each position (Falcon's, GPT-BigCode's), or are made so by reordering the projection's weight columns
(CodeGen's, group by group).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from exporter.generation.graph_constants import int64_initializer, ints


def split_packed_heads(graph: ir.Graph) -> None:
    """Rewrite each packed split of `graph` (in place)."""
    for node in [n for n in graph if n.op_type == "Split" and n.domain == ""]:
        parts = _parts(node)
        if parts is None:
            continue
        projection, widths, heads, transposed, columns = parts
        producer = node.inputs[0].producer()
        if columns is not None:  # the parts' channels gathered: a projection by reordered weight columns
            projection = _reordered(graph, projection, columns, f"{node.name}_projection")
        split = ir.node(
            "Split",
            [projection, int64_initializer(graph, f"{node.name}_widths", widths)],
            {"axis": 2},
            num_outputs=len(widths),
            name=f"{node.name}_projection",
        )
        graph.insert_before(node, split)
        for i, (old, new, width, n) in enumerate(zip(node.outputs, split.outputs, widths, heads)):
            new.shape, new.dtype = ir.Shape([*projection.shape[:2], width]), projection.dtype
            _reshape_readers(graph, old, new, [0, 0, n, width // n], transposed, f"{node.name}_part{i}")
        graph.remove(node, safe=True)
        graph.remove(producer, safe=True)


def _parts(split: ir.Node) -> tuple[ir.Value, list[int], list[int], bool, np.ndarray | None] | None:
    """(the 3-D projection, the widths of its parts, their head counts, whether the parts were
    ``(batch, heads, sequence, size)``, the order of the projection's channels that makes the parts
    contiguous or None if they are) of a packed split, or None."""
    source = split.inputs[0]
    producer = source.producer() if source is not None else None
    sizes = _sizes(split)
    if producer is None or sizes is None or len(source.uses()) != 1 or producer.domain != "":
        return None
    projection = producer.inputs[0]
    shape = projection.shape if projection is not None else None
    if shape is None or len(shape) != 3 or not isinstance(shape[2], int) or len(source.shape or ()) != 4:
        return None
    axis = split.attributes.get_int("axis", 0) % 4
    if producer.op_type == "Unsqueeze" and ints(producer.inputs[1]) == [1] and axis == 3:  # GPT-BigCode
        return projection, [int(s) for s in sizes], [1] * len(sizes), True, None
    size, same_rows = source.shape[3], list(source.shape[:2]) == list(shape[:2]) and None not in shape[:2]
    if (
        producer.op_type == "Reshape"
        and axis == 2
        and isinstance(size, int)
        and same_rows
        and shape[2] == source.shape[2] * size
    ):
        return projection, [int(s) * size for s in sizes], [int(s) for s in sizes], False, None  # Falcon's
    groups = source.shape[2]
    if (
        producer.op_type == "Reshape"
        and axis == 3
        and isinstance(groups, int)
        and same_rows
        and shape[2] == groups * sum(sizes)
        and _reorderable(projection)
    ):  # CodeGen's: each group holds its channels of every part
        starts = np.cumsum([0, *sizes[:-1]])
        columns = np.concatenate(
            [np.arange(g * shape[2] // groups + start, g * shape[2] // groups + start + width)
             for start, width in zip(starts, sizes) for g in range(groups)]
        )  # fmt: skip
        return projection, [groups * int(s) for s in sizes], [groups] * len(sizes), False, columns
    return None


def _sizes(split: ir.Node) -> list[int] | None:
    """The sizes of a split's parts: its ``split`` input, or its equal ``num_outputs`` parts."""
    if len(split.inputs) > 1:
        sizes = ints(split.inputs[1])
        return sizes if sizes else None
    count, shape = split.attributes.get_int("num_outputs", 0), split.inputs[0].shape
    size = shape[split.attributes.get_int("axis", 0)] if shape is not None else None
    if not count or not isinstance(size, int) or size % count:
        return None
    return [size // count] * count


def _reorderable(projection: ir.Value) -> bool:
    """Whether `projection` is ``MatMul(x, W)`` by a constant W read by it alone (its columns can be reordered)."""
    node = projection.producer()
    if node is None or node.op_type != "MatMul" or node.domain != "" or len(projection.uses()) != 1:
        return False
    weight = node.inputs[1]
    return weight.const_value is not None and len(weight.shape or ()) == 2 and len(weight.uses()) == 1


def _reordered(graph: ir.Graph, projection: ir.Value, columns: np.ndarray, name: str) -> ir.Value:
    """`projection`'s MatMul with its weight columns in the order `columns` (read when written); its result."""
    matmul = projection.producer()
    tensor = matmul.inputs[1].const_value

    def read() -> ir.Tensor:
        return ir.tensor(np.ascontiguousarray(tensor.numpy()[:, columns]))

    weight = ir.val(
        f"{name}_weight", const_value=ir.LazyTensor(read, dtype=tensor.dtype, shape=tensor.shape, name=f"{name}_weight")
    )
    graph.register_initializer(weight)
    matmul.replace_input_with(1, weight)
    return projection


def _reshape_readers(
    graph: ir.Graph, old: ir.Value, part: ir.Value, heads: list[int], transposed: bool, name: str
) -> None:
    """`old` (a part shaped into heads) replaced by the 3-D `part`: a reader that reshapes it whatever
    its shape reads `part`; the others ``Reshape(part, heads)``, transposed to ``(batch, heads,
    sequence, size)`` if `old` was (GPT-BigCode's heads axis of 1)."""
    for reader, index in list(old.uses()):
        if reader.op_type == "Reshape" and reader.domain == "" and index == 0 and _keeps_no_dims(reader):
            reader.replace_input_with(0, part)
    if not old.uses():
        return
    nodes = [ir.node("Reshape", [part, int64_initializer(graph, f"{name}_heads", heads)], name=f"{name}_heads")]
    if transposed:
        nodes.append(ir.node("Transpose", [nodes[0].outputs[0]], {"perm": [0, 2, 1, 3]}, name=f"{name}_transposed"))
    graph.insert_before(_first_reader(graph, old), nodes)
    shaped = nodes[-1].outputs[0]
    shaped.shape, shaped.dtype = old.shape, old.dtype
    ir.convenience.replace_all_uses_with(old, shaped)


def _first_reader(graph: ir.Graph, value: ir.Value) -> ir.Node:
    readers = {node for node, _ in value.uses()}
    return next(node for node in graph if node in readers)


def _keeps_no_dims(reshape: ir.Node) -> bool:
    """Whether `reshape`'s result is the same from the 3-D part as from the part shaped into heads, which
    share their first two dimensions: ``allowzero`` (a 0 is a 0), or a shape whose entries after the first
    two are known and not 0 (a 0 there would copy a dimension the two do not share). The shape may be
    computed: a ``Concat`` of the batch and sequence sizes and constants (CodeGen's)."""
    if reshape.attributes.get_int("allowzero", 0):
        return True
    entries = _shape_entries(reshape.inputs[1])
    return entries is not None and all(e is not None and e != 0 for e in entries[2:])


def _shape_entries(shape: ir.Value) -> list[int | None] | None:
    """The entries of a 1-D shape: a constant's, or a ``Concat``'s of constants and computed parts (None
    for each computed entry); None if its length is not known."""
    constant = ints(shape)
    if constant is not None:
        return constant
    node = shape.producer()
    if node is None or node.op_type != "Concat" or node.domain != "":
        return None
    entries: list[int | None] = []
    for part in node.inputs:
        values = ints(part)
        length = part.shape[0] if part.shape is not None and len(part.shape) == 1 else None
        if values is None and not isinstance(length, int):
            return None
        entries += values if values is not None else [None] * length
    return entries
