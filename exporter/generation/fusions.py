"""onnxruntime's fused kernels in a generation graph, and which decoder layers did not fuse (FXE0024).

After the exporter's optimizer, RMS normalizations are ``Mul(weight, Div(x, Sqrt(Add(ReduceMean(
Pow(x, 2)), eps))))``: `_RmsNormalization` makes them ``SimplifiedLayerNormalization`` (onnxruntime's,
in the ONNX domain) and onnxscript's skip fusion folds the residual ``Add`` before them into
``SkipSimplifiedLayerNormalization``. onnxscript's rotary fusion finds ``x * cos + rotate_half(x) *
sin``; `_RotaryCache` turns its intermediate op into ``com.microsoft.RotaryEmbedding`` with constant
cos/sin caches up to the context length when cos and sin come from ``position_ids`` times constant
inverse frequencies (transformers' default rotary embedding, folded by the optimizer into a ``Mul``);
`interleaved_rotary` does the same for pairs of adjacent channels (GPT-J's ``rotate_every_two``;
`heads_first` first moves a rotation made before the heads move after it, as GPT-J's is), and
`_SplitHeads` splits a q/k/v projection packed per head (GPT-NeoX's) into Llama's layout, and
`batched_heads` moves attention on merged batch and heads (BLOOM's, XGLM's) to 4-D heads.
`_GroupQueryAttention` makes a layer's attention ``GroupQueryAttention``, which rotates q and k itself
with those caches when they span the head (``do_rotary``, as onnxruntime-genai's model builder does);
`merge_projections` then merges a layer's q/k/v projections into one MatMul and feeds it to
GroupQueryAttention whole (packed). The past's length is read from the mask (`shared_cache`), so that
onnxruntime-genai can keep the cache in one buffer per layer.

Which layers fused is read from what is left: a layer whose nodes still compute ``Pow`` → ``ReduceMean``
(a norm) or ``Neg`` (rotate half) did not fuse that part; ``Softmax`` is attention in standard ops.
"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import (
    CommonSubexpressionEliminationPass,
    InlinePass,
    RemoveUnusedFunctionsPass,
    RemoveUnusedNodesPass,
)
from onnxscript import rewriter
from onnxscript.rewriter import _ir_utils, pattern

from exporter.constants import METADATA_MODULE_STACK, METADATA_STACK
from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.diagnostics.locations import parse_stack_trace
from exporter.generation.batched_heads import BatchedHeads
from exporter.generation.graph_constants import initializer
from exporter.generation.heads_first import move_heads_first
from exporter.generation.interleaved_rotary import InterleavedRotary, PartialInterleavedRotary
from exporter.generation.packed_heads import split_packed_heads
from exporter.generation.shared_cache import past_length_from_mask
from exporter.onnx_passes.optimize import known_dims

_LAYER = re.compile(r"\.\d+$")  # a ModuleList child: a decoder layer
_MASKED = -1e9  # masked scores at or below this weigh exactly 0 after the softmax, wherever the mask puts them
# attention on merged batch and heads (BLOOM's, XGLM's) moved to 4-D heads, before the attention rules
BATCHED_HEADS = [*BatchedHeads.rule(alibi=True).commute(), *BatchedHeads.rule(alibi=False).commute()]
# a layer's part that did not fuse (`_unfused_part`) -> the fused op it would have become
_KERNELS = {
    "normalization": "SkipSimplifiedLayerNormalization",
    "rotary embedding": "RotaryEmbedding",
    "attention": "GroupQueryAttention",
}
_PASSING = ("Where", "Reshape", "Cast", "Slice", "Transpose", "Identity", "Unsqueeze", "Expand", "Gather", "Squeeze")


class _RmsNormalization(pattern.RewriteRuleClassBase):
    """``weight * (x / sqrt(mean(x ** 2) + eps))`` → ``SimplifiedLayerNormalization``."""

    def pattern(self, op, x, two, axes, epsilon, scale):
        mean = op.ReduceMean(op.Pow(x, two), axes, keepdims=1, noop_with_empty_axes=0)
        return op.Mul(scale, op.Div(x, op.Sqrt(op.Add(mean, epsilon))))

    def check(self, context, x, two, axes, epsilon, scale, **_) -> pattern.MatchResult:
        result = pattern.MatchResult()
        rank = len(x.shape) if x.shape is not None else None
        if not _ir_utils.is_singleton_value(two, 2.0, rtol=1e-6) or not _ir_utils.is_singleton_value(
            axes, lambda a: a in (-1, (rank or 0) - 1)
        ):
            return result.fail("not a mean of squares over the last axis", x)
        if not isinstance(_ir_utils.get_singleton_value(epsilon), float):
            return result.fail("epsilon is not a constant", epsilon)
        if scale.const_value is None or len(scale.shape or ()) != 1 or x.dtype != ir.DataType.FLOAT:
            return result.fail("not a float32 norm with a constant 1-D weight", scale)
        return result

    def rewrite(self, op, x, epsilon, scale, **_):
        return op.SimplifiedLayerNormalization(
            x, scale, axis=-1, epsilon=_ir_utils.get_singleton_value(epsilon), stash_type=1
        )


class _RotaryCache(pattern.RewriteRuleClassBase):
    """onnxscript's intermediate rotary op with cos/sin of ``position_ids * inv_freq`` →
    ``com.microsoft.RotaryEmbedding`` with constant caches of `positions` rows."""

    def __init__(self, positions: int) -> None:
        super().__init__(name="RotaryCache", remove_nodes=False)
        self._positions = positions
        self._caches: dict[int, tuple[ir.Value, ir.Value]] = {}

    def pattern(self, op, x, position_ids, axes, inv_freq, one_cos, one_sin):
        freqs = op.Mul(op.Cast(op.Unsqueeze(position_ids, axes), to=ir.DataType.FLOAT), inv_freq)
        angles = op.Concat(freqs, freqs, axis=-1)
        cos, sin = op.Unsqueeze(op.Cos(angles), one_cos), op.Unsqueeze(op.Sin(angles), one_sin)
        return op.RotaryEmbedding(x, cos, sin, _domain="ai.onnxruntime._fusion", _allow_other_attributes=True)

    def check(self, context, x, position_ids, axes, inv_freq, one_cos, one_sin, **_) -> pattern.MatchResult:
        result = pattern.MatchResult()
        if inv_freq.const_value is None or inv_freq.const_value.size != inv_freq.const_value.shape[-1]:
            return result.fail("the inverse frequencies are not a constant vector", inv_freq)
        if not (_ir_utils.is_singleton_value(one_cos, 1) and _ir_utils.is_singleton_value(one_sin, 1)):
            return result.fail("cos and sin are not broadcast over heads", x)
        if (
            position_ids.shape is None
            or len(position_ids.shape) != 2
            or not _ir_utils.is_singleton_value(axes, lambda a: a in (-1, 2))
        ):
            return result.fail("positions are not (batch, sequence)", position_ids)
        if (
            x.shape is None
            or len(x.shape) != 4
            or not isinstance(x.shape[1], int)
            or x.shape[-1] != 2 * inv_freq.shape[-1]
        ):
            return result.fail("the rotation does not span the head", x)
        return result

    def rewrite(self, op, x, position_ids, inv_freq, **_):
        key = id(inv_freq.const_value)
        if key not in self._caches:
            angles = np.arange(self._positions, dtype=np.float32)[:, None] * inv_freq.const_value.numpy().reshape(1, -1)
            self._caches[key] = (
                op.initializer(
                    ir.tensor(np.cos(angles).astype(np.float32)), name=f"rotary_cos_cache_{len(self._caches)}"
                ),
                op.initializer(
                    ir.tensor(np.sin(angles).astype(np.float32)), name=f"rotary_sin_cache_{len(self._caches)}"
                ),
            )
        cos, sin = self._caches[key]
        # num_heads: onnxruntime needs it with rotary_embedding_dim, which a partial rotation gets next
        return op.RotaryEmbedding(
            x, position_ids, cos, sin, interleaved=0, num_heads=x.shape[1], _domain="com.microsoft"
        )


class _SplitHeads(pattern.RewriteRuleClassBase):
    """One projection whose heads each hold their query, key and value (GPT-NeoX's ``query_key_value``:
    ``(batch, sequence, heads, 3 x size)``, split after moving heads) → three projections, each split into
    heads as Llama's are (their weights' columns taken per head): the layout the attention fusion takes."""

    def __init__(self) -> None:
        super().__init__()
        self._parts: dict[tuple[str, int], ir.Value] = {}  # a packed constant's part, once (layers may share one)

    def pattern(self, op, x, weight, bias, shape):
        projected = op.Add(op.MatMul(x, weight), bias)
        packed = op.Transpose(op.Reshape(projected, shape, _outputs=["reshaped"]), perm=[0, 2, 1, 3])
        return op.Split(packed, axis=-1, _allow_other_attributes=True, _outputs=3)

    def check(self, context, x, weight, bias, reshaped, **_) -> pattern.MatchResult:
        result = pattern.MatchResult()
        split = context.root
        if len(split.inputs) > 1 or split.attributes.get_int("num_outputs", 0) != 3:
            return result.fail("not three equal parts of each head", split)
        if weight.const_value is None or len(weight.shape) != 2 or bias.const_value is None or len(bias.shape) != 1:
            return result.fail("not a projection by constant weights and bias", weight)
        heads = reshaped.shape[2] if reshaped.shape is not None and len(reshaped.shape) == 4 else None
        if not isinstance(heads, int) or weight.shape[1] % (3 * heads) or x.shape is None or len(x.shape) != 3:
            return result.fail("not (batch, sequence, heads x 3 x size)", x)
        return result

    def rewrite(self, op, x, weight, bias, reshaped, **_):
        heads = reshaped.shape[2]
        size = weight.shape[1] // (3 * heads)
        parts = []
        for part in range(3):
            w, b = (self._part(op, weight, part, heads, size), self._part(op, bias, part, heads, size))
            projected = op.Add(op.MatMul(x, w), b)
            projected.shape, projected.dtype = ir.Shape([*x.shape[:2], heads * size]), x.dtype
            parts.append(
                op.Transpose(op.Reshape(projected, op.Constant(value_ints=[0, 0, heads, size])), perm=[0, 2, 1, 3])
            )
        return tuple(parts)

    def _part(self, op, value: ir.Value, part: int, heads: int, size: int) -> ir.Value:
        """Part `part` of each head of a packed weight or bias (its last axis ``heads x 3 x size``), read lazily."""
        key = (value.name, part)
        if key not in self._parts:
            tensor = value.const_value
            shape = [*tensor.shape[:-1], heads * size]

            def read() -> ir.Tensor:
                packed = tensor.numpy().reshape(*shape[:-1], heads, 3, size)
                return ir.tensor(np.ascontiguousarray(packed[..., part, :].reshape(shape)))

            lazy = ir.LazyTensor(read, dtype=tensor.dtype, shape=ir.Shape(shape), name=f"{value.name}_part{part}")
            self._parts[key] = op.initializer(lazy)
        return self._parts[key]


class _GroupQueryAttention(pattern.RewriteRuleClassBase):
    """A decoder layer's attention as exported (rotary on BHSD heads, the cache concatenated, keys
    repeated per group, softmax over ``q·kᵀ`` plus the model's additive mask) → onnxruntime's
    ``GroupQueryAttention``, rotating q and k itself (``do_rotary``: a whole head, constant caches) or
    with RotaryEmbedding on the 3-D projections (a partial rotation), and the mask as its
    ``attention_bias`` (left padding stays masked; ``seqlens_k`` is every row's full length)."""

    def __init__(
        self,
        repeated: bool,
        sdpa: bool,
        rotary: bool,
        qk_norm: str,
        scaled: bool,
        capped: bool,
        masked: bool,
        biased: bool,
    ) -> None:
        kind = f"{'Repeated' if repeated else ''}{'Sdpa' if sdpa else 'Eager'}{'Rotary' if rotary else ''}"
        kind += f"{qk_norm.title().replace('_', '')}{'' if scaled else 'Unscaled'}{'Capped' if capped else ''}"
        kind += ("Masked" if masked else "") + ("Biased" if biased else "")
        super().__init__(name=f"GroupQueryAttention{kind}")
        self._repeated = repeated
        # the scale: SDPA's split over q and k, eager's on the scores; none where it is 1 (OPT scales the
        # query projection), as the optimizer drops a product by 1
        self._scaled = scaled
        self._capped = capped  # the scores soft-capped (Gemma 2's ``cap * tanh(scores / cap)``), eager's
        # eager scores masked before the additive mask (GPT-Neo's ``where(window, scores, min)``): the window
        # goes into GQA's attention_bias
        self._masked = masked
        # eager scores plus a bias of their own, then masked (MPT's ALiBi: ``where(mask, min, scores + alibi)``):
        # GQA's attention bias is ``where(mask, min, alibi)``
        self._biased = biased
        self._rotary = rotary  # RotaryEmbedding on q and k (else positions are elsewhere: GPT-2's, ALiBi's)
        self._sdpa = sdpa  # torch's SDPA (scale split over q and k, NaN rows zeroed); else transformers' eager
        # a norm of each head of q and k, kept before GQA: "" none, "norm_then_transpose" (Qwen3's RMS norm,
        # on (batch, sequence, heads, size)), "transpose_then_norm" (Gemma 3's, on (batch, heads, sequence, size)),
        # "layer_norm_then_transpose" (Persimmon's LayerNorm, with a bias, on (batch, sequence, heads, size))
        self._qk_norm = qk_norm

    def pattern(
        self,
        op,
        q_lin,
        k_lin,
        v_lin,
        q_shape,
        k_shape,
        v_shape,
        position_ids,
        cos,
        sin,
        past_key,
        past_value,
        q_scale,
        k_scale,
        scale,
        softcap,
        window,
        fill,
        bias,
        zero,
        out_shape,
        q_weight,
        k_weight,
    ):
        def heads(x, shape, weight, name):
            def norm(x):
                kind = "LayerNormalization" if self._qk_norm.startswith("layer_") else "SimplifiedLayerNormalization"
                return getattr(op, kind)(
                    x, weight, _allow_other_inputs=True, _allow_other_attributes=True, _outputs=[name]
                )

            x = op.Reshape(x, shape, _allow_other_attributes=True)
            if self._qk_norm.endswith("norm_then_transpose"):
                x = norm(x)
            x = op.Transpose(x, perm=[0, 2, 1, 3])
            return norm(x) if self._qk_norm == "transpose_then_norm" else x

        def rotary(x, name):
            if not self._rotary:
                return x
            return op.RotaryEmbedding(
                x, position_ids, cos, sin, _domain="com.microsoft", _allow_other_attributes=True, _outputs=[name]
            )

        present_key = op.Concat(past_key, rotary(heads(k_lin, k_shape, k_weight, "k_normed"), "k_rotary"), axis=-2)
        present_value = op.Concat(
            past_value,
            op.Transpose(op.Reshape(v_lin, v_shape, _allow_other_attributes=True), perm=[0, 2, 1, 3]),
            axis=-2,
        )
        key, value = present_key, present_value
        if self._repeated:
            key, value = (
                op.Reshape(op.Expand(op.Unsqueeze(x, pattern.ANY_VALUE), pattern.ANY_VALUE), pattern.ANY_VALUE,
                           _allow_other_attributes=True)
                for x in (present_key, present_value)
            )  # fmt: skip
        query, key = (
            rotary(heads(q_lin, q_shape, q_weight, "q_normed"), "q_rotary"),
            op.Transpose(key, perm=[0, 1, 3, 2]),
        )
        if self._sdpa:
            if self._scaled:
                query, key = op.Mul(query, q_scale), op.Mul(key, k_scale)
            probs = op.Softmax(op.Add(op.MatMul(query, key), bias), axis=-1)
            probs = op.Where(op.IsNaN(probs), zero, probs)
        else:
            scores = op.MatMul(query, key)
            if self._scaled:
                scores = op.Mul(scores, scale)
            if self._capped:
                scores = op.Mul(op.Tanh(op.Div(scores, softcap)), softcap)
            if self._masked:
                scores = op.Where(window, scores, fill)
            if self._biased:
                probs = op.Softmax(op.Where(window, fill, op.Add(scores, bias)), axis=-1)
            else:
                probs = op.Softmax(op.Add(scores, bias), axis=-1)
        out = op.Transpose(op.MatMul(probs, value), perm=[0, 2, 1, 3])
        attention = op.Reshape(out, out_shape, _allow_other_attributes=True, _outputs=["attention"])
        return attention, present_key, present_value

    def check(self, context, q_lin, k_lin, v_lin, past_key, bias, **scales) -> pattern.MatchResult:
        result = pattern.MatchResult()
        dims = [x.shape[-1] if x.shape is not None and len(x.shape) == 3 else None for x in (q_lin, k_lin, v_lin)]
        size = past_key.shape[-1] if past_key.shape is not None and len(past_key.shape) == 4 else None
        if not all(isinstance(d, int) for d in (*dims, size)) or dims[1] != dims[2] or dims[0] % size or dims[1] % size:
            return result.fail("projections are not (batch, sequence, heads x head size)", q_lin)
        if _scale(**scales) is None:
            return result.fail("the scale is not a constant", bias)
        if scales.get("softcap") is not None and not _ir_utils.is_singleton_value(scales["softcap"], lambda c: c > 0):
            return result.fail("the soft cap is not a positive constant", scales["softcap"])
        if self._biased:  # (heads, 1, total) or (batch, heads, sequence, total)
            if bias.shape is None or len(bias.shape) not in (3, 4) or bias.dtype != ir.DataType.FLOAT:
                return result.fail("the scores' bias is not a float (heads, 1, total) bias", bias)
        elif bias.shape is None or len(bias.shape) != 4 or bias.dtype != ir.DataType.FLOAT:
            return result.fail("the mask is not an additive float (batch, 1, sequence, total) mask", bias)
        fill = scales.get("fill")
        if fill is not None and not _ir_utils.is_singleton_value(fill, lambda f: f <= _MASKED):
            return result.fail("masked scores are not set to a large negative constant", fill)
        window = scales.get("window")
        if window is not None and (window.dtype != ir.DataType.BOOL or len(window.shape or ()) != 4):
            return result.fail("the scores' mask is not a boolean (batch, heads, sequence, total) mask", window)
        return result

    def rewrite(
        self,
        op,
        q_lin,
        k_lin,
        v_lin,
        past_key,
        past_value,
        bias,
        out_shape,
        position_ids=None,
        cos=None,
        sin=None,
        q_shape=None,
        k_shape=None,
        q_normed=None,
        k_normed=None,
        q_rotary=None,
        attention=None,
        **scales,
    ):
        size = past_key.shape[-1]
        heads, kv_heads = q_lin.shape[-1] // size, k_lin.shape[-1] // size
        query, key = q_lin, k_lin
        if self._qk_norm:  # on the heads of the 3-D projections, flattened back for GQA
            query, key = (
                _norm_like(op, x, shape, normed)
                for x, shape, normed in ((q_lin, q_shape, q_normed), (k_lin, k_shape, k_normed))
            )
        in_kernel = {}  # GQA's own rotary (do_rotary): positions with the caches, no RotaryEmbedding nodes
        if self._rotary:
            interleaved = q_rotary.producer().attributes.get_int("interleaved", 0)  # GPT-J's pairs of channels
            rotary = dict(interleaved=interleaved, _domain="com.microsoft")
            part = q_rotary.producer().attributes.get_int("rotary_embedding_dim", 0)
            if part:  # a partial rotation (Phi's, StableLM's): the first `part` of each head
                rotary["rotary_embedding_dim"] = part
            if not part and _is_cache(cos, size) and _is_cache(sin, size):
                in_kernel = dict(do_rotary=1, rotary_interleaved=interleaved)
                position_ids = _slot_positions(op, position_ids, _mask_input(past_key))
            else:
                query = op.RotaryEmbedding(query, position_ids, cos, sin, num_heads=heads, **rotary)
                key = op.RotaryEmbedding(key, position_ids, cos, sin, num_heads=kv_heads, **rotary)
        if not in_kernel:
            cos = sin = position_ids = None
        if self._biased:  # the mask over the scores' own bias, (batch, heads, sequence, total)
            bias = op.Where(scales["window"], scales["fill"], bias)
        elif scales.get("window") is not None:  # where the scores were masked, the bias masks them too
            bias = op.Where(scales["window"], bias, scales["fill"])
        total = op.Shape(bias, start=3, end=4)
        mask = _mask_input(past_key)  # the batch size from one tensor for every layer: computed once (CSE)
        rows = op.Shape(mask if mask is not None else q_lin, start=0, end=1)
        seqlens_k = op.Cast(op.Expand(op.Sub(total, op.Constant(value_ints=[1])), rows), to=ir.DataType.INT32)
        total = op.Cast(op.Squeeze(total), to=ir.DataType.INT32)
        scale = _scale(**scales)
        softcap = scales.get("softcap")
        capped = {"softcap": float(_ir_utils.get_singleton_value(softcap))} if softcap is not None else {}
        out, present_key, present_value = op.GroupQueryAttention(
            query, key, v_lin, past_key, past_value, seqlens_k, total, cos, sin, position_ids, bias,
            num_heads=heads, kv_num_heads=kv_heads, scale=scale, **in_kernel, **capped,
            _domain="com.microsoft", _outputs=3,
        )  # fmt: skip
        batch_and_sequence = (known_dims(q_lin) or [None, None])[:2]
        if None not in batch_and_sequence and known_dims(attention) == [*batch_and_sequence, heads * size]:
            out.shape, out.type = attention.shape, attention.type  # already the layout the output projection takes
            return out, present_key, present_value
        return op.Reshape(out, out_shape), present_key, present_value  # the layout the output projection takes


def _is_cache(value: ir.Value, size: int) -> bool:
    """Whether `value` is a constant (positions, head size / 2) cos or sin cache, as GQA's do_rotary takes."""
    return value.const_value is not None and len(value.shape or ()) == 2 and value.shape[1] * 2 == size


def _mask_input(past_key: ir.Value) -> ir.Value | None:
    """The graph's ``attention_mask`` input (batch, total length), found from a past key (a graph input)."""
    graph = past_key.graph
    return next((v for v in graph.inputs if v.name == "attention_mask"), None) if graph is not None else None


def _slot_positions(op, position_ids: ir.Value, mask: ir.Value | None) -> ir.Value:
    """The positions of GQA's own rotary: a first prompt is rotated at its cache slots (onnxruntime
    ignores `position_ids` then), later tokens at the positions given. A left-padded row's real
    positions (the model's ``position_ids`` input, ``cumsum(attention_mask) - 1``) are its slots minus
    its padding: they get the padding back (``argmax(attention_mask)``, its first 1), so the prompt
    and the later tokens are rotated alike. Right padding (onnxruntime-genai's) keeps the positions."""
    if not position_ids.is_graph_input() or mask is None:  # computed in the graph: from the cache slots
        return position_ids
    return op.Add(position_ids, op.ArgMax(mask, axis=-1, keepdims=1))


def _norm_like(op, x: ir.Value, shape: ir.Value, normed: ir.Value) -> ir.Value:
    """`normed`'s norm of the heads of `x` (batch, sequence, heads x size): split into heads by `shape`,
    normed (the same op, weights and epsilon: a norm over the last axis, before or after moving heads),
    flattened back."""
    norm = normed.producer()
    heads = op.Reshape(x, shape)
    out = getattr(op, norm.op_type)(heads, *norm.inputs[1:], **{k: a.value for k, a in norm.attributes.items()})
    return op.Reshape(out, op.Constant(value_ints=[0, 0, -1]))


def merge_projections(model: ir.Model) -> int:
    """`merge_parallel_matmuls`, then `pack_qkv`; the weights merged are dropped. Returns how many merged."""
    merged = merge_parallel_matmuls(model)
    pack_qkv(model)
    RemoveUnusedNodesPass()(model)
    return merged


def merge_parallel_matmuls(model: ir.Model) -> int:
    """Merge the MatMuls that multiply one input by constant weights into one GroupQueryAttention (a
    layer's q/k/v projections) into one MatMul (and one bias Add when each has one, none when the biases
    are all zero) and a Split: one kernel instead of three per decode step. Not the gate and up
    projections: one fp32 MatMul of both was slower per token than two (Qwen2/Llama, hidden 1024:
    37.4 vs 35.3 ms of CPU, one thread; the builder keeps them apart too). The merged weights are
    concatenated when read (quantized, written), not here. Returns how many were merged."""
    graph = model.graph
    groups: dict[tuple, list[ir.Node]] = {}  # by input, weight rows and type, and the attention reached
    for node in graph:
        kind = _matmul_kind(node)
        if kind is None:
            continue
        bias = _bias(node)
        attention = _attention_of(bias[0].outputs[0] if bias is not None else node.outputs[0])
        if attention is not None:  # not another MatMul of that input (an MLP's, where its norm is the same)
            groups.setdefault((node.inputs[0], kind, attention, bias is not None), []).append(node)
    merged = 0
    for (source, *_), nodes in groups.items():
        biases = [_bias(n) for n in nodes]
        with_bias = all(b is not None for b in biases)
        olds = [b[0].outputs[0] if with_bias else n.outputs[0] for n, b in zip(nodes, biases)]
        if len(nodes) < 2 or any(old.is_graph_output() for old in olds):
            continue
        first = nodes[0]
        weight = _concatenated(graph, f"{first.name}_merged_weight", [n.inputs[1].const_value for n in nodes], 1)
        new = [ir.node("MatMul", [source, weight], name=f"{first.name}_merged")]
        sizes = [n.inputs[1].shape[1] for n in nodes]
        if with_bias and any(b[1].numpy().any() for b in biases):
            bias = _concatenated(graph, f"{first.name}_merged_bias", [b[1] for b in biases], axis=0)
            new.append(ir.node("Add", [new[-1].outputs[0], bias], name=f"{first.name}_merged_bias_add"))
        split_sizes = ir.tensor(np.array(sizes, dtype=np.int64), name=f"{first.name}_merged_sizes")
        new.append(ir.node("Split", [new[-1].outputs[0], initializer(graph, split_sizes)], attributes={"axis": -1},
                           num_outputs=len(nodes)))  # fmt: skip
        for node in new:
            node.metadata_props.update(first.metadata_props)  # the layer, for the quantizer's groups
        graph.insert_before(first, new)
        for old, output in zip(olds, new[-1].outputs):
            output.shape, output.dtype = old.shape, old.dtype
            ir.convenience.replace_all_uses_with(old, output)
        for node, bias in zip(nodes, biases):
            graph.remove([bias[0], node] if with_bias else [node], safe=True)
        merged += len(nodes)
    return merged


def _attention_of(value: ir.Value) -> ir.Node | None:
    """The one GroupQueryAttention `value` reaches within a few nodes (a rotary kernel, a per-head norm's
    Reshape → SimplifiedLayerNormalization → Reshape), or None."""
    found, frontier = set(), [value]
    for _ in range(4):
        users = [user for v in frontier for user, _ in v.uses()]
        found |= {user for user in users if user.op_type == "GroupQueryAttention"}
        frontier = [out for user in users if user.op_type != "GroupQueryAttention" for out in user.outputs]
    return next(iter(found)) if len(found) == 1 else None


def _matmul_kind(node: ir.Node) -> tuple | None:
    """What a MatMul of `node`'s input by a constant weight must share with another to merge with it
    (the weight's rows and type), or None: not such a MatMul."""
    weight = node.inputs[1] if node.op_type == "MatMul" and node.domain == "" else None
    if weight is None or weight.const_value is None or len(weight.shape or ()) != 2:
        return None
    return (weight.shape[0], weight.dtype)


def pack_qkv(model: ir.Model) -> int:
    """Feed GroupQueryAttention the merged q/k/v projection whole (its packed QKV input) where the
    three parts of its Split are its query, key and value, used elsewhere only for their batch and
    sequence sizes (``Shape``). Returns how many."""
    packed = 0
    for node in model.graph:
        if node.op_type != "GroupQueryAttention" or node.inputs[1] is None:
            continue
        split = node.inputs[0].producer()
        if split is None or split.op_type != "Split" or list(split.outputs) != list(node.inputs[:3]):
            continue
        others = [use for value in split.outputs for use, _ in value.uses() if use is not node]
        if not all(_reads_leading_dims(use) for use in others):
            continue
        for use in others:
            use.replace_input_with(0, split.inputs[0])
        for index, value in enumerate((split.inputs[0], None, None)):
            node.replace_input_with(index, value)
        packed += 1
    return packed


def _reads_leading_dims(node: ir.Node) -> bool:
    """Whether `node` reads only the batch and sequence sizes of its input (a ``Shape`` ending by axis 2)."""
    start, end = node.attributes.get_int("start", 0), node.attributes.get_int("end", None)
    return node.op_type == "Shape" and end is not None and 0 <= start < end <= 2


def _concatenated(graph: ir.Graph, name: str, parts: list[ir.TensorProtocol], axis: int) -> ir.Value:
    """An initializer of `parts` concatenated along `axis`, computed when read (not kept in memory)."""
    shape = list(parts[0].shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    tensor = ir.LazyTensor(
        lambda: ir.tensor(np.concatenate([p.numpy() for p in parts], axis=axis)),
        dtype=parts[0].dtype,
        shape=ir.Shape(shape),
        name=name,
    )
    return initializer(graph, tensor)


def _bias(node: ir.Node) -> tuple[ir.Node, ir.TensorProtocol] | None:
    """The Add of a constant 1-D bias that is the only use of `node`'s output, with the bias."""
    uses = list(node.outputs[0].uses())
    if len(uses) != 1 or uses[0][0].op_type != "Add":
        return None
    add = uses[0][0]
    bias = add.inputs[1 - uses[0][1]]
    if bias is None or bias.const_value is None or len(bias.shape or ()) != 1:
        return None
    return add, bias.const_value


def _scale(
    q_scale: ir.Value | None = None, k_scale: ir.Value | None = None, scale: ir.Value | None = None, **_
) -> float | None:
    """The attention's scale: of the scores, split over q and k (SDPA's), or 1 (none); None if not constant."""
    factors = [_ir_utils.get_singleton_value(v) for v in (q_scale, k_scale, scale) if v is not None]
    return float(np.prod(factors)) if all(isinstance(f, float) for f in factors) else None


@dataclasses.dataclass(frozen=True)
class Fusion:
    """What fused in a generation graph."""

    layers: list[str]  # the decoder layers' module paths
    unfused: dict[str, list[str]]  # layer -> the parts (normalization, rotary embedding, …) not fused
    counts: dict[str, int]  # fused op -> how many

    def summary(self) -> str:
        fused = sum(1 for layer in self.layers if not self.unfused.get(layer))
        ops = ", ".join(f"{n} {op}" for op, n in sorted(self.counts.items()) if n)
        return f"{fused}/{len(self.layers)} layers fused ({ops or 'no fused ops'})"


def fuse(model: ir.Model, positions: int) -> Fusion:
    """Rewrite `model` (in place; its local functions inlined) to onnxruntime's fused kernels, q/k/v
    projections merged (`merge_projections`); the rotary caches get `positions` rows (the context length)."""
    from onnxscript.rewriter.ort_fusions import rotary_embedding, skip_normalization

    InlinePass()(model)
    layers_before = _layers(model)
    rewriter.rewrite(model, _RmsNormalization.rule().commute())
    skip_normalization.fuse_skip_rms_normalization(model)
    skip_normalization.fuse_skip_layer_normalization(model)
    move_heads_first(model.graph)
    rotary_embedding.fuse_rotary_embedding(model)
    rewriter.rewrite(model, [_RotaryCache.rule(positions)])
    rotary_embedding.fuse_partial_rotary_embedding(model)
    _rewrite_where(model, "Neg", InterleavedRotary.rule(positions).commute())  # a rotation left: interleaved?
    _rewrite_where(model, "Split", [_SplitHeads.rule()])
    _rewrite_where(model, "RotaryEmbedding", [PartialInterleavedRotary.rule()])
    split_packed_heads(model.graph)
    if any(_transposes_batched(node) for node in model.graph):
        rewriter.rewrite(model, BATCHED_HEADS)
    rules = _attention_rules(model)
    rewriter.rewrite(model, rules)
    past_length_from_mask(model.graph)  # the past's length from the mask: a shared cache's is the buffer's
    InlinePass()(model)  # an intermediate rotary op that did not become onnxruntime's: back to standard ops
    CommonSubexpressionEliminationPass()(model)  # the layers' GroupQueryAttention lengths are computed once
    RemoveUnusedFunctionsPass()(model)
    RemoveUnusedNodesPass()(model)
    merge_projections(model)
    counts: dict[str, int] = {}
    for node in model.graph:
        if node.op_type in (
            "SimplifiedLayerNormalization",
            "SkipSimplifiedLayerNormalization",
            "SkipLayerNormalization",
            "RotaryEmbedding",
            "GroupQueryAttention",
        ):
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    unfused: dict[str, list[str]] = {}
    for node in model.graph:
        part = _unfused_part(node)
        layer = _layer_of(node)
        if part is not None and layer in layers_before and part not in unfused.setdefault(layer, []):
            unfused[layer].append(part)
    return Fusion(layers_before, {k: v for k, v in unfused.items() if v}, counts)


def _transposes_batched(node: ir.Node) -> bool:
    """Whether `node` transposes 3-D keys, ``(batch·heads, total, size)``, as attention on batched heads does."""
    return node.op_type == "Transpose" and tuple(node.attributes.get_ints("perm", ())) == (0, 2, 1)


def _rewrite_where(model: ir.Model, op_type: str, rules: list[pattern.RewriteRule]) -> None:
    """Apply `rules` to `model` if it has an `op_type` node, which they all need (each rule is tried at
    every node: a graph without one is not searched)."""
    if any(node.op_type == op_type for node in model.graph):
        rewriter.rewrite(model, rules)


def _attention_rules(model: ir.Model) -> list[pattern.RewriteRule]:
    """The GroupQueryAttention rules whose variant can match `model`: each variant needs an op of its
    own in the graph (SDPA's NaN guard, the repeated keys' Expand, the rotary kernel, a per-head norm
    after a Reshape or a Transpose, eager scores capped by a Tanh, masked by a Where, or biased then masked by one);
    the others are not tried at every node. Variants, not `pattern.OrValue`: its backtracking made matching 20x slower."""
    found = {node.op_type for node in model.graph}
    after = {
        (node.op_type, node.inputs[0].producer().op_type)
        for node in model.graph
        if node.op_type in ("SimplifiedLayerNormalization", "LayerNormalization")
        and node.inputs[0].producer() is not None
    }
    norms = [
        n
        for n, norm, op in (
            ("norm_then_transpose", "SimplifiedLayerNormalization", "Reshape"),
            ("transpose_then_norm", "SimplifiedLayerNormalization", "Transpose"),
            ("layer_norm_then_transpose", "LayerNormalization", "Reshape"),
        )
        if (norm, op) in after
    ]

    def where_reads(index: int, op_types: tuple[str, ...]) -> bool:
        return any(
            node.op_type == "Where" and node.inputs[index] is not None and node.inputs[index].producer() is not None
            and node.inputs[index].producer().op_type in op_types
            for node in model.graph
        )  # fmt: skip

    masked_scores, biased_scores = where_reads(1, ("MatMul", "Mul")), where_reads(2, ("Add",))
    return [
        _GroupQueryAttention.rule(repeated=r, sdpa=s, rotary=p, qk_norm=n, scaled=scaled, capped=c, masked=m, biased=b)
        for r in (1, 0)
        for s in (1, 0)
        for p in (1, 0)
        for n in (*norms, "")
        for scaled in (1, 0)
        for c in (1, 0)
        for m in (1, 0)
        for b in (1, 0)
        if (not r or "Expand" in found)
        and (not s or "IsNaN" in found)
        and (not p or "RotaryEmbedding" in found)
        and not (c and (s or "Tanh" not in found))
        and not (m and (s or not masked_scores))
        and not (b and (s or m or not biased_scores))
    ]


def report(ctx: DiagnosticContext, fusion: Fusion, model: ir.Model) -> None:
    """A warning located at each layer that did not fuse (its first unfused node's stack), and a note
    with the fused fraction."""
    for layer, parts in fusion.unfused.items():
        node = next(n for n in model.graph if _layer_of(n) == layer and _unfused_part(n) is not None)
        frames = parse_stack_trace(node.metadata_props.get(METADATA_STACK, ""))
        kernels = " / ".join(_KERNELS[part] for part in _KERNELS if part in parts)
        user = [f for f in frames if f.is_user_code]
        where = f" (computed at {frames[0]})" if frames and not user else ""
        ctx.report(
            rules.KERNEL_NOT_FUSED,
            Level.WARNING,
            f"Layer {layer}: its {' and '.join(parts)} did not fuse into onnxruntime's {kernels}{where}; "
            "it runs as standard ops (slower).",
            stack=user or frames,
            layer=layer,
            unfused=parts,
        )
    ctx.report(
        rules.KERNEL_NOT_FUSED,
        Level.NOTE,
        f"Fused kernels: {fusion.summary()}.",
        layers=len(fusion.layers),
        fusedLayers=len(fusion.layers) - len(fusion.unfused),
        fusedOps=fusion.counts,
    )


def _unfused_part(node: ir.Node) -> str | None:
    """The part of a layer `node` computes in standard ops, if it is one a fused kernel would have taken: a
    norm's ``ReduceMean``; a rotation's ``Neg`` (rotate half) or a ``Mul`` by the rotary cos/sin (GPT-OSS
    rotates without one); attention's ``Softmax`` whose probabilities weigh values (a MatMul, maybe after
    a mask, reshapes or a slice: attention sinks), not a router's (MoE)."""
    if node.op_type == "ReduceMean":
        return "normalization"
    if node.op_type == "Neg" or (node.op_type == "Mul" and any(_from_sin_or_cos(v) for v in node.inputs)):
        return "rotary embedding"
    if node.op_type != "Softmax":
        return None
    frontier = [node]
    for _ in range(4):
        frontier = [u for n in frontier for u, _ in n.outputs[0].uses()]
        if any(u.op_type == "MatMul" for u in frontier):
            return "attention"
        frontier = [u for u in frontier if u.op_type in _PASSING]
    return None


def _from_sin_or_cos(value: ir.Value | None) -> bool:
    """Whether `value` is a rotary cos or sin table (a ``Cos``/``Sin`` output, maybe reshaped, cast or scaled)."""
    for _ in range(5):
        producer = value.producer() if value is not None else None
        if producer is None:
            return False
        if producer.op_type in ("Cos", "Sin"):
            return True
        if producer.op_type not in (*_PASSING, "Mul", "Concat"):
            return False
        value = producer.inputs[0]
    return False


def _layers(model: ir.Model) -> list[str]:
    found: dict[str, None] = {}
    for node in model.graph:
        layer = _layer_of(node)
        if layer is not None:
            found[layer] = None
    return list(found)


def _layer_of(node: ir.Node) -> str | None:
    """The decoder layer (module path, the generation wrapper's ``model.`` dropped) `node` belongs to."""
    stack = json.loads(node.metadata_props.get(METADATA_MODULE_STACK, "[]"))
    layers = [entry[1].removeprefix("model.") for entry in stack if entry[1] and _LAYER.search(entry[1])]
    return layers[-1] if layers else None
