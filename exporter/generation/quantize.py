"""The weights' precision of a generation export: int4/int8 MatMul weights as onnxruntime's
MatMulNBits (onnxruntime's own ``MatMulNBitsQuantizer``), or fp16 (onnxruntime's float16 converter).

`weight_groups` names the quantizable MatMuls by what they belong to (a decoder layer's module path,
``lm_head``), so that the quality report can keep the most sensitive groups at a higher precision.
A ``Gemm`` with a constant weight (GPT-2's ``Conv1D``, ``x @ W + b``, exports as one) is one of them:
the quantizer takes MatMuls only, so it becomes ``MatMul`` + ``Add`` (`_gemms_as_matmuls`) first.

An output head tied to the input embedding (Llama 3.2's, Qwen2.5's, GPT-2's: the graph's head reads
``Transpose(E)`` of the embedding's ``E``) is quantized like the others, and the embedding then reads
the same quantized weights (``GatherBlockQuantized``), as the genai builder writes such models
(`_untie_heads`, `_share_with_embeddings`): the folder keeps one copy of ``E``, at the lower precision.
"""

from __future__ import annotations

import collections
import json
import logging
import re
from collections.abc import Collection
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from exporter.constants import METADATA_MODULE_STACK
from exporter.options import ExportOptions

_HEAD = "lm_head"
_LAYER = re.compile(r"\.\d+$")  # a ModuleList child: a decoder layer
_BITS = {"int4": 4, "int8": 8}


def weight_groups(model: ir.Model) -> dict[str, list[str]]:
    """The quantizable MatMul nodes (a constant 2-D weight; and the Gemms `_as_matmul` takes) of
    `model`'s main graph by group: the decoder layer they belong to (its module path), ``lm_head`` for
    the one producing the logits, or their own module; in graph order."""
    groups: dict[str, list[str]] = {}
    logits = model.graph.outputs[0]
    for node in model.graph:
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
    not shared (`_gemms_as_matmuls` transposes it in place when ``transB``)."""
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
    model: onnx.ModelProto,
    options: ExportOptions,
    groups: dict[str, list[str]],
    keep: Collection[str] = (),
    only: Collection[str] | None = None,
    in_place: bool = False,
) -> onnx.ModelProto:
    """`model` (fp32, weights in memory) at `options.precision`; the groups in `keep` stay one step
    higher: int8 in an int4 export, fp32 in an int8 one. The head is int8 in an int4 export with
    `options.int8_head`. With `only`, the other groups stay fp32. `model` is left as it is unless
    `in_place` (onnxruntime's tools rewrite the model they are given)."""
    if options.precision == "fp32":
        return model
    if not in_place:
        model, original = onnx.ModelProto(), model
        model.CopyFrom(original)
    if options.precision == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        return convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=True)
    bits = _BITS[options.precision]
    if only is not None:
        groups = {g: nodes for g, nodes in groups.items() if g in only}
    higher = set(keep) | ({_HEAD} if options.int8_head and bits == 4 else set())
    _gemms_as_matmuls(model, {n for nodes in groups.values() for n in nodes})
    at_bits = [n for g, nodes in groups.items() if g not in higher for n in nodes]
    at_8_bits = [n for g in higher & set(groups) for n in groups[g]] if bits == 4 else []
    untied = _untie_heads(model, {*at_bits, *at_8_bits})
    model = _matmul_nbits(model, options, bits, at_bits)
    model = _matmul_nbits(model, options, 8, at_8_bits)
    _share_with_embeddings(model, untied, options.block_size)
    return model


def _untie_heads(model: onnx.ModelProto, names: Collection[str]) -> dict[str, str]:
    """Give each MatMul named in `names` that reads ``Transpose(E)`` of an initializer its own weight
    ``E.T`` (the quantizer takes constant weights only), where it is the only MatMul reading ``E`` so
    (weights shared by several layers stay as they are); {that weight's name: E's name}."""
    initializers = {i.name: i for i in model.graph.initializer}
    transposes = {n.output[0]: n for n in model.graph.node if n.op_type == "Transpose" and n.domain == ""}
    readers = collections.Counter(
        transposes[n.input[1]].input[0] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in transposes
    )
    untied = {}
    for node in list(model.graph.node):  # a copy: an untied Transpose leaves the graph
        transpose = transposes.get(node.input[1]) if node.op_type == "MatMul" and node.name in names else None
        source = initializers.get(transpose.input[0]) if transpose is not None else None
        if source is None or len(source.dims) != 2 or readers[source.name] != 1:
            continue
        weight = f"{source.name}.transposed"
        array = np.ascontiguousarray(onnx.numpy_helper.to_array(source).T)
        model.graph.initializer.append(onnx.numpy_helper.from_array(array, weight))
        node.input[1] = weight
        untied[weight] = source.name
        if not any(transpose.output[0] in other.input for other in model.graph.node):
            model.graph.node.remove(transpose)
    return untied


