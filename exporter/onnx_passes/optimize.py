"""Optimization of the translated ONNX model: onnxscript's optimizer, and fusions for the target opset
and runtime.

`OptimizePass` is onnxscript's `optimize_ir` (constant folding and its rewrite rules, twice, then dead
code, constants lifted to initializers, duplicates merged), with every rewrite rule tried only on nodes
its pattern's root can match (onnxscript tries each rule on each node, and failing those matches was
most of the optimizer's time) and the shapes the folder needs inferred by onnx for the whole model
at once (a quarter of the pass's time less than its node-by-node inference).

`FusePass` runs on the target opset (after the conversion). Its portable rewrites use standard ops
only: decompositions become the ops of that opset (``LayerNormalization``, ``Gelu`` from opset 20,
``RMSNormalization`` from 23; not onnxscript's opset-23 RotaryEmbedding fusion, whose result
onnxruntime refuses with dynamic shapes), constant ``Reshape`` shapes drop ``allowzero`` (which
stops onnxruntime from merging reshapes), and before opset 20 GELU takes the form onnxruntime's
graph optimizer fuses. Known shapes and constants remove steps that change nothing (reshapes,
slices and expands to the same shape, transposes of size-1 axes before a reshape, an all-True
attention mask, ``Equal(b, True)`` and ``And(b, True)``, a squeezed reduction that kept its axes;
symbolic dimensions compare by name), and linear layers on static batches
become ``Gemm`` between reshapes that merge with their neighbours. With
``optimize="onnxruntime"`` it also runs onnxscript's onnxruntime fusions, whose contrib ops
(``com.microsoft``) only onnxruntime runs.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common_passes
from onnx_ir.passes.common import _c_api_utils
from onnxscript import optimizer, rewriter
from onnxscript.rewriter import _ir_utils, _matcher, _pattern_ir, pattern
from onnxscript.rewriter.rules.common import _no_op

from exporter.constants import METADATA_PREFIX as _METADATA_PREFIX
from exporter.options import OPTIMIZE_ONNXRUNTIME

_GELU_OPSET = 20  # the first default-domain opset with Gelu
_RMS_NORMALIZATION_OPSET = 23
_GELU_PRODUCT_DEPTH = 4  # the deepest Mul tree in a tanh GELU: (x·x)·x·0.044715 of an x made by a Mul


class _RootFilteredRule:
    """A rewrite rule tried only on nodes whose op its pattern's root matches.

    That check is the pattern matcher's first; doing it before the matcher sets up a match makes a
    miss cost a comparison. Everything else is the wrapped rule's.
    """

    def __init__(self, rule: pattern.RewriteRule) -> None:
        self._rule = rule
        root = rule._target_pattern.output_nodes[0]
        self._op, self._domain = root.op, root.domain

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rule, name)

    def try_rewrite(self, model: ir.Model, graph: ir.Graph | ir.Function, node: ir.Node, **kwargs: Any) -> Any:
        if not (self._op.matches(node.op_type) and self._domain.matches(node.domain)):
            return None
        return self._rule.try_rewrite(model, graph, node, **kwargs)


def rule_set(rules: Sequence[pattern.RewriteRule]) -> pattern.RewriteRuleSet:
    """`rules`, each tried only where its root op matches (rules with another matcher: everywhere)."""
    return pattern.RewriteRuleSet(
        [_RootFilteredRule(r) if type(r._matcher) is _matcher.SimplePatternMatcher else r for r in rules]  # type: ignore[misc]
    )


class FoldConstantsPass(ir.passes.InPlacePass):
    """onnxscript's constant folding, after onnx's shape inference of the whole model.

    The rewrite rules need the shapes of torchlib's inner values. One C++ inference of the model
    (`infer_missing_shapes`) gives the same folded graph on every corpus model as the folder's own
    node-by-node inference, which makes a Python round trip through onnx per node.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        infer_missing_shapes(model)
        before = {node: list(node.inputs) for graph in model.graphs() for node in graph}  # the folder clears them
        result = optimizer.fold_constants(model)
        _keep_provenance(model, before)
        return result


