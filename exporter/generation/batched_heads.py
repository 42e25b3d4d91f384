"""Attention on batched heads, ``(batch·heads, sequence, size)``, rewritten on ``(batch, heads, sequence, size)``.

BLOOM and XGLM merge the batch and head axes of q, k and v for their products (``bmm``, ``baddbmm``) and
split them again around the mask and the softmax; the attention fusion matches the 4-D form. A reshape
that keeps the last two axes of a 4-D tensor merges its first two (row-major order), and one that gives
a 3-D tensor's first axis back as q's ``(batch, heads)`` splits it the same way: the products of the
merged tensors are then the batched MatMuls of the 4-D ones, and the softmax over the last axis is the
same on either. `BatchedHeads` checks those shapes and takes the products on the 4-D heads:

- BLOOM: ``baddbmm(alibi, q, kᵀ, alpha=scale)`` then the mask: the scores are scaled and ALiBi's
  ``(batch·heads, 1, total)`` bias, split into ``(batch, heads, 1, total)``, is added to the mask;
- XGLM (q scaled by its projection): the masked scores clamped at a large negative constant
  (``max(scores + mask, min)``), which changes no probability: the clamp is dropped.
"""

from __future__ import annotations

import onnx_ir as ir
import sympy
from onnxscript.rewriter import _ir_utils, pattern

_MASKED = -1e30  # a clamp at or below this only keeps masked scores finite


class BatchedHeads(pattern.RewriteRuleClassBase):
    """``MatMul(softmax(q·kᵀ …), v)`` on merged heads → the same on 4-D heads (see the module)."""

    def __init__(self, alibi: bool) -> None:
        super().__init__(name=f"BatchedHeads{'Alibi' if alibi else 'Clamped'}")
        self._alibi = alibi

    def pattern(self, op, query, key, value, scale, alibi, mask, fill):
        def reshaped(x, name):  # which axes it merges or splits: `check`
            return op.Reshape(x, pattern.ANY_VALUE, _allow_other_attributes=True, _outputs=[name])

        scores = op.MatMul(reshaped(query, "q3"), op.Transpose(reshaped(key, "k3"), perm=[0, 2, 1]), _outputs=["s3"])
        if self._alibi:  # baddbmm
            scores = reshaped(op.Add(op.Mul(scores, scale), alibi, _outputs=["b3"]), "s4")
            probs = reshaped(op.Softmax(op.Add(scores, mask), axis=-1, _outputs=["p4"]), "p3")
        else:
            scores = op.Max(op.Add(reshaped(scores, "s4"), mask), fill, _outputs=["c4"])
            probs = op.Softmax(reshaped(scores, "c3"), axis=-1, _outputs=["softmax"])
            probs = reshaped(reshaped(probs, "p4"), "p3")
        return reshaped(op.MatMul(probs, reshaped(value, "v3"), _outputs=["o3"]), "o4")

    def check(self, context, query, key, value, mask, alibi=None, fill=None, **values) -> pattern.MatchResult:
        result = pattern.MatchResult()
        values.update(query=query, key=key, value=value)
        heads = [_dims(values[name], 4) for name in ("query", "key", "value")]
        if None in heads or _dims(mask, 4) is None:
            return result.fail("q, k, v and the mask are not 4-D", query)
        batch_and_heads = heads[0][:2]
        if not batch_and_heads[1].is_Integer:
            return result.fail("the number of heads is not static", query)
        if any(not all(_equal(a, b) for a, b in zip(dims[:2], batch_and_heads)) for dims in heads[1:]):
            return result.fail("q, k and v have different (batch, heads)", key)
        merges = [("query", "q3"), ("key", "k3"), ("value", "v3"), ("p4", "p3")]
        splits = [("o3", "o4"), ("b3", "s4")] if self._alibi else [("o3", "o4"), ("s3", "s4"), ("softmax", "p4")]
        if not self._alibi:
            merges.append(("c4", "c3"))
        for source, target in merges:
            if not _merges(values[source], values[target]):
                return result.fail("a reshape does not merge (batch, heads)", values[target])
        for source, target in splits:
            if not _splits(values[source], values[target], batch_and_heads):
                return result.fail("a reshape does not split (batch, heads)", values[target])
        if self._alibi:
            bias, scores = _dims(alibi, 3), _dims(values["s3"], 3)
            if (
                bias is None
                or not _equal(bias[0], scores[0])
                or bias[1] != 1
                or not _ir_utils.is_singleton_value(values["scale"], lambda s: isinstance(s, float))
            ):
                return result.fail("not a scaled product plus a (batch·heads, 1, total) bias", alibi)
        elif not _ir_utils.is_singleton_value(fill, lambda f: f <= _MASKED):
            return result.fail("the scores are not clamped at a large negative constant", fill)
        return result

    def rewrite(self, op, query, key, value, mask, scale=None, alibi=None, **_):
        scores = op.MatMul(query, op.Transpose(key, perm=[0, 1, 3, 2]))
        bias = mask
        if self._alibi:
            scores = op.Mul(scores, scale)
            heads = op.Constant(value_ints=[-1, int(key.shape[1])])  # not a Shape of q or k: the fusion takes them
            heads_alibi = op.Reshape(alibi, op.Concat(heads, op.Shape(alibi, start=1), axis=0))
            bias = op.Add(heads_alibi, mask)
            bias.shape, bias.dtype = ir.Shape([*query.shape[:2], *mask.shape[2:]]), mask.dtype
        probs = op.Softmax(op.Add(scores, bias), axis=-1)
        return op.MatMul(probs, value)


def _dims(value: ir.Value, rank: int) -> tuple[sympy.Expr, ...] | None:
    """`value`'s dimensions as sympy expressions, if it has `rank` known ones."""
    shape = value.shape
    if shape is None or len(shape) != rank:
        return None
    try:
        dims = tuple(sympy.sympify(d if isinstance(d, int) else d.value) for d in shape)
    except (sympy.SympifyError, TypeError, ValueError):
        return None
    return None if any(d is None for d in dims) else dims


def _merges(source: ir.Value, target: ir.Value) -> bool:
    """Whether a reshape of 4-D `source` to 3-D `target` merges the first two axes: the first is their
    product, the last is the same (the middle then too: the sizes are equal)."""
    four, three = _dims(source, 4), _dims(target, 3)
    return four is not None and three is not None and _equal(three[0], four[0] * four[1]) and _equal(three[2], four[3])


def _splits(source: ir.Value, target: ir.Value, heads: tuple[sympy.Expr, ...]) -> bool:
    """Whether a reshape of 3-D `source` to 4-D `target` splits the first axis into `heads`, the last the same."""
    three, four = _dims(source, 3), _dims(target, 4)
    return (
        three is not None
        and four is not None
        and all(_equal(a, b) for a, b in zip(four[:2], heads))
        and _equal(three[0], four[0] * four[1])
        and _equal(three[2], four[3])
    )


def _equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    return sympy.simplify(a - b) == 0
