"""The optimization of the ONNX passes: onnxscript's optimizer results kept, rewrites to the target
opset's ops and to what onnxruntime fuses, and ``optimize="onnxruntime"``'s contrib ops."""

from __future__ import annotations

import math

import corpus
import numpy as np
import onnx
import onnx.inliner
import onnx.numpy_helper
import onnx_ir as ir
import onnxruntime as ort
import pytest
import torch
from helpers import assert_matches_eager
from torch import nn
from transformers.activations import ACT2FN

import exporter
from exporter.onnx_passes.optimize import FusePass, OptimizePass


def _export(model: nn.Module, *args: torch.Tensor, **options) -> exporter.ExportOutput:
    export_output = exporter.dynamo_export(model, *args, export_options=exporter.ExportOptions(**options))
    onnx.checker.check_model(export_output.model_proto)
    assert_matches_eager(export_output, model, args, {}, atol=1e-5, rtol=1e-4)
    return export_output


def _op_types(proto: onnx.ModelProto) -> list[str]:
    """Op types of the main graph with the local functions inlined, as ``domain.op`` outside ONNX."""
    graph = onnx.inliner.inline_local_functions(proto).graph
    return [f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in graph.node]


def _onnxruntime_op_types(proto: onnx.ModelProto, tmp_path) -> list[str]:
    """Op types of the graph onnxruntime runs after its own graph optimizations."""
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return _op_types(onnx.load(options.optimized_model_filepath))


class LinearGelu(nn.Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.linear = nn.Linear(16, 32)
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.linear(x), approximate=self.approximate)


class WrittenOutLayerNorm(nn.Module):
    """Layer norm spelled out in tensor ops, as some models (and older code) write it."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(16) + 0.5)
        self.bias = nn.Parameter(torch.rand(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) * (x - mean)).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + 1e-5) * self.weight + self.bias


@pytest.mark.parametrize("name", ["hf_bert", "transformer_encoder", "cnn_batchnorm", "hf_wav2vec2", "lstm"])
def test_optimize_pass_gives_what_onnxscripts_optimizer_gives(name: str):
    """Trying each rewrite rule only where its root op matches, and inferring shapes for the whole
    model at once rather than node by node, change nothing in the result."""
    import onnxscript.optimizer

    model, args, kwargs = corpus.get(name).build()
    plain = exporter.dynamo_export(
        model, *args, **kwargs, export_options=exporter.ExportOptions(optimize=False, modularize=False)
    )
    ours, theirs = (ir.serde.deserialize_model(plain.model_proto) for _ in range(2))
    OptimizePass()(ours)
    onnxscript.optimizer.optimize_ir(theirs, inline=False)
    assert [n.op_type for n in ours.graph] == [n.op_type for n in theirs.graph]
    assert len(ours.graph) < len(ir.serde.deserialize_model(plain.model_proto).graph)


def test_gelu_is_fused_by_onnxruntime_at_opset_18(tmp_path):
    """torchlib's erf GELU, reordered, is what onnxruntime's GeluFusion recognizes."""
    export_output = _export(LinearGelu(), torch.randn(3, 16), opset_version=18)
    assert "Gelu" not in _op_types(export_output.model_proto)  # opset 18 has no Gelu
    fused = _onnxruntime_op_types(export_output.model_proto, tmp_path)
    assert "Erf" not in fused
    assert {"com.microsoft.Gelu", "com.microsoft.BiasGelu"} & set(fused)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_is_one_op_from_opset_20(approximate: str):
    export_output = _export(LinearGelu(approximate), torch.randn(3, 16), opset_version=20)
    ops = _op_types(export_output.model_proto)
    assert ops.count("Gelu") == 1
    assert not {"Erf", "Tanh"} & set(ops)
    gelu = next(
        n for n in onnx.inliner.inline_local_functions(export_output.model_proto).graph.node if n.op_type == "Gelu"
    )
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in gelu.attribute}
    assert attributes.get("approximate", b"none").decode() == approximate


class WrittenOutGelu(nn.Module):
    """A linear layer, then GELU's tanh approximation as a model's code writes it."""

    def __init__(self, gelu) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 32)
        self.gelu = gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gelu(self.linear(x))


def _shifted_gelu(x: torch.Tensor) -> torch.Tensor:
    """Not GELU: NewGELU's form with 0.04 for 0.044715."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.04 * torch.pow(x, 3.0))))


