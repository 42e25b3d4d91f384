"""The weights' precision of a generation export: int4/int8 MatMul weights as onnxruntime's
MatMulNBits (blocks quantized by onnxruntime's own ``DefaultWeightOnlyQuantizer``), or fp16
(onnxruntime's float16 converter).

The MatMuls are rewritten on the IR, where the weights are: handing onnxruntime's
``MatMulNBitsQuantizer`` a protobuf of the model copied every weight twice (serialized, then read
back), 3-5 s of a 20 s export of a 600 MB model, and quantized the whole model again for each
measure of the quality report. Blocks quantized once are reused (`quantize`'s ``cache``).

`weight_groups` names the quantizable MatMuls by what they belong to (a decoder layer's module path,
``lm_head``), so that the quality report can keep the most sensitive groups at a higher precision.
A ``Gemm`` with a constant weight (GPT-2's ``Conv1D``, ``x @ W + b``, exports as one) is one of them:
it becomes ``MatMulNBits`` + ``Add``.

An output head tied to the input embedding (Llama 3.2's, Qwen2.5's, GPT-2's: the graph's head reads
``Transpose(E)`` of the embedding's ``E``) is quantized like the others (as ``E.T``), and the embedding then reads
the same quantized weights (``GatherBlockQuantized``), as the genai builder writes such models
(`_share_with_embeddings`): the folder keeps one copy of ``E``, at the lower precision.
"""

from __future__ import annotations

import collections
import json
import logging
import re
from collections.abc import Collection
from typing import Any

import numpy as np
import onnx_ir as ir

from exporter.constants import METADATA_FX_NODE, METADATA_MODULE_STACK
from exporter.generation.graph_constants import initializer, int64_initializer
from exporter.options import ExportOptions

_HEAD = "lm_head"
_LAYER = re.compile(r"\.\d+$")  # a ModuleList child: a decoder layer
_BITS = {"int4": 4, "int8": 8}
_MS = "com.microsoft"
# ATen ops whose translation compares with constants rounded for fp32, left in fp32 by the float16 converter:
# torchlib's histc moves its last bin edge up by one fp32 step so that the maximum falls in the last bin;
# halved, the edge is the maximum, which then falls in no bin (a Mixtral's expert counts went wrong)
_FP32_ONLY = ("aten.histc.",)
Blocks = tuple[np.ndarray, np.ndarray, np.ndarray]  # a weight quantized: packed, scales, zero points


def weight_groups(model: ir.Model) -> dict[str, list[str]]:
    """The quantizable MatMul nodes (a constant 2-D weight; and the Gemms `_as_matmul` takes) of
    `model`'s graphs (an ``If``'s branches too) by group: the decoder layer they belong to (its module
    path), ``lm_head`` for the one producing the logits, or their own module; in graph order."""
    groups: dict[str, list[str]] = {}
    logits = model.graph.outputs[0]
    for node in _nodes(model.graph):
        if node.domain != "" or not (node.op_type == "MatMul" and len(node.inputs) == 2 or _as_matmul(node)):
            continue
        weight = node.inputs[1]
        if weight is None or (weight.const_value is None and _tied(weight) is None) or len(weight.shape or ()) != 2:
            continue
        group = _HEAD if _feeds(node, logits) else _module_group(node)
        groups.setdefault(group, []).append(node.name)
    return groups


def _as_matmul(node: ir.Node) -> bool:
    """Whether `node` is a Gemm that is ``A @ B (+ C)``: no scaling, A not transposed, B constant and
    not shared."""
    if node.op_type != "Gemm":
        return False
    attrs = {name: attr.value for name, attr in node.attributes.items()}
    weight = node.inputs[1]
    plain = attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0 and not attrs.get("transA", 0)
    return plain and weight is not None and weight.const_value is not None and len(weight.uses()) == 1


def _tied(weight: ir.Value) -> ir.Value | None:
    """The 2-D initializer whose transpose `weight` is (a head tied to the embedding), or None."""
    producer = weight.producer()
    if producer is None or (producer.op_type, producer.domain) != ("Transpose", ""):
        return None
    source = producer.inputs[0]
    perm = producer.attributes.get_ints("perm", [1, 0])
    if source is None or source.const_value is None or len(source.shape or ()) != 2 or list(perm) != [1, 0]:
        return None
    return source


def _feeds(node: ir.Node, output: ir.Value) -> bool:
    """Whether `node` computes `output` (directly or through element-wise/shape ops of one input)."""
    value = output
    for _ in range(4):
        producer = value.producer()
        if producer is None:
            return False
        if producer is node:
            return True
        value = producer.inputs[0]
    return False


def _module_group(node: ir.Node) -> str:
    stack = json.loads(node.metadata_props.get(METADATA_MODULE_STACK, "[]"))
    paths = [entry[1].removeprefix("model.") for entry in stack if entry[1]]  # the CausalLMWithCache wrapper's `model.`
    layers = [p for p in paths if _LAYER.search(p)]
    return layers[-1] if layers else (paths[-1] if paths else node.name)