def _keep_provenance(model: ir.Model, before: dict[ir.Node, list[ir.Value | None]]) -> None:
    """Give each node the folder made (its rewrites copy no metadata: ``SplitToSequence`` + ``SequenceAt``
    become a ``Split``) the exporter's metadata (source line, module) of a node it replaced, one that
    read the same input. Without it the node has no line and splits its module's function in two."""
    removed = [(node, {v for v in inputs if v is not None}) for node, inputs in before.items() if node.graph is None]
    for graph in model.graphs():
        for node in graph:
            if node in before or any(key.startswith(_METADATA_PREFIX) for key in node.metadata_props):
                continue
            inputs = {v for v in node.inputs if v is not None}
            source = next((old for old, read in removed if read & inputs), None)
            if source is not None:
                node.metadata_props.update(
                    {k: v for k, v in source.metadata_props.items() if k.startswith(_METADATA_PREFIX)}
                )


def infer_missing_shapes(model: ir.Model) -> None:
    """Give the node outputs without a type or a static shape what onnx's shape inference of the whole
    model (with data propagation) finds: a type, a shape with more static dimensions. A failed
    inference changes nothing."""
    missing = {
        value.name: value
        for graph in model.graphs()
        for node in graph
        for value in node.outputs
        if value.shape is None or value.type is None or not value.shape.is_static()
    }
    if not missing:
        return
    infer = functools.partial(onnx.shape_inference.infer_shapes, strict_mode=False, data_prop=True)
    try:
        inferred = _c_api_utils.call_onnx_api(infer, model)  # big initializers are left out for the call
    except Exception:  # onnx refuses the model: fold without the shapes
        return
    for info in _value_infos(inferred.graph):
        value = missing.get(info.name)
        if value is None or not info.type.HasField("tensor_type"):
            continue
        if value.type is None and info.type.tensor_type.elem_type:
            value.type = ir.TensorType(ir.DataType(info.type.tensor_type.elem_type))
        if info.type.tensor_type.HasField("shape"):
            shape = ir.serde.deserialize_tensor_shape(info.type.tensor_type.shape)
            if value.shape is None or _static_dims(shape) > _static_dims(value.shape):
                value.shape = shape


def _static_dims(shape: ir.Shape) -> int:
    return sum(isinstance(d, int) for d in shape)


def _value_infos(graph: onnx.GraphProto) -> Iterator[onnx.ValueInfoProto]:
    """The value infos of `graph` and of the graphs in its nodes' attributes (If, Loop bodies)."""
    yield from graph.value_info
    for node in graph.node:
        for attribute in node.attribute:
            for subgraph in (attribute.g, *attribute.graphs) if attribute.HasField("g") else attribute.graphs:
                yield from _value_infos(subgraph)


def _exactly(value: float) -> _pattern_ir.Constant:
    """A pattern's scalar constant matching `value` only (onnxscript's literals match within 1e-8
    absolutely and 1e-5 relatively: ``x + 1e-8``, an RMS norm's epsilon, became ``x``)."""
    return _pattern_ir.Constant(value, 0.0, 0.0)


def _identity(op, x, **_):
    return op.Identity(x)


_EXACT_NO_OPS = [
    *pattern.RewriteRule(lambda op, x: op.Add(x, _exactly(0)), _identity).commute(),
    *pattern.RewriteRule(lambda op, x: op.Mul(x, _exactly(1)), _identity).commute(),
    pattern.RewriteRule(lambda op, x: op.Sub(x, _exactly(0)), _identity),
    pattern.RewriteRule(lambda op, x: op.Div(x, _exactly(1)), _identity),
]
_INEXACT_NO_OPS = [
    r
    for r in _no_op.rules.rules
    if any(r._target_pattern.output_nodes[0].op.matches(t) for t in ("Add", "Mul", "Sub", "Div"))
]
# onnxscript's default rules, with its arithmetic no-op rules (x + 0, x * 1, x - 0, x / 1) matched exactly
_REWRITE_RULES = [*(r for r in rewriter._DEFAULT_REWRITE_RULES if r not in _INEXACT_NO_OPS), *_EXACT_NO_OPS]