def _gelu_of_a_product(x: torch.Tensor) -> torch.Tensor:
    """GELU's tanh form of ``y = 2x`` (y itself made by a Mul), with its cube as ``y·y·y``."""
    y = x * 2.0
    return y * 0.5 * (1.0 + torch.tanh((y + y * y * y * 0.044715) * math.sqrt(2.0 / math.pi)))


@pytest.mark.parametrize(
    "gelu, fused",
    [
        (ACT2FN["gelu_new"], True),  # GPT-2, GPT-J, GPT-Neo: (0.5·x)·(1 + tanh(c·(x + 0.044715·x³)))
        (ACT2FN["gelu_fast"], True),  # tanh(x·c·(1 + 0.044715·x·x))
        (ACT2FN["gelu_pytorch_tanh"], True),  # F.gelu(approximate="tanh"): torchlib's arrangement
        (_gelu_of_a_product, True),
        (_shifted_gelu, False),
    ],
    ids=["gelu_new", "gelu_fast", "gelu_pytorch_tanh", "of_a_product", "shifted_constant"],
)
def test_tanh_gelu_written_out_is_one_op_from_opset_20(gelu, fused: bool):
    """GELU's tanh approximation in the arrangements models write it becomes ``Gelu(approximate="tanh")``;
    a formula with another constant stays as written (and still computes what eager does)."""
    export_output = _export(WrittenOutGelu(gelu), torch.randn(3, 16) * 3, opset_version=20)
    ops = _op_types(export_output.model_proto)
    assert ("Tanh" not in ops and ops.count("Gelu") == 1) == fused, ops


def test_a_long_product_is_not_searched_for_gelu():
    """The GELU rule reads products only as deep as a GELU's: a chain of 3000 ``Mul`` nodes (a model's
    unrolled loop) optimizes in one pass without recursing through all of it."""
    nodes = [onnx.helper.make_node("Mul", [f"v{i}", "w"], [f"v{i + 1}"]) for i in range(3000)]
    graph = onnx.helper.make_graph(
        nodes,
        "chain",
        [onnx.helper.make_tensor_value_info("v0", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("v3000", onnx.TensorProto.FLOAT, [2])],
        [onnx.numpy_helper.from_array(np.array([1.0001, 0.9999], dtype=np.float32), "w")],
    )
    model = ir.serde.deserialize_model(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 20)]))
    FusePass(20, True)(model)
    assert [n.op_type for n in model.graph] == ["Mul"] * 3000


def test_written_out_layer_norm_becomes_layer_normalization():
    ops = _op_types(_export(WrittenOutLayerNorm(), torch.randn(2, 5, 16)).model_proto)
    assert ops == ["LayerNormalization"]


class RmsNorm(nn.Module):
    """An RMS norm written with ``torch.rsqrt``, as LLaMA, Mistral and T5 write it."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def test_rms_norm_is_fused_by_onnxruntime_at_opset_18(tmp_path):
    """``x * rsqrt(v)`` is written ``x / Sqrt(v)``, the form onnxruntime's SimplifiedLayerNormFusion matches."""
    export_output = _export(RmsNorm(), torch.randn(2, 5, 16), opset_version=18)
    assert "Reciprocal" not in _op_types(export_output.model_proto)
    assert _onnxruntime_op_types(export_output.model_proto, tmp_path) == ["SimplifiedLayerNormalization"]
    model, args, kwargs = corpus.get("hf_llama_lm").build()
    llama = exporter.dynamo_export(model, *args, **kwargs)
    assert _onnxruntime_op_types(llama.model_proto, tmp_path).count("SimplifiedLayerNormalization") == 5


