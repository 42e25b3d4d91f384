"""A KV cache that onnxruntime-genai can share between past and present (``past_present_share_buffer``).

Sharing, onnxruntime-genai allocates each layer's cache once at the context length and binds the same
buffer as the layer's past input and present output: GroupQueryAttention writes the new keys and values
in place (``seqlens_k`` says how many are valid) instead of copying the whole cache every token. The past
inputs then have the buffer's length, not the past's, so the graph may read nothing else from them:

- `past_length_from_mask` reads the past length as the mask's length less the new tokens' (the inputs'
  contract: the mask covers the past and the new tokens) where the graph took it from a past input's shape;
- `shares_cache` says whether every past input then goes to GroupQueryAttention alone (its batch size
  may still be read) and every present comes from it.
"""

from __future__ import annotations

import onnx_ir as ir

_PAST_PREFIX = "past_key_values."
_SEQUENCE_AXIS = 2  # of a (batch, heads, sequence, size) cache


def past_length_from_mask(graph: ir.Graph) -> int:
    """Replace each ``Shape(past, start=2, end=3)`` in `graph` by ``Shape(attention_mask)[1] -
    Shape(input_ids)[1]``; how many."""
    inputs = {value.name: value for value in graph.inputs}
    if "attention_mask" not in inputs or "input_ids" not in inputs:
        return 0
    replaced = 0
    for node in list(graph):
        if (
            node.op_type != "Shape"
            or not _is_past(node.inputs[0])
            or _axes(node) != range(_SEQUENCE_AXIS, _SEQUENCE_AXIS + 1)
        ):
            continue
        total = ir.node("Shape", [inputs["attention_mask"]], {"start": 1, "end": 2})
        new = ir.node("Shape", [inputs["input_ids"]], {"start": 1, "end": 2})
        past = ir.node("Sub", [total.outputs[0], new.outputs[0]])
        graph.insert_before(node, [total, new, past])
        ir.convenience.replace_all_uses_with(node.outputs[0], past.outputs[0])
        graph.remove(node, safe=True)
        replaced += 1
    return replaced


def shares_cache(graph: ir.Graph) -> bool:
    """Whether onnxruntime-genai can bind each layer's past and present to one buffer (see the module)."""
    pasts = [value for value in graph.inputs if _is_past(value)]
    presents = [value for value in graph.outputs if value.name.startswith("present.")]
    if not pasts or len(pasts) != len(presents):
        return False
    for past in pasts:
        for node, index in past.uses():
            attention = node.op_type == "GroupQueryAttention" and index in (3, 4)
            if not attention and not (node.op_type == "Shape" and _SEQUENCE_AXIS not in _axes(node)):
                return False
    return all(
        (producer := present.producer()) is not None and producer.op_type == "GroupQueryAttention"
        for present in presents
    )


def _is_past(value: ir.Value | None) -> bool:
    return value is not None and value.is_graph_input() and value.name.startswith(_PAST_PREFIX)


def _axes(shape: ir.Node) -> range:
    """The axes of a 4-D cache a ``Shape`` node reads."""
    rank = 4
    start = shape.attributes.get_int("start", 0)
    end = shape.attributes.get_int("end", rank)
    return range(*slice(start, end).indices(rank))