class OptimizePass(ir.passes.InPlacePass):
    """onnxscript's optimizer (`optimize_ir`, functions already inlined) with root-filtered rewrite rules."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        loop = ir.passes.PassManager(
            [
                FoldConstantsPass(),
                rewriter.RewritePass(rule_set(_REWRITE_RULES)),
                common_passes.RemoveUnusedNodesPass(),
                common_passes.RemoveUnusedFunctionsPass(),
                common_passes.RemoveUnusedOpsetsPass(),
            ],
            steps=2,
            early_stop=True,
        )
        ir.passes.Sequential(
            loop,
            common_passes.RemoveUnusedNodesPass(),
            common_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
            common_passes.LiftSubgraphInitializersToMainGraphPass(),
            common_passes.DeduplicateInitializersPass(),
            common_passes.CommonSubexpressionEliminationPass(),
            common_passes.OutputFixPass(),
            common_passes.NameFixPass(),
        )(model)
        return ir.passes.PassResult(model, modified=True)


class FusePass(ir.passes.InPlacePass):
    """Portable fusions for the target opset; onnxscript's onnxruntime fusions when `target` asks."""

    def __init__(self, opset_version: int, target: bool | str) -> None:
        super().__init__()
        self.opset_version = opset_version
        self.target = target

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        count = rule_set(portable_rules(self.opset_version, self.target)).apply_to_model(model)
        if self.target == OPTIMIZE_ONNXRUNTIME:
            count += onnxruntime_fusions(model)
        else:  # the reshapes around the linear layers' Gemms meet the views next to them
            count += rule_set([_ReshapeOfReshape.rule(), _NoOpReshape.rule()]).apply_to_model(model)
        _IdentityElimination()(model)  # what the no-op rules leave
        common_passes.RemoveUnusedNodesPass()(model)
        common_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
        common_passes.DeduplicateInitializersPass()(model)
        common_passes.CommonSubexpressionEliminationPass()(model)  # e.g. one input reshape for q, k and v
        return ir.passes.PassResult(model, modified=bool(count))


class _IdentityElimination(common_passes.IdentityEliminationPass):
    """onnx_ir's, except for an Identity that makes a value of an outer graph a subgraph's output (a
    Loop body's): without it, that output has no producer in the subgraph, which onnx.checker rejects."""

    def _try_eliminate_identity_node(self, node: ir.Node) -> bool:
        source = node.inputs[0] if len(node.inputs) == 1 else None
        outer = source is not None and source.producer() is not None and source.producer().graph is not node.graph
        if outer and any(output.is_graph_output() for output in node.outputs):
            return False
        return super()._try_eliminate_identity_node(node)


def onnxruntime_fusions(model: ir.Model) -> int:
    """onnxscript's onnxruntime fusions (`optimize_for_ort`'s `fuse_xformers`, in its order), less two
    kinds: RMS normalization (its op, SimplifiedLayerNormalization, is onnxruntime's but in the ONNX
    domain, which onnx.checker rejects; onnxruntime fuses RMS norms itself) and FusedMatMul (those
    rules mark ``transBatchA`` where the other input has a lower rank, which onnxruntime then refuses
    to run; its own graph optimizer makes FusedMatMul soundly). Returns how many fusions applied."""
    from onnxscript.rewriter.ort_fusions import (
        attention,
        bias_gelu,
        cos_sin_cache,
        erfgelu,
        gelu,
        gqa,
        gqa_packed_qkv,
        instance_to_group_normalization,
        mha,
        mha_bias,
        mha_scale,
        rotary_embedding,
        sdpa,
        sdpa_via_mha,
        skip_normalization,
        softmax,
    )  # fmt: skip
    from onnxscript.rewriter.rules.common import gemm_to_matmul_add_rule

    rewriter.rewrite(model, [gemm_to_matmul_add_rule])  # the attention patterns expect MatMul + Add
    count = erfgelu.fuse_erfgelu(model) + skip_normalization.fuse_skip_layer_normalization(model)
    count += rotary_embedding.fuse_rotary_embedding(model) + cos_sin_cache.fuse_cos_sin_cache(model)
    common_passes.CommonSubexpressionEliminationPass()(model)
    count += rotary_embedding.fuse_partial_rotary_embedding(model)
    count += sdpa.fuse_sdpa(model, apply_shape_inference=True)
    for fuse in (gqa.fuse_gqa, gqa_packed_qkv.fuse_qkv_gqa, mha.fuse_mha1, mha.fuse_mha2, mha_scale.fuse_mha_scale,
                 mha_bias.fuse_mha_bias, attention.fuse_attention, gelu.fuse_gelu, bias_gelu.fuse_bias_gelu,
                 sdpa_via_mha.replace_sdpa_by_mha):  # fmt: skip
        count += fuse(model)
    rewriter.rewrite(model, [*softmax.rules.rules, *instance_to_group_normalization.rules.rules])
    common_passes.InlinePass()(model)  # intermediate fusion functions no later fusion consumed
    OptimizePass()(model)
    return count