@pytest.mark.parametrize("dynamic", [False, True])
def test_constant_reshapes_do_not_allow_zero(dynamic: bool, tmp_path):
    """allowzero on a constant shape without zeros changes nothing but keeps onnxruntime from
    merging reshapes; transformer_encoder's attention then runs with as few nodes as TorchScript's."""
    model, args, kwargs = corpus.get("transformer_encoder").build()
    export_output = exporter.dynamo_export(
        model, *args, **kwargs, export_options=exporter.ExportOptions(dynamic_shapes=dynamic)
    )
    proto = onnx.inliner.inline_local_functions(export_output.model_proto)
    constants = {i.name: onnx.numpy_helper.to_array(i) for i in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type == "Reshape" and node.input[1] in constants and constants[node.input[1]].all():
            assert {a.name: a.i for a in node.attribute}.get("allowzero", 0) == 0, node.name
    if not dynamic:
        assert len(_onnxruntime_op_types(export_output.model_proto, tmp_path)) <= 67


def test_onnxruntime_option_fuses_into_contrib_ops_and_the_default_stays_portable():
    model, args, kwargs = corpus.get("hf_bert").build()
    default, fused = (
        exporter.dynamo_export(model, *args, **kwargs, export_options=exporter.ExportOptions(optimize=optimize))
        for optimize in (True, "onnxruntime")
    )
    assert not any(op.startswith("com.microsoft.") for op in _op_types(default.model_proto))
    ops = set(_op_types(fused.model_proto))
    assert {"com.microsoft.SkipLayerNormalization", "com.microsoft.MultiHeadAttention", "com.microsoft.BiasGelu"} <= ops
    assert not {"Erf", "Softmax"} & ops
    assert len(_op_types(fused.model_proto)) < 0.7 * len(_op_types(default.model_proto))


@pytest.mark.parametrize("value", ["ort", "onnx", 1, None])
def test_optimize_accepts_only_true_false_or_onnxruntime(value):
    with pytest.raises(ValueError, match="optimize"):
        exporter.ExportOptions(optimize=value)


def test_optimize_setting_is_on_or_off():
    """Settings (CLI flags, decorators, the editor) turn the optimizer on or off; the onnxruntime
    fusions are a Python option."""
    assert exporter.ExportOptions.from_settings({"optimize": False}).optimize is False
    with pytest.raises(ValueError, match="optimize"):
        exporter.ExportOptions.from_settings({"optimize": "onnxruntime"})


def test_rms_norm_is_one_op_at_opset_23():
    model, args, kwargs = corpus.get("hf_llama_lm").build()
    export_output = exporter.dynamo_export(
        model, *args, **kwargs, export_options=exporter.ExportOptions(opset_version=23)
    )
    onnx.checker.check_model(export_output.model_proto)
    assert _op_types(export_output.model_proto).count("RMSNormalization") == 5  # 2 layers x 2, and the final norm
    assert_matches_eager(export_output, corpus.get("hf_llama_lm").build()[0], args, kwargs, atol=1e-4, rtol=1e-3)


def test_attention_key_transpose_is_one_transpose(tmp_path):
    """torchlib's Reshape-Transpose-Reshape of the key becomes one Transpose, which onnxruntime
    folds into its MatMul: the attention runs with as few nodes as TorchScript's export."""
    model, args, kwargs = corpus.get("sdpa").build()
    export_output = _export(model, *args)
    graph = onnx.inliner.inline_local_functions(export_output.model_proto).graph
    perms = [list(onnx.helper.get_attribute_value(n.attribute[0])) for n in graph.node if n.op_type == "Transpose"]
    assert [0, 2, 1] not in perms  # the key's 3-D transpose
    assert len(_onnxruntime_op_types(export_output.model_proto, tmp_path)) <= 17


class MaskedAttention(nn.Module):
    """SDPA with a Boolean mask built in the model (Hugging Face builds an all-True one without padding)."""

    def __init__(self, masked_key: int | None) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.masked_key = masked_key

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.unflatten(-1, (2, 8)).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        mask = torch.ones(x.shape[0], 1, x.shape[1], x.shape[1], dtype=torch.bool)
        if self.masked_key is not None:
            mask[..., self.masked_key] = False
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_all_true_attention_mask_is_dropped():
    """A mask that masks nothing leaves the softmax of the scores, as torchlib's attention without a mask
    (no zeros added, no NaN guard); a mask that masks something stays."""
    x = torch.randn(2, 5, 16)
    ops = _op_types(_export(MaskedAttention(None), x).model_proto)
    assert not {"IsNaN", "Where", "Add"} & set(ops)  # the Linear's bias is in its Gemm
    masked = _op_types(_export(MaskedAttention(masked_key=1), x).model_proto)
    assert {"IsNaN", "Where"} <= set(masked)
    assert masked.count("Add") == 1


class ViewsAndSlices(nn.Module):
    """A view to the shape the tensor has, a slice of all of it, and one that is a real change."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        same = torch.relu(x).reshape(2, -1, 5).exp()[:, 0:3]
        return same.reshape(6, 5) + 1


def test_reshape_and_slice_to_the_same_shape_go():
    ops = _op_types(_export(ViewsAndSlices(), torch.randn(2, 3, 5)).model_proto)
    assert ops == ["Relu", "Exp", "Reshape", "Add"]


@pytest.mark.parametrize(("name", "transposes"), [("lstm", 2), ("gru_bidirectional", 3)])
def test_rnn_outputs_are_not_transposed_to_move_a_unit_axis(name: str, transposes: int):
    """torchlib moves the direction axis of ONNX's RNN output before merging it: with one direction
    that axis has size 1 and the Transpose goes (the LSTM's two); bidirectional, it stays. The initial
    state's slice to its one layer goes too."""
    model, args, kwargs = corpus.get(name).build()
    export_output = exporter.dynamo_export(model, *args, **kwargs)
    assert_matches_eager(export_output, corpus.get(name).build()[0], args, kwargs)
    ops = _op_types(export_output.model_proto)
    assert ops.count("Transpose") == transposes
    assert "Slice" not in ops


class ProjectHeads(nn.Module):
    """q, k and v projections of one input, each split into 2 heads (a view after each linear layer)."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(proj(x).unflatten(-1, (2, 8)) for proj in (self.q, self.k, self.v))


def test_linear_layers_on_static_batches_are_gemms_between_merged_reshapes():
    """Each linear layer is a Gemm on the input flattened once for all three; its reshape back
    merges with the view to heads. Dynamic or half-precision batches keep MatMul + Add."""
    ops = _op_types(_export(ProjectHeads(), torch.randn(2, 5, 16)).model_proto)
    assert sorted(ops) == ["Gemm"] * 3 + ["Reshape"] * 4
    dynamic = _op_types(_export(ProjectHeads(), torch.randn(2, 5, 16), dynamic_shapes=True).model_proto)
    assert "Gemm" not in dynamic
    assert dynamic.count("MatMul") == 3


def test_floor_division_and_whole_mean_lose_their_no_op_nodes():
    """torchlib's signed floor division compares a Boolean with a folded True, and its mean of a
    whole tensor keeps the axes then squeezes them: neither step is left."""

    def floor_and_mean(counts: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return counts // 3, x.mean()

    counts = torch.tensor([[-5, -4, -3, 7], [1, 2, 3, -1], [0, 9, -2, 5]])
    ops = _op_types(_export(floor_and_mean, counts, torch.randn(3, 4)).model_proto)
    assert sorted(ops) == sorted(["Less", "Mod", "Cast", "And", "Cast", "Div", "Sub", "ReduceMean"])


class CausalPaddingMask(nn.Module):
    """transformers' attention mask, reduced: ``True & (kv <= q)`` and each row's padding, expanded to
    the shape the ``&`` already broadcast it to."""

    def forward(self, scores: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        s, t = scores.shape[1], scores.shape[2]
        causal = torch.ones((), dtype=torch.bool) & (torch.arange(t)[None, :] <= torch.arange(s)[:, None] + (t - s))
        mask = (causal[None] & padding[:, None, :]).expand(scores.shape[0], s, t)
        return scores.masked_fill(~mask, float("-inf")).softmax(-1)


def test_a_mask_loses_its_and_with_true_and_its_expand_to_the_same_shape():
    """With dynamic sizes too: the shapes are compared by their symbolic dims."""
    scores, padding = torch.randn(2, 3, 5), torch.ones(2, 5, dtype=torch.bool)
    padding[1, :2] = False
    ops = _op_types(_export(CausalPaddingMask(), scores, padding, dynamic_shapes=True).model_proto)
    assert "Expand" not in ops and ops.count("And") == 1


def test_merged_reshapes_leave_every_shape_a_node_reads():
    """Reshape(Reshape(x, a), b) becomes Reshape(x, b) without a new initializer: onnxscript's rule
    names the one it writes "<output>/shape", and its rewriter then drops an existing initializer of
    that name other nodes still read (timm's GC ViT and DaViT with a dynamic batch)."""
    from exporter.onnx_passes.optimize import FusePass

    x = ir.Input("x", ir.Shape([2, 6]), ir.TensorType(ir.DataType.FLOAT))
    taken = ir.Value(name="y/shape", const_value=ir.tensor([6, 2], name="y/shape"))  # read by another node too
    inner = ir.Value(name="inner_shape", const_value=ir.tensor([3, 4], name="inner_shape"))
    outer = ir.Value(name="outer_shape", const_value=ir.tensor([4, 3], name="outer_shape"))
    first = ir.node("Reshape", [x, inner])
    merged = ir.node(
        "Reshape",
        [first.outputs[0], outer],
        outputs=[ir.Value(name="y", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([4, 3]))],
    )
    other = ir.node(
        "Reshape",
        [x, taken],
        outputs=[ir.Value(name="z", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([6, 2]))],
    )
    graph = ir.Graph(
        [x],
        [merged.outputs[0], other.outputs[0]],
        nodes=[first, merged, other],
        initializers=[taken, inner, outer],
        opset_imports={"": 18},
        name="g",
    )
    model = ir.Model(graph, ir_version=10)
    FusePass(18, True)(model)
    proto = ir.serde.serialize_model(model)
    onnx.checker.check_model(proto, full_check=True)
    assert [n.op_type for n in proto.graph.node] == ["Reshape", "Reshape"]
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    data = torch.arange(12.0).reshape(2, 6)
    y, z = session.run(None, {"x": data.numpy()})
    assert (y == data.reshape(4, 3).numpy()).all() and (z == data.reshape(6, 2).numpy()).all()


class TinyConstants(nn.Module):
    """An RMS norm with Helium's epsilon (1e-8), and a scale a hair above 1: no-ops to onnxscript's
    rewrite rules (their constants match within 1e-8 absolutely, 1e-5 relatively), not to PyTorch."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-8)
        return normed, (x + 1e-9) * 1.000001


def test_tiny_constants_are_not_dropped_as_no_ops():
    """A zero row (a padding token's embedding) stays 0 through the norm, not 0/0 = NaN."""
    x = torch.cat([torch.zeros(1, 8), torch.full((1, 8), 3e4)])
    export_output = exporter.dynamo_export(TinyConstants(), x)
    assert _op_types(export_output.model_proto).count("Add") == 2 and "Mul" in _op_types(export_output.model_proto)
    assert_matches_eager(export_output, TinyConstants(), (x,), atol=0, rtol=1e-6)
