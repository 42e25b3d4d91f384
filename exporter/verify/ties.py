"""Indices among equal values: which of several equal elements ``topk``, ``sort``, ``max(dim)`` … return is not
defined by PyTorch (its CPU ``topk`` may put the last of equal values first, onnxruntime's ``TopK`` the first),
so indices that pick other elements of the same values are not a divergence.
"""

from __future__ import annotations

import operator

import torch

aten = torch.ops.aten
INDEXED = {  # the ops whose output 1 indexes their input along `dim`
    aten.topk.default,
    aten.sort.default,
    aten.sort.stable,
    aten.max.dim,
    aten.min.dim,
    aten.kthvalue.default,
    aten.median.dim,
    aten.mode.default,
    aten.cummax.default,
    aten.cummin.default,
}


def indexing_op(node: torch.fx.Node) -> torch.fx.Node | None:
    """The op whose indices `node` is (``getitem(topk(...), 1)`` …), or None."""
    if node.target is not operator.getitem or node.args[1] != 1:
        return None
    parent = node.args[0]
    return parent if isinstance(parent, torch.fx.Node) and parent.target in INDEXED else None


def dim_of(op: torch.fx.Node) -> int:
    """The axis `op` indexes its input along (its ``dim`` argument, or its default)."""
    for index, argument in enumerate(op.target._schema.arguments):
        if argument.name == "dim":
            if argument.kwarg_only or index >= len(op.args):
                return op.kwargs.get("dim", argument.default_value)
            return op.args[index]
    raise ValueError(f"{op.target} has no dim")


def same_values(values: torch.Tensor, dim: int, expected: torch.Tensor, actual: torch.Tensor) -> bool:
    """Whether indices `actual` pick, along `dim` of `values`, the same values as `expected` do (NaN as NaN)."""
    if actual.shape != expected.shape:
        return False
    if expected.dim() == values.dim() - 1:  # the reduced axis is dropped (keepdim=False)
        expected, actual = expected.unsqueeze(dim), actual.unsqueeze(dim)
    try:
        picked = torch.take_along_dim(values, actual.to(torch.int64), dim)
    except (IndexError, RuntimeError):  # out of range: not PyTorch's values
        return False
    wanted = torch.take_along_dim(values, expected.to(torch.int64), dim)
    return bool(((picked == wanted) | (picked.isnan() & wanted.isnan())).all())