def portable_rules(opset_version: int, target: bool | str) -> list[pattern.RewriteRule]:
    """The standard-op rewrites for `opset_version` (GELU is left to the onnxruntime fusions when they run)."""
    from onnxscript.rewriter.ort_fusions import erfgelu  # patterns only; imported on use (cold start)
    from onnxscript.rewriter.rules.fusion import _layer_norm, _rms_normalization

    rules = [
        _ReshapeDropAllowzero.rule(), _SwapLastAxes.rule(), _UnmaskedSoftmax.rule(), _NoOpReshape.rule(), _NoOpSlice.rule(),
        _NoOpExpand.rule(), _ReshapeOfUnitAxesTranspose.rule(), _WithTrue.rule("Equal"), *_WithTrue.rule("And").commute(),
        *(_SqueezedReduction.rule(r) for r in _REDUCTIONS),
        *_layer_norm.layer_normalization_rules,
    ]  # fmt: skip
    if opset_version >= _RMS_NORMALIZATION_OPSET:
        rules += _rms_normalization.rms_normalization_rules
    else:  # what onnxruntime fuses into its own RMS norm
        rules += _DivisionBySquareRoot.rule().commute()
    if target == OPTIMIZE_ONNXRUNTIME:
        return rules  # its attention fusions match MatMul + Add
    rules.append(_LinearAsGemm.rule())
    if opset_version >= _GELU_OPSET:
        return [
            *rules,
            pattern.RewriteRule(erfgelu.erf_gelu_pattern_2, _gelu),
            _TanhGelu.rule(),
        ]
    return [*rules, _GeluAsOnnxruntimeFuses.rule()]


def _gelu(op, x):
    return op.Gelu(x)


class _TanhGelu(pattern.RewriteRuleClassBase):
    """GELU's tanh approximation, ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``, with its products and
    sums in any order and grouping (torchlib's; transformers' NewGELU of GPT-2, GPT-J, GPT-Neo, …) or
    with ``√(2/π)·x·(1 + 0.044715·x²)`` inside (FastGELU's), is ``Gelu(approximate="tanh")``. Matched
    by the factors of the ``Mul`` nodes it multiplies out, not by one pattern per arrangement."""

    def pattern(self, op, a, b):
        return op.Mul(a, b)

    def check(self, context, a, b) -> pattern.MatchResult:
        result = pattern.MatchResult()
        if _tanh_gelu_input(_factors(a) + _factors(b)) is None:
            return result.fail("Not GELU's tanh approximation.")
        return result

    def rewrite(self, op, a, b):
        return op.Gelu(_tanh_gelu_input(_factors(a) + _factors(b)), approximate="tanh")