def quantize(
    model: ir.Model,
    options: ExportOptions,
    groups: dict[str, list[str]],
    keep: Collection[str] = (),
    only: Collection[str] | None = None,
    cache: dict[tuple[str, bool, int], Blocks] | None = None,
) -> ir.Model:
    """A copy of `model` (its fp32 weights shared, not copied) at `options.precision`; the groups in
    `keep` stay one step higher: int8 in an int4 export, fp32 in an int8 one. The head is int8 in an
    int4 export with `options.int8_head`. With `only`, the other groups stay fp32. `cache` keeps the
    quantized blocks of each weight between calls on one model."""
    if options.precision == "fp32":
        return model
    if options.precision == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        proto = ir.serde.serialize_model(model)
        model = ir.serde.deserialize_model(
            convert_float_to_float16(
                proto, keep_io_types=True, disable_shape_infer=True, node_block_list=_fp32_only_nodes(model)
            )
        )
        model.graph.sort()  # the converter appends the inputs' Casts after the nodes that read them (an If's branches)
        return model
    bits = _BITS[options.precision]
    if only is not None:
        groups = {g: nodes for g, nodes in groups.items() if g in only}
    higher = set(keep) | ({_HEAD} if options.int8_head and bits == 4 else set())
    at_bits = {n: bits for g, nodes in groups.items() if g not in higher for n in nodes}
    at_8_bits = {n: 8 for g in higher & set(groups) for n in groups[g]} if bits == 4 else {}
    model = model.clone()
    _MatMulNBits(model, options, cache if cache is not None else {}).rewrite({**at_bits, **at_8_bits})
    return model


def _fp32_only_nodes(model: ir.Model) -> list[str]:
    """The names of the nodes translated from `_FP32_ONLY` ops."""
    return [
        node.name
        for node in ir.traversal.RecursiveGraphIterator(model.graph)
        if any(op in node.metadata_props.get(METADATA_FX_NODE, "") for op in _FP32_ONLY)
    ]


class _MatMulNBits:
    """Rewrites MatMuls (and plain Gemms) with a constant weight as ``MatMulNBits`` in one model."""

    def __init__(self, model: ir.Model, options: ExportOptions, cache: dict[tuple[str, bool, int], Blocks]):
        self.model, self.graph, self.options, self.cache = model, model.graph, options, cache
        self.quantized: dict[tuple[str, bool, int], tuple[ir.Value, ...]] = {}  # in this graph
        # the tied weights `E` read as ``Transpose(E)`` by one MatMul only (shared ones stay as they are)
        readers = collections.Counter(
            _tied(n.inputs[1]) for n in _nodes(self.graph) if n.op_type == "MatMul" and n.domain == "" and n.inputs[1]
        )
        self.untied = {e for e, count in readers.items() if e is not None and count == 1}

    def rewrite(self, bits_of: dict[str, int]) -> None:
        """Each node named in `bits_of` at its number of bits; then the weights it read go where unused,
        and each embedding lookup of a tied head reads the head's blocks."""
        replaced: list[ir.Value] = []
        heads: dict[ir.Value, tuple[ir.Value, ...]] = {}  # a tied `E`: its head's blocks
        for node in [n for n in _nodes(self.graph) if n.name in bits_of]:
            weight = node.inputs[1]
            tied = _tied(weight)
            if tied is not None and tied not in self.untied:
                continue
            source, transposed, bits = tied or weight, tied is not None or _trans_b(node), bits_of[node.name]
            rows, columns = source.shape
            blocks = self._blocks(source, transposed, bits)
            self._replace(node, blocks, bits, *((columns, rows) if transposed else (rows, columns)))
            replaced.append(weight)
            if tied is not None:
                heads[tied] = blocks
        if replaced:
            self.model.opset_imports.setdefault(_MS, 1)
        for embedding, blocks in heads.items():
            _share_with_embeddings(self.graph, embedding, blocks, self.options.block_size)
        for value in replaced:
            _remove_if_unused(self.graph, value)

    def _blocks(self, weight: ir.Value, transposed: bool, bits: int) -> tuple[ir.Value, ...]:
        """The initializers of `weight` (read as its transpose if `transposed`) quantized: packed blocks,
        scales and, unless symmetric, zero points (onnxruntime's names: ``W_Q4``, ``W_scales``, …)."""
        key = (weight.name, transposed, bits)
        if key not in self.quantized:
            if key not in self.cache:
                array = weight.const_value.numpy()
                self.cache[key] = _quantizer(self.options, bits).qbits_block_quant(
                    np.ascontiguousarray(array.T if transposed else array)
                )
            packed, scales, zero_points = self.cache[key]
            stem = f"{weight.name}.transposed" if transposed else weight.name
            arrays = {f"{stem}_Q{bits}": packed, f"{stem}_scales": scales}
            if not self.options.symmetric:
                arrays[f"{stem}_zero_points"] = zero_points
            self.quantized[key] = tuple(
                initializer(self.graph, ir.Tensor(array, name=name)) for name, array in arrays.items()
            )
        return self.quantized[key]

    def _replace(self, node: ir.Node, blocks: tuple[ir.Value, ...], bits: int, k: int, n: int) -> None:
        """`node` as ``MatMulNBits`` of a (`k`, `n`) weight's `blocks` (and ``Add`` of a Gemm's bias)."""
        attributes = {"K": k, "N": n, "bits": bits, "block_size": self.options.block_size}
        if self.options.accuracy_level:  # optional, and not every execution provider takes it
            attributes["accuracy_level"] = self.options.accuracy_level
        new = [ir.node("MatMulNBits", [node.inputs[0], *blocks], attributes, domain=_MS, name=f"{node.name}_Q{bits}")]
        if node.op_type == "Gemm" and len(node.inputs) > 2 and node.inputs[2] is not None:
            new.append(ir.node("Add", [new[0].outputs[0], node.inputs[2]], name=f"{node.name}_bias"))
        ir.convenience.replace_nodes_and_values(node.graph, node, [node], new, [node.outputs[0]], [new[-1].outputs[0]])


