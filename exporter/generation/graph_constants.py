"""The constants the generation graph rewrites read and add (axes, shapes, split sizes, weights)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import _ir_utils


def ints(value: ir.Value | None) -> list[int] | None:
    """The integers of a constant `value`, flattened; None if it is not a constant."""
    array = _ir_utils.get_numpy_value(value) if value is not None else None
    return [int(v) for v in array.reshape(-1)] if array is not None else None


def initializer(graph: ir.Graph, tensor: ir.TensorProtocol) -> ir.Value:
    """`tensor` as a new initializer of `graph`, under the tensor's name."""
    value = ir.val(tensor.name, const_value=tensor)
    graph.register_initializer(value)
    return value


def int64_initializer(graph: ir.Graph, name: str, values: list[int]) -> ir.Value:
    """A new 1-D int64 initializer of `graph` holding `values`."""
    return initializer(graph, ir.tensor(np.array(values, dtype=np.int64), name=name))
