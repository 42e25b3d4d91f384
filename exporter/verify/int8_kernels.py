"""Whether a divergence of a quantized model comes from onnxruntime's int8 kernels.

onnxruntime fuses each QuantizeLinear/DequantizeLinear pair around a Conv, MatMul or Gemm into an int8
kernel (QLinearConv, QGemm, …), which need not compute what the float ops between the pairs do: on an x86
CPU without VNNI its u8×s8 dot products add pairs of products in 16 bits, which saturate (activations
quantized to 7 bits, or weights, cannot), and anywhere it rounds requantized values in other places.
`exporter.verify.accuracy` runs a diverging quantized model with that fusion off to tell.
"""

from __future__ import annotations

import functools

import onnx_ir as ir

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
QDQ_FUSION_OFF = {"session.disable_quant_qdq": "1"}  # onnxruntime's session config: keep the pairs as they are
_VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def has_qdq(model: ir.Model) -> bool:
    """Whether the model quantizes anything (a QuantizeLinear or DequantizeLinear in its graph or functions)."""
    graphs = [model.graph, *model.functions.values()]
    return any(node.op_type in QDQ_OPS and node.domain == "" for graph in graphs for node in graph)


def may_saturate(model: ir.Model) -> bool:
    """Whether onnxruntime's int8 kernels may saturate on this CPU: an x86 CPU without VNNI, and activations
    quantized to the whole uint8 range (a QuantizeLinear to uint8 not clipped to fewer values after)."""
    if not saturates_u8s8():
        return False
    for graph in (model.graph, *model.functions.values()):
        for node in graph:
            if node.op_type != "QuantizeLinear" or node.domain != "" or len(node.inputs) < 3:
                continue
            zero_point = node.inputs[2]
            if zero_point is None or zero_point.dtype != ir.DataType.UINT8:
                continue
            if not all(use.op_type == "Clip" for use, _ in node.outputs[0].uses()):
                return True
    return False


SATURATION = (
    " With onnxruntime's QDQ fusion off (session config `session.disable_quant_qdq`), it matches: the difference is "
    "in the int8 kernels onnxruntime fuses the QuantizeLinear/DequantizeLinear pairs into, whose u8×s8 dot products "
    "can saturate on this CPU (x86 without VNNI). Quantize activations to 7 bits (PT2E: the quantizer config's "
    "reduce_range=True) or run on a CPU with VNNI."
)


@functools.cache
def saturates_u8s8() -> bool:
    """Whether this is an x86 CPU without VNNI (its flags in /proc/cpuinfo; False where they cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), None)
    except OSError:
        return False
    return flags is not None and "avx2" in flags and not _VNNI_FLAGS.intersection(flags)
