"""Interleaved rotary embeddings (GPT-J's ``rotate_every_two``: pairs of adjacent channels rotated, as
in Helium, GLM, Cohere, ERNIE 4.5) → onnxruntime's ``RotaryEmbedding`` with ``interleaved=1``.

The rotation is ``x * cos + rotate_every_two(x) * sin``, where ``rotate_every_two(x)`` stacks
``(-x[..., 1::2], x[..., 0::2])`` on a new last axis and flattens it back. Each model computes its
``cos`` and ``sin`` in its own way (a constant table gathered by position, inverse frequencies times
positions, then each value repeated for its pair), so they are not matched but evaluated: the
subgraph from the graph's ``position_ids`` to them runs in onnxruntime for every position up to the
context length, which must give a table whose pairs of channels are equal; its even channels are the
kernel's cos/sin caches. A rotation of the first channels of each head only (GLM's, GPT-J's) is
the kernel's ``rotary_embedding_dim``.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnxscript.rewriter import _ir_utils, pattern
from onnxscript.rewriter.ort_fusions.rotary_embedding import PartialRotaryEmbeddingFusion

_MAX_NODES = 200  # the most nodes a cos/sin table is computed by


class InterleavedRotary(pattern.RewriteRuleClassBase):
    """``x * cos + rotate_every_two(x) * sin`` on (batch, heads, sequence, size) → ``com.microsoft.
    RotaryEmbedding(interleaved=1)`` with caches of `positions` rows."""

    def __init__(self, positions: int) -> None:
        super().__init__(name="InterleavedRotary", remove_nodes=False)  # the pairs' shape is read for the Reshape
        self._positions = positions
        self._tables: dict[tuple[ir.Value, ir.Value], tuple[np.ndarray, np.ndarray] | None] = {}  # cos, sin
        self._caches: dict[tuple[ir.Value, ir.Value], tuple[ir.Value, ir.Value]] = {}  # their initializers

    def pattern(self, op, x, cos, sin, even_start, odd_start, ends, axes, steps, shape):
        even = op.Slice(x, even_start, ends, axes, steps)
        odd = op.Slice(x, odd_start, ends, axes, steps)
        last = pattern.ANY_VALUE
        pairs = op.Concat(op.Unsqueeze(op.Neg(odd), last), op.Unsqueeze(even, last), axis=-1)
        return op.Add(op.Mul(x, cos), op.Mul(op.Reshape(pairs, shape, _allow_other_attributes=True), sin))

    def check(self, context, x, cos, sin, even_start, odd_start, ends, axes, steps, **_) -> pattern.MatchResult:
        result = pattern.MatchResult()
        if x.shape is None or len(x.shape) != 4 or not all(isinstance(d, int) for d in (x.shape[1], x.shape[3])):
            return result.fail("not (batch, heads, sequence, size) with known heads and size", x)
        if not (
            _ir_utils.is_singleton_value(even_start, 0)
            and _ir_utils.is_singleton_value(odd_start, 1)
            and _ir_utils.is_singleton_value(steps, 2)
            and _ir_utils.is_singleton_value(axes, lambda a: a in (-1, 3))
            and _ir_utils.is_singleton_value(ends, lambda e: e >= x.shape[3])
        ):
            return result.fail("not the even and odd channels of each head", x)
        if (cos, sin) not in self._tables:
            tables = [_table(context.graph_or_function, v, self._positions, x.shape[3]) for v in (cos, sin)]
            pairs = all(t is not None and np.array_equal(t[:, 0::2], t[:, 1::2]) for t in tables)
            self._tables[(cos, sin)] = tuple(np.ascontiguousarray(t[:, 0::2]) for t in tables) if pairs else None
        if self._tables[(cos, sin)] is None:
            return result.fail("cos and sin are not interleaved tables of the positions", cos)
        return result

    def rewrite(self, op, x, cos, sin, **_):
        if (cos, sin) not in self._caches:
            names = (f"interleaved_{n}_cache_{len(self._caches)}" for n in ("cos", "sin"))
            self._caches[(cos, sin)] = tuple(
                op.initializer(ir.tensor(t, name=name)) for t, name in zip(self._tables[(cos, sin)], names)
            )
        cos_cache, sin_cache = self._caches[(cos, sin)]
        return op.RotaryEmbedding(
            x, _positions_input(x.graph), cos_cache, sin_cache, interleaved=1, num_heads=x.shape[1],
            _domain="com.microsoft",
        )  # fmt: skip


class PartialInterleavedRotary(PartialRotaryEmbeddingFusion):
    """onnxscript's partial rotation (``Concat(RotaryEmbedding(x[..., :d]), x[..., d:])`` → the kernel's
    ``rotary_embedding_dim``), for the interleaved kernel, which onnxscript's leaves alone."""

    def check(self, op, x, end1, start2, x_part_1_rope, **_) -> pattern.MatchResult:
        result = pattern.MatchResult()
        attributes = x_part_1_rope.producer().attributes
        if attributes.get_int("interleaved", 0) != 1 or "rotary_embedding_dim" in attributes:
            return result.fail("not a whole interleaved rotation", x_part_1_rope)
        end, start = _ir_utils.get_singleton_value(end1), _ir_utils.get_singleton_value(start2)
        if not isinstance(end, int) or end != start:
            return result.fail("the rotated and the kept channels do not meet", x)
        return result


def _positions_input(graph: ir.Graph | None) -> ir.Value | None:
    return next((v for v in graph.inputs if v.name == "position_ids"), None) if graph is not None else None


def _table(graph: ir.Graph, value: ir.Value, rows: int, size: int) -> np.ndarray | None:
    """`value` (computed from the graph's ``position_ids`` and constants alone) for positions ``0 … rows-1``
    of one sequence, as a (rows, size) float table, evaluated in onnxruntime; None where it is not that."""
    positions = _positions_input(graph)
    if positions is None:
        return None
    nodes: list[ir.Node] = []  # producers, inputs before their users
    constants: dict[str, ir.Value] = {}
    visiting: set[ir.Node] = set()

    def visit(v: ir.Value) -> bool:
        if v is positions:
            return True
        if v.const_value is not None and v.producer() is None:
            constants[v.name] = v
            return True
        node = v.producer()
        if node is None:  # another graph input: not a table of positions
            return False
        if node in visiting:
            return True
        if len(visiting) == _MAX_NODES:  # not a table of positions (those take a few dozen nodes)
            return False
        visiting.add(node)
        if not all(i is None or visit(i) for i in node.inputs):
            return False
        nodes.append(node)
        return True

    if value.dtype != ir.DataType.FLOAT or not visit(value):
        return None
    import onnxruntime as ort

    proto = onnx.helper.make_model(
        onnx.helper.make_graph(
            [ir.serde.serialize_node(n) for n in nodes],
            "table",
            [onnx.helper.make_tensor_value_info(positions.name, onnx.TensorProto.INT64, [1, rows])],
            [onnx.helper.make_tensor_value_info(value.name, onnx.TensorProto.FLOAT, None)],
            [ir.serde.serialize_tensor(v.const_value) for v in constants.values()],
        ),
        opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in graph.opset_imports.items()],
    )
    for tensor, name in zip(proto.graph.initializer, constants):
        tensor.name = name
    try:
        session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        (table,) = session.run(None, {positions.name: np.arange(rows, dtype=np.int64)[None]})
    except Exception:  # noqa: BLE001 - not computable alone: no fusion
        return None
    return table.reshape(rows, size) if table.size == rows * size else None
