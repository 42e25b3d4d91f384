"""Packed multi-query projections split before their heads are formed, so that attention fuses.

Falcon, GPT-BigCode and CodeGen compute q, k and v with one linear layer and split them after shaping
heads: Falcon reshapes it to ``(batch, sequence, heads + 2, size)`` and splits the heads axis; GPT-BigCode
adds a heads axis of 1 (``Unsqueeze``) and splits the last one; CodeGen reshapes it to ``(batch, sequence,
groups, 3 x size)`` and splits the last one, each group holding its part of q, v and k; Persimmon reshapes
it to ``(batch, sequence, heads, 3, size)`` and takes each part with a ``Gather``.
`split_packed_heads` splits the 3-D projection instead, each part shaped into heads as a separate
projection would be (``Transpose(Reshape(part, [0, 0, heads, size]))``), the form
`fusions._GroupQueryAttention` matches. The values are the same: the parts are contiguous channels of
each position (Falcon's, GPT-BigCode's), or are made so by reordering the projection's weight columns
and bias (CodeGen's, group by group; Persimmon's, head by head).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from exporter.generation.graph_constants import initializer, int64_initializer, ints


def split_packed_heads(graph: ir.Graph) -> None:
    """Rewrite each packed split of `graph` (in place)."""
    for node in [n for n in graph if n.op_type == "Reshape" and n.domain == ""]:
        _split_gathered(graph, node)
    for node in [n for n in graph if n.op_type == "Split" and n.domain == ""]:
        parts = _parts(node)
        if parts is None:
            continue
        projection, widths, heads, transposed, columns = parts
        producer = node.inputs[0].producer()
        if columns is not None:  # the parts' channels gathered: a projection by reordered weight columns
            _reorder(graph, _reorderable(projection), columns, f"{node.name}_projection")
        _split_into_heads(graph, projection, node.outputs, widths, heads, transposed, node, node.name)
        graph.remove(node, safe=True)
        graph.remove(producer, safe=True)


def _split_into_heads(
    graph: ir.Graph,
    projection: ir.Value,
    olds: list[ir.Value],
    widths: list[int],
    heads: list[int],
    transposed: bool,
    before: ir.Node,
    name: str,
) -> None:
    """Split the 3-D `projection` (before the node `before`) into parts of `widths` channels, each shaped
    into its count of `heads` in place of the old part of `olds` (`_reshape_readers`)."""
    split = ir.node(
        "Split",
        [projection, int64_initializer(graph, f"{name}_widths", widths)],
        {"axis": 2},
        num_outputs=len(widths),
        name=f"{name}_projection",
    )
    graph.insert_before(before, split)
    for i, (old, new, width, n) in enumerate(zip(olds, split.outputs, widths, heads)):
        new.shape, new.dtype = ir.Shape([*projection.shape[:2], width]), projection.dtype
        _reshape_readers(graph, old, new, [0, 0, n, width // n], transposed, f"{name}_part{i}")


def _split_gathered(graph: ir.Graph, reshape: ir.Node) -> None:
    """A projection shaped ``(batch, sequence, heads, parts, size)`` whose parts are each taken by a
    ``Gather`` on axis 3 (Persimmon's q, k and v packed per head): the projection's channels reordered
    part by part, split, and each part shaped into heads in place of its ``Gather``."""
    packed, projection = reshape.outputs[0], reshape.inputs[0]
    dims, rows = packed.shape, projection.shape
    if dims is None or len(dims) != 5 or not all(isinstance(d, int) for d in dims[2:]):
        return
    heads, parts, size = dims[2], dims[3], dims[4]
    if rows is None or len(rows) != 3 or rows[2] != heads * parts * size or list(rows[:2]) != list(dims[:2]):
        return
    gathers = {}
    for reader, index in packed.uses():
        part = ints(reader.inputs[1]) if reader.op_type == "Gather" and index == 0 else None
        if part is None or len(part) != 1 or reader.inputs[1].shape.rank() != 0:
            return
        if reader.attributes.get_int("axis", 0) % 5 != 3 or part[0] % parts in gathers:
            return
        gathers[part[0] % parts] = reader
    constants = _reorderable(projection)
    if sorted(gathers) != list(range(parts)) or constants is None:
        return
    channels = np.arange(heads * parts * size).reshape(heads, parts, size)
    _reorder(graph, constants, channels.transpose(1, 0, 2).reshape(-1), f"{reshape.name}_projection")
    ordered = [gathers[part].outputs[0] for part in range(parts)]
    _split_into_heads(graph, projection, ordered, [heads * size] * parts, [heads] * parts, False, reshape, reshape.name)
    for part in range(parts):
        graph.remove(gathers[part], safe=True)
    graph.remove(reshape, safe=True)


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
        and _reorderable(projection) is not None
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


def _reorderable(projection: ir.Value) -> list[tuple[ir.Node, int]] | None:
    """The constants whose last axis orders `projection`'s channels, as (node, input index): the weight
    of ``MatMul(x, W)`` and the bias of an ``Add`` after it; None if the projection is not that, or is
    read elsewhere (its channels cannot be reordered). A constant another node reads too (equal
    constants are merged) is replaced in these nodes only."""
    node, constants = projection.producer(), []
    if node is not None and node.op_type == "Add" and node.domain == "":
        biases = [i for i, v in enumerate(node.inputs) if v.const_value is not None and len(v.shape or ()) == 1]
        if len(biases) != 1 or len(node.inputs[1 - biases[0]].uses()) != 1:
            return None
        constants.append((node, biases[0]))
        node = node.inputs[1 - biases[0]].producer()
    if node is None or node.op_type != "MatMul" or node.domain != "" or len(projection.uses()) != 1:
        return None
    constants.append((node, 1))
    weight = node.inputs[1]
    if weight.const_value is None or len(weight.shape or ()) != 2:
        return None
    return constants


def _reorder(graph: ir.Graph, constants: list[tuple[ir.Node, int]], columns: np.ndarray, name: str) -> None:
    """Reorder the last axis of each of `constants` (`_reorderable`'s) as `columns` (read when written)."""
    for node, index in constants:
        tensor = node.inputs[index].const_value

        def read(tensor: ir.TensorProtocol = tensor) -> ir.Tensor:
            return ir.tensor(np.ascontiguousarray(tensor.numpy()[..., columns]))

        lazy = ir.LazyTensor(read, dtype=tensor.dtype, shape=tensor.shape, name=f"{name}_{node.op_type.lower()}")
        node.replace_input_with(index, initializer(graph, lazy))


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