def _share_with_embeddings(model: onnx.ModelProto, untied: dict[str, str], block_size: int) -> None:
    """Each embedding lookup (``Gather`` on axis 0) of a tied ``E`` (`untied`) reads its head's quantized
    weights instead: ``GatherBlockQuantized`` of the MatMulNBits weights seen as one row per token; then
    ``E`` goes. A head left in fp32, or a hidden size the blocks do not divide (MatMulNBits pads it),
    keeps ``E``."""
    heads = {n.input[1]: n for n in model.graph.node if n.op_type == "MatMulNBits"}
    for weight, source in untied.items():
        head = next((node for name, node in heads.items() if name.startswith(f"{weight}_Q")), None)
        if head is None:
            continue
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in head.attribute}
        lookups = [
            node
            for node in model.graph.node
            if node.op_type == "Gather" and node.domain == "" and node.input[0] == source
            and all(a.i == 0 for a in node.attribute if a.name == "axis")
        ]  # fmt: skip
        if not lookups or attributes["K"] % block_size:
            continue
        rows = f"{head.input[1]}.rows"
        shape = [attributes["N"], attributes["K"] * attributes["bits"] // 8]
        model.graph.initializer.append(onnx.helper.make_tensor(f"{rows}.shape", onnx.TensorProto.INT64, [2], shape))
        first = list(model.graph.node).index(lookups[0])
        for node in lookups:
            node.CopyFrom(
                onnx.helper.make_node(
                    "GatherBlockQuantized",
                    [rows, node.input[1], *head.input[2:]],
                    list(node.output),
                    name=f"{node.name}_Q{attributes['bits']}",
                    domain="com.microsoft",
                    gather_axis=0,
                    quantize_axis=1,
                    block_size=block_size,
                    bits=attributes["bits"],
                )
            )
        model.graph.node.insert(first, onnx.helper.make_node("Reshape", [head.input[1], f"{rows}.shape"], [rows]))
        if not any(source in node.input for node in model.graph.node):
            (initializer,) = [i for i in model.graph.initializer if i.name == source]
            model.graph.initializer.remove(initializer)


def _gemms_as_matmuls(model: onnx.ModelProto, names: Collection[str]) -> None:
    """The Gemms named in `names` as ``MatMul`` (the same name, for the quantizer) and, with a bias,
    ``Add``; a ``transB`` weight transposed in place (`_as_matmul`: it has no other use)."""
    initializers = {i.name: i for i in model.graph.initializer}
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        if node.op_type != "Gemm" or node.name not in names:
            nodes.append(onnx.NodeProto())
            nodes[-1].CopyFrom(node)
            continue
        if any(a.name == "transB" and a.i for a in node.attribute):
            weight = initializers[node.input[1]]
            transposed = np.ascontiguousarray(onnx.numpy_helper.to_array(weight).T)
            weight.CopyFrom(onnx.numpy_helper.from_array(transposed, weight.name))
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        product = f"{node.name}_product" if bias else node.output[0]
        nodes.append(onnx.helper.make_node("MatMul", node.input[:2], [product], name=node.name))
        if bias:
            nodes.append(onnx.helper.make_node("Add", [product, bias], [node.output[0]], name=f"{node.name}_bias"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def _matmul_nbits(model: onnx.ModelProto, options: ExportOptions, bits: int, nodes: list[str]) -> onnx.ModelProto:
    if not nodes:
        return model
    mnq = _quantizer_module()
    config = mnq.DefaultWeightOnlyQuantConfig(
        block_size=options.block_size,
        is_symmetric=options.symmetric,
        accuracy_level=options.accuracy_level,
        bits=bits,
    )
    # the quantizer takes every MatMul with a constant weight (`nodes_to_include` only adds to them)
    others = [n.name for n in model.graph.node if n.op_type == "MatMul" and n.name not in set(nodes)]
    quantizer = mnq.MatMulNBitsQuantizer(model, bits=bits, nodes_to_exclude=others, algo_config=config)
    quantizer.process()
    return quantizer.model.model


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