def _tanh_gelu_input(factors: list[ir.Value]) -> ir.Value | None:
    """x, if `factors` multiply to ``0.5·x·(1 + tanh(…))`` of `_TanhGelu`."""
    rest = _without_constant(factors, 0.5)
    for i, sum_ in enumerate(rest or []):
        addends = _addends(sum_)
        tanh = next((v.producer() for v in addends if v.producer() and v.producer().op_type == "Tanh"), None)
        if tanh is None or not _same(_without_constant(addends, 1.0) or [], [tanh.outputs[0]]):
            continue
        x = _tanh_argument_input(tanh.inputs[0])
        others = rest[:i] + rest[i + 1 :]
        if x is not None and (_same(others, [x]) or _same(others, _factors(x))):
            return x
    return None


def _tanh_argument_input(argument: ir.Value) -> ir.Value | None:
    """x, if `argument` is ``√(2/π)·(x + 0.044715·x³)`` or ``√(2/π)·x·(1 + 0.044715·x²)``."""
    rest = _without_constant(_factors(argument), math.sqrt(2 / math.pi)) or []
    if len(rest) == 1:  # x + 0.044715·x³
        for x, cube in itertools.permutations(_addends(rest[0])):
            if _is_scaled_power(cube, x, 3):
                return x
    if len(rest) == 2:  # x·(1 + 0.044715·x²)
        for x, sum_ in itertools.permutations(rest):
            square = _without_constant(_addends(sum_), 1.0)
            if square is not None and len(square) == 1 and _is_scaled_power(square[0], x, 2):
                return x
    return None


def _is_scaled_power(value: ir.Value, x: ir.Value, n: int) -> bool:
    """Whether `value` is ``0.044715·x**n``, its power as n factors x (or x's own factors) or ``Pow(x, n)``."""
    powers = _without_constant(_factors(value), 0.044715)
    if powers is None:
        return False
    if _same(powers, [x] * n) or _same(powers, _factors(x) * n):
        return True
    node = powers[0].producer() if len(powers) == 1 else None
    return (
        node is not None
        and node.op_type == "Pow"
        and node.inputs[0] is x
        and _ir_utils.is_singleton_value(node.inputs[1], n)
    )


def _factors(value: ir.Value, depth: int = _GELU_PRODUCT_DEPTH) -> list[ir.Value]:
    """The factors a tree of ``Mul`` nodes (`depth` deep at most) multiplies to `value` (`value` itself if
    no ``Mul`` makes it). The limit bounds the work on long products, which no GELU has."""
    node = value.producer()
    if node is None or node.op_type != "Mul" or node.domain != "" or depth == 0:
        return [value]
    return [factor for input_ in node.inputs for factor in _factors(input_, depth - 1)]


def _addends(value: ir.Value) -> list[ir.Value]:
    """The two inputs of the ``Add`` that makes `value` (none if another op makes it)."""
    node = value.producer()
    return list(node.inputs) if node is not None and node.op_type == "Add" and node.domain == "" else []


def _without_constant(values: list[ir.Value], constant: float) -> list[ir.Value] | None:
    """`values` less one that is the scalar `constant`, or None if none is."""
    for i, value in enumerate(values):
        if _ir_utils.is_singleton_value(value, constant, rtol=1e-5):
            return values[:i] + values[i + 1 :]
    return None


def _same(a: list[ir.Value], b: list[ir.Value]) -> bool:
    """Whether two lists hold the same values (by identity) as many times, in any order."""
    return sorted(map(id, a)) == sorted(map(id, b))


class _GeluAsOnnxruntimeFuses(pattern.RewriteRuleClassBase):
    """torchlib's GELU, ``x * (0.5 * (erf(x / √2) + 1))``, as ``(x * (erf(x / √2) + 1)) * 0.5``: the same
    ops and constants, in the order onnxruntime's GeluFusion recognizes."""

    def pattern(self, op, x, sqrt2, one, half):
        return op.Mul(x, op.Mul(half, op.Add(op.Erf(op.Div(x, sqrt2)), one)))

    def check(self, context, x, sqrt2, one, half) -> pattern.MatchResult:
        result = pattern.MatchResult()
        for value, expected in ((sqrt2, 2**0.5), (one, 1.0), (half, 0.5)):
            if not _ir_utils.is_singleton_value(value, expected, rtol=1e-3):
                return result.fail(f"Not the constant {expected}.", value)
        return result

    def rewrite(self, op, x, sqrt2, one, half):
        return op.Mul(op.Mul(x, op.Add(op.Erf(op.Div(x, sqrt2)), one)), half)