def _nodes(graph: ir.Graph) -> list[ir.Node]:
    """The nodes of `graph` and of its nodes' subgraphs."""
    return list(ir.traversal.RecursiveGraphIterator(graph))


def _trans_b(node: ir.Node) -> bool:
    return node.op_type == "Gemm" and bool(node.attributes.get_int("transB", 0))


def _quantizer(options: ExportOptions, bits: int) -> Any:
    mnq = _quantizer_module()
    config = mnq.DefaultWeightOnlyQuantConfig(
        block_size=options.block_size, is_symmetric=options.symmetric, accuracy_level=options.accuracy_level, bits=bits
    )
    return mnq.DefaultWeightOnlyQuantizer(config)


def _remove_if_unused(graph: ir.Graph, value: ir.Value) -> None:
    """`value` gone if nothing reads it any more, with the ``Transpose`` that made it (and so on up);
    `graph` is the main graph, which holds the initializers."""
    while value is not None and not value.uses() and not value.is_graph_output():
        producer = value.producer()
        if producer is not None:
            source = producer.inputs[0]
            producer.graph.remove(producer, safe=True)  # which detaches its inputs
            value = source
        else:
            if value.is_initializer():
                graph.initializers.pop(value.name)
            return


def _share_with_embeddings(graph: ir.Graph, embedding: ir.Value, blocks: tuple[ir.Value, ...], block_size: int) -> None:
    """Each lookup (``Gather`` on axis 0) of the tied `embedding` reads its head's quantized `blocks`
    instead: ``GatherBlockQuantized`` of them seen as one row per token; then `embedding` goes. A
    hidden size the blocks do not divide (MatMulNBits pads it) keeps `embedding`."""
    rows, hidden = embedding.shape
    lookups = [
        node
        for node in graph
        if node.op_type == "Gather" and node.domain == "" and node.inputs[0] is embedding
        and node.attributes.get_int("axis", 0) == 0
    ]  # fmt: skip
    if not lookups or hidden % block_size:
        return
    packed = blocks[0]
    bits = 8 * packed.shape[2] // block_size
    shape = int64_initializer(graph, f"{packed.name}.rows.shape", [rows, hidden * bits // 8])
    reshape = ir.node("Reshape", [packed, shape], name=f"{packed.name}.rows")
    reshape.outputs[0].name = f"{packed.name}.rows"
    graph.insert_before(lookups[0], reshape)
    attributes = {"gather_axis": 0, "quantize_axis": 1, "block_size": block_size, "bits": bits}
    for node in lookups:
        new = ir.node(
            "GatherBlockQuantized",
            [reshape.outputs[0], node.inputs[1], *blocks[1:]],
            attributes,
            domain=_MS,
            name=f"{node.name}_Q{bits}",
        )
        ir.convenience.replace_nodes_and_values(graph, node, [node], [new], [node.outputs[0]], [new.outputs[0]])
    _remove_if_unused(graph, embedding)


def _quantizer_module() -> Any:
    """onnxruntime's ``matmul_nbits_quantizer``, imported without its ``logging.basicConfig`` (a root
    handler at INFO on import) and with its per-node log at warnings only."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    from onnxruntime.quantization import matmul_nbits_quantizer

    root.setLevel(level)
    root.handlers[:] = handlers
    matmul_nbits_quantizer.logger.setLevel(logging.WARNING)
    return matmul_nbits_quantizer