class _ReshapeDropAllowzero(pattern.RewriteRuleClassBase):
    """``Reshape(allowzero=1)`` to a constant shape without zeros: ``allowzero`` changes nothing there,
    and onnxruntime merges only reshapes without it."""

    def pattern(self, op, x, shape):
        return op.Reshape(x, shape, allowzero=1)

    def check(self, context, x, shape) -> pattern.MatchResult:
        result = pattern.MatchResult()
        value = ir.convenience.get_const_tensor(shape)
        if value is None or (value.numpy() == 0).any():
            return result.fail("The shape is not a constant without zeros.", shape)
        return result

    def rewrite(self, op, x, shape):
        return op.Reshape(x, shape)


class _SwapLastAxes(pattern.RewriteRuleClassBase):
    """torchlib's attention transposes the key as Reshape to 3-D, Transpose, Reshape back: that is a
    Transpose of the last two axes (when the shapes show it), which onnxruntime folds into the MatMul."""

    def pattern(self, op, x, flat_shape, shape):
        flat = op.Reshape(x, flat_shape, _outputs=["flat"])
        return op.Reshape(op.Transpose(flat, perm=[0, 2, 1]), shape, _outputs=["out"])

    def check(self, context, x, flat, out, **_) -> pattern.MatchResult:
        result = pattern.MatchResult()
        dims = [known_dims(v) for v in (x, flat, out)]
        if any(d is None for d in dims):
            return result.fail("A shape is not known.")
        x_dims, flat_dims, out_dims = dims
        if len(x_dims) < 3 or flat_dims[1:] != x_dims[-2:] or out_dims != [*x_dims[:-2], x_dims[-1], x_dims[-2]]:
            return result.fail("Not a swap of the last two axes.")
        return result

    def rewrite(self, op, x, **_):
        rank = x.shape.rank()
        return op.Transpose(x, perm=[*range(rank - 2), rank - 1, rank - 2])


class _UnmaskedSoftmax(pattern.RewriteRuleClassBase):
    """torchlib's attention with a Boolean mask that masks nothing (all True, as Hugging Face models pass
    without padding): folded, the mask adds zeros and the softmax is followed by a guard against the
    NaNs of fully masked rows. Both go: the softmax of the scores, as torchlib's attention without a mask."""

    def pattern(self, op, scores, zeros, zero):
        weights = op.Softmax(op.Add(scores, zeros), _outputs=["weights"])
        return op.Where(op.IsNaN(weights), zero, weights)

    def check(self, context, scores, zeros, zero, **_) -> pattern.MatchResult:
        result = pattern.MatchResult()
        mask = ir.convenience.get_const_tensor(zeros)
        if mask is None or mask.numpy().any():
            return result.fail("The mask is not a constant of zeros.", zeros)
        if not _broadcasts_into(mask.shape, scores.shape):
            return result.fail("Adding the mask would change the scores' shape.", zeros)
        if not _ir_utils.is_singleton_value(zero, 0.0, rtol=0.0):
            return result.fail("NaNs are not replaced by zero.", zero)
        return result

    def rewrite(self, op, scores, weights, **_):
        return op.Softmax(scores, axis=weights.producer().attributes.get_int("axis", -1))


class _ReshapeOfReshape(pattern.RewriteRuleClassBase):
    """A Reshape of a Reshape to a constant shape without 0s: the outer one alone. onnxscript's rule
    for this writes the shape it computes as an initializer named after the Reshape's output, and
    onnxscript's rewriter then replaces an initializer of that name that other nodes still read
    (timm's GC ViT and DaViT with a dynamic batch: a model onnx.checker rejects)."""

    def pattern(self, op, x, inner, shape):
        return op.Reshape(
            op.Reshape(x, inner, _allow_other_attributes=True), shape, _allow_other_attributes=True, _outputs=["out"]
        )

    def check(self, context, x, inner, shape, out, **_) -> pattern.MatchResult:
        result = pattern.MatchResult()
        value = ir.convenience.get_const_tensor(shape)
        if value is None or (value.numpy() == 0).any():
            return result.fail("The outer shape is not a constant without 0s.", shape)
        return result

    def rewrite(self, op, x, shape, **_):
        return op.Reshape(x, shape)


class _NoOpReshape(pattern.RewriteRuleClassBase):
    """A Reshape to the shape its input has (torchlib's views of static shapes that are already right)."""

    def pattern(self, op, x, shape):
        return op.Reshape(x, shape, _allow_other_attributes=True, _outputs=["out"])

    def check(self, context, x, out, **_) -> pattern.MatchResult:
        return _same_known_shape(x, out)

    def rewrite(self, op, x, **_):
        return op.Identity(x)


def _same_known_shape(x: ir.Value, out: ir.Value) -> pattern.MatchResult:
    """A match where `out` is known to have `x`'s shape."""
    dims = known_dims(x)
    if dims is None or dims != known_dims(out):
        return pattern.MatchResult().fail("The shape is not known to stay the same.")
    return pattern.MatchResult()


class _NoOpExpand(pattern.RewriteRuleClassBase):
    """An Expand to the shape its input has (transformers' mask, expanded after the ``&`` that broadcast it)."""

    def pattern(self, op, x, shape):
        return op.Expand(x, shape, _outputs=["out"])

    def check(self, context, x, out, **_) -> pattern.MatchResult:
        return _same_known_shape(x, out)

    def rewrite(self, op, x, **_):
        return op.Identity(x)


class _NoOpSlice(pattern.RewriteRuleClassBase):
    """A Slice with unit steps whose result has its input's shape, i.e. the whole input (torchlib's
    slice of an RNN's initial state by layer, when there is one layer)."""

    def pattern(self, op, x, starts, ends):
        return op.Slice(x, starts, ends, _allow_other_inputs=True, _outputs=["out"])

    def check(self, context, x, out, **_) -> pattern.MatchResult:
        result = pattern.MatchResult()
        steps = out.producer().inputs[4] if len(out.producer().inputs) > 4 else None
        step_values = None if steps is None else ir.convenience.get_const_tensor(steps)
        if steps is not None and (step_values is None or (step_values.numpy() != 1).any()):
            return result.fail("The steps are not all 1.", steps)
        return _same_known_shape(x, out)

    def rewrite(self, op, x, **_):
        return op.Identity(x)


class _ReshapeOfUnitAxesTranspose(pattern.RewriteRuleClassBase):
    """A Transpose that moves only axes of size 1 keeps the elements' order: before a Reshape it can go
    (torchlib's unidirectional LSTM/GRU output, whose direction axis is moved, then merged)."""

    def pattern(self, op, x, shape):
        return op.Reshape(op.Transpose(x, _outputs=["moved"]), shape, _allow_other_attributes=True, _outputs=["out"])

    def check(self, context, x, moved, shape, out, **_) -> pattern.MatchResult:
        result = pattern.MatchResult()
        target = ir.convenience.get_const_tensor(shape)
        if not out.producer().attributes.get_int("allowzero", 0) and (target is None or (target.numpy() == 0).any()):
            return result.fail("A 0 in the shape may copy a dimension of the Transpose's result.", shape)
        if x.shape is None:
            return result.fail("The input's rank is not known.")
        perm = moved.producer().attributes.get_ints("perm", None) or list(reversed(range(x.shape.rank())))
        kept = [axis for axis in perm if x.shape[axis] != 1]
        if kept != sorted(kept):
            return result.fail("The Transpose moves an axis whose size is not 1.")
        return result

    def rewrite(self, op, x, shape, out, **_):
        return op.Reshape(x, shape, allowzero=out.producer().attributes.get_int("allowzero", 0))


class _LinearAsGemm(pattern.RewriteRuleClassBase):
    """A linear layer on a batch of static shape, ``MatMul(x, w) + b`` (float), as ``Gemm`` on ``x``
    flattened to 2-D, reshaped back. onnxruntime makes that Gemm itself, after merging reshapes: made
    here, the reshapes merge with the views around the layer, and q, k and v share one."""

    def pattern(self, op, x, w, b):
        return op.Add(op.MatMul(x, w), b)

    def check(self, context, x, w, b, **_) -> pattern.MatchResult:
        result = pattern.MatchResult()
        dims = known_dims(x)
        if x.dtype != ir.DataType.FLOAT or dims is None or len(dims) < 3 or not all(isinstance(d, int) for d in dims):
            return result.fail("Not a float batch of static shape.", x)
        if w.shape is None or w.shape.rank() != 2 or b.shape is None or list(b.shape) != [w.shape[1]]:
            return result.fail("Not a 2-D weight and a bias of its columns.")
        return result

    def rewrite(self, op, x, w, b, **_):
        flat = op.Reshape(x, op.Constant(value_ints=[-1, x.shape[-1]]))
        return op.Reshape(op.Gemm(flat, w, b), op.Constant(value_ints=[*x.shape[:-1], w.shape[1]]))


class _WithTrue(pattern.RewriteRuleClassBase):
    """``Equal(b, True)`` and ``And(b, True)`` of a Boolean ``b`` are ``b`` (torchlib's signed floor
    division, once the divisor's sign is folded; transformers' causal mask, ``True & (kv <= q)``)."""

    def __init__(self, op_type: str) -> None:
        super().__init__(name=f"{op_type}True")
        self._op_type = op_type

    def pattern(self, op, b, true):
        return getattr(op, self._op_type)(b, true)

    def check(self, context, b, true) -> pattern.MatchResult:
        result = pattern.MatchResult()
        if (
            b.dtype != ir.DataType.BOOL
            or not _ir_utils.is_singleton_value(true, True)
            or b.shape is None
            or true.shape is None
        ):
            return result.fail("Not a Boolean compared with True.")
        if true.shape.rank() > b.shape.rank():
            return result.fail("True would add axes.", true)
        return result

    def rewrite(self, op, b, true):
        return op.Identity(b)


class _DivisionBySquareRoot(pattern.RewriteRuleClassBase):
    """``x * Reciprocal(Sqrt(v))`` (torchlib's ``rsqrt``, as RMS norms use it) is ``x / Sqrt(v)``, the
    form onnxruntime's simplified layer norm fusion matches (a LLaMA RMS norm: 6 nodes, then 1)."""

    def pattern(self, op, x, v):
        return op.Mul(x, op.Reciprocal(op.Sqrt(v)))

    def rewrite(self, op, x, v):
        return op.Div(x, op.Sqrt(v))


_REDUCTIONS = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd")


class _SqueezedReduction(pattern.RewriteRuleClassBase):
    """A reduction over all axes that keeps them, then squeezed (torchlib's ``mean`` of a whole tensor),
    is the reduction that does not keep them."""

    def __init__(self, reduction: str) -> None:
        super().__init__(f"Squeezed{reduction}")
        self.reduction = reduction

    def pattern(self, op, x):
        return op.Squeeze(
            getattr(op, self.reduction)(x, keepdims=1, noop_with_empty_axes=0, _allow_other_attributes=False)
        )

    def rewrite(self, op, x):
        return getattr(op, self.reduction)(x, keepdims=0)


def _broadcasts_into(shape: ir.Shape, target: ir.Shape | None) -> bool:
    """Whether a tensor of `shape` broadcasts into `target` without changing it (numpy rules)."""
    if target is None or len(shape) > len(target):
        return False
    return all(d == 1 or d == t for d, t in zip(reversed(list(shape)), reversed(list(target))))


def known_dims(value: ir.Value) -> list[int | str] | None:
    """The dims of `value`'s shape (symbolic ones by name), or None when any is unknown."""
    if value.shape is None:
        return None
    dims = [d if isinstance(d, int) else d.value for d in value.shape]
    return None if None in dims else dims
