"""`export_for_generation` fuses each decoder layer into onnxruntime's kernels (GroupQueryAttention,
RotaryEmbedding, SkipSimplifiedLayerNormalization) by default: the fused model still generates what
``generate()`` does, in onnxruntime (left-padded batch) and onnxruntime-genai (right-padded); a layer
that does not fuse gets a warning located at its code (FXE0024).
"""

from __future__ import annotations

import collections
import json
import os

import numpy as np
import onnx
import onnx.numpy_helper
import onnx_ir as ir
import onnxruntime as ort
import pytest
import torch
from onnx_ir.passes.common import InlinePass, RemoveUnusedNodesPass
from tiny_lms import CONFIGS, DECODER, GPT_NEO_WINDOWED, TOKENS, genai_generate, tiny_model
from transformers import (
    AutoModelForCausalLM,
    CodeGenConfig,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Gemma2Config,
    Gemma3TextConfig,
    GlmConfig,
    GPTBigCodeConfig,
    GPTJConfig,
    GPTNeoConfig,
    GPTNeoXConfig,
    GptOssConfig,
    GptOssForCausalLM,
    HeliumConfig,
    OPTConfig,
    PersimmonConfig,
    PhiConfig,
    Qwen2Config,
    Qwen3Config,
)

import exporter
from exporter.generation import fusions
from exporter.generation.export import export_graph
from exporter.generation.heads_first import move_heads_first
from exporter.options import ExportOptions

NEW_TOKENS = 16
# GPT-NeoX's config names (Persimmon's too), 2 layers of 4 heads of 16
NEOX_LIKE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=256,
    tie_word_embeddings=False,
    **TOKENS,
)
PROMPT = [[5, 17, 300, 42, 7, 99, 12], [3, 4, 5, 8, 9, 10, 11]]


def qwen2() -> torch.nn.Module:
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(Qwen2Config(**DECODER, **TOKENS)).eval()  # q/k/v biases


def llama_eager() -> torch.nn.Module:
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(CONFIGS["llama"](), attn_implementation="eager").eval()


MODELS = {"llama": lambda: tiny_model("llama"), "qwen2": qwen2, "llama-eager": llama_eager}


class AbsMeanNorm(torch.nn.Module):
    """A normalization no fused kernel computes: x / mean(|x|)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x / (x.abs().mean(-1, keepdim=True) + 1e-5)


@pytest.fixture(scope="module", params=sorted(MODELS))
def fused(request, tmp_path_factory):
    model = MODELS[request.param]()
    return model, exporter.export_for_generation(model, tmp_path_factory.mktemp(request.param))


def ops(path: str) -> collections.Counter:
    return collections.Counter(
        (n.domain or "ai.onnx", n.op_type) for n in onnx.load(path, load_external_data=False).graph.node
    )


def results(result, rule: str) -> list[dict]:
    log = json.load(open(os.path.join(result.output_dir, "model.sarif")))
    return [r for r in log["runs"][0]["results"] if r["ruleId"] == rule]


def fused_graph(result) -> onnx.GraphProto:
    """The graph of `result`, an export that generated like ``generate()`` with its 2 layers fused (FXE0024)."""
    assert result.parity.matched and result.parity.steps == NEW_TOKENS
    [note] = results(result, "FXE0024")
    assert (note["properties"]["layers"], note["properties"]["fusedLayers"]) == (2, 2)
    return onnx.load(result.model_path, load_external_data=False).graph


def test_every_layer_is_fused_and_generates_like_generate(fused):
    model, result = fused
    found = ops(result.model_path)
    assert found[("com.microsoft", "GroupQueryAttention")] == 2
    # the rotary embedding inside GQA (do_rotary, the model's cos/sin caches), on q/k/v packed in one input
    assert not found[("com.microsoft", "RotaryEmbedding")]
    graph = onnx.load(result.model_path, load_external_data=False).graph
    for node in (n for n in graph.node if n.op_type == "GroupQueryAttention"):
        assert {a.name: a.i for a in node.attribute if a.name in ("do_rotary", "rotary_interleaved")} == {
            "do_rotary": 1,
            "rotary_interleaved": 0,
        }
        assert node.input[1:3] == ["", ""] and node.input[7:9] == ["rotary_cos_cache_0", "rotary_sin_cache_0"]
    # 5 norms: the first alone, the others with the residual add before them
    assert (
        found[("com.microsoft", "SkipSimplifiedLayerNormalization")],
        found[("ai.onnx", "SimplifiedLayerNormalization")],
    ) == (4, 1)
    assert not {"Softmax", "ReduceMean", "Neg"} & {op for _, op in found}
    # one MatMul per layer for q/k/v (packed into GQA, no Split), o, gate, up, down; and the head
    assert (found[("ai.onnx", "MatMul")], found[("ai.onnx", "Split")]) == (2 * 5 + 1, 0)
    # GQA's output is (batch, sequence, hidden) already: the output projection reads it as it is
    readers = {name: node.op_type for node in graph.node for name in node.input}
    assert {readers[n.output[0]] for n in graph.node if n.op_type == "GroupQueryAttention"} == {"MatMul"}
    used = {name for node in graph.node for name in node.input}
    assert [i.name for i in graph.initializer if i.name not in used] == []  # no weight left behind by the merge
    assert result.parity.matched and result.parity.steps == NEW_TOKENS  # the left-padded batch, 16/16
    assert not results(result, "FXE0026")  # one head count and size for all keys and values: genai runs it
    [note] = results(result, "FXE0024")
    assert note["level"] == "note" and "2/2 layers fused" in note["message"]["text"]
    assert (note["properties"]["layers"], note["properties"]["fusedLayers"]) == (2, 2)


def test_onnxruntime_genai_generates_the_fused_model_like_generate(fused):
    model, result = fused
    with torch.no_grad():
        expected = model.generate(torch.tensor(PROMPT), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)[
            :, 7:
        ].tolist()
    assert genai_generate(result.output_dir, PROMPT, NEW_TOKENS) == expected


def test_onnxruntime_genai_right_padded_batch_generates_each_prompt_like_generate(fused):
    """onnxruntime-genai pads a batch of unequal prompts on the right (the pad id, masked out) and keeps
    the padding's cache slots: GroupQueryAttention's own rotary must rotate the later tokens at their
    positions, not at their slots. The cache is one buffer per layer, as long as the context (the graph
    reads the past's length from the mask, not from that buffer). Each row generates what ``generate()``
    does for its prompt alone."""
    model, result = fused
    assert shares_cache(result)
    prompts = [PROMPT[0], PROMPT[1][:4]]
    with torch.no_grad():
        expected = [
            model.generate(torch.tensor([p]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)[
                0, len(p) :
            ].tolist()
            for p in prompts
        ]
    assert genai_generate(result.output_dir, [prompts[0], prompts[1] + [0] * 3], NEW_TOKENS) == expected


def test_a_layer_that_does_not_fuse_is_located_at_its_module(tmp_path):
    model = tiny_model("llama")
    model.model.layers[1].post_attention_layernorm = AbsMeanNorm(64)
    result = exporter.export_for_generation(model, tmp_path)
    assert result.parity.matched
    warning, note = results(result, "FXE0024")
    assert warning["level"] == "warning" and warning["properties"] == {
        "layer": "model.layers.1",
        "unfused": ["normalization"],
    }
    location = warning["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"].endswith("test_generation_fusions.py")
    assert location["region"]["snippet"]["text"] == "return self.weight * x / (x.abs().mean(-1, keepdim=True) + 1e-5)"
    assert "1/2 layers fused" in note["message"]["text"]
    found = ops(result.model_path)
    assert found[("com.microsoft", "GroupQueryAttention")] == 2 and found[("ai.onnx", "ReduceMean")] == 1


def test_fused_kernels_off_keeps_the_portable_graph(tmp_path):
    result = exporter.export_for_generation(
        tiny_model("llama"), tmp_path, export_options=ExportOptions(fused_kernels=False)
    )
    assert result.parity.matched
    assert not [op for op in ops(result.model_path) if op[0] == "com.microsoft"] and not results(result, "FXE0024")
    assert not shares_cache(result)  # past and new are concatenated: no buffer to share


def shares_cache(result) -> bool:
    with open(os.path.join(result.output_dir, "genai_config.json")) as f:
        return json.load(f)["search"]["past_present_share_buffer"]


def test_int4_on_fused_kernels(tmp_path):
    result = exporter.export_for_generation(
        tiny_model("llama"), tmp_path, export_options=ExportOptions(precision="int4")
    )
    found = ops(result.model_path)
    # per layer: q/k/v merged, o, gate, up, down; and the head
    assert found[("com.microsoft", "MatMulNBits")] == 2 * 5 + 1 and found[("com.microsoft", "GroupQueryAttention")] == 2
    assert result.quality is not None and 0 <= result.quality.agreement <= 1


def qwen3() -> torch.nn.Module:
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(Qwen3Config(**DECODER, head_dim=16, **TOKENS)).eval()


def gemma3() -> torch.nn.Module:
    torch.manual_seed(0)
    config = Gemma3TextConfig(**DECODER, head_dim=16, sliding_window=8, tie_word_embeddings=False, **TOKENS)
    return AutoModelForCausalLM.from_config(config).eval()


def phi() -> torch.nn.Module:
    torch.manual_seed(0)
    config = PhiConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=256,
        partial_rotary_factor=0.5,
        tie_word_embeddings=False,
        **TOKENS,
    )
    return AutoModelForCausalLM.from_config(config).eval()


def opt() -> torch.nn.Module:
    torch.manual_seed(0)
    config = OPTConfig(
        hidden_size=64,
        ffn_dim=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=256,
        word_embed_proj_dim=64,
        **TOKENS,
    )
    return AutoModelForCausalLM.from_config(config).eval()


def glm() -> torch.nn.Module:
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(GlmConfig(**DECODER, head_dim=16, **TOKENS)).eval()


def gptj() -> torch.nn.Module:
    torch.manual_seed(0)
    config = GPTJConfig(
        n_embd=64, n_layer=2, n_head=4, n_positions=256, rotary_dim=8, tie_word_embeddings=False, **TOKENS
    )
    return AutoModelForCausalLM.from_config(config).eval()


def codegen() -> torch.nn.Module:
    """CodeGen: q, v and k in one projection, reshaped into 4 groups (2 heads each) and split group by group."""
    torch.manual_seed(0)
    config = CodeGenConfig(
        n_embd=64, n_layer=2, n_head=8, n_positions=256, n_ctx=256, rotary_dim=4, tie_word_embeddings=False, **TOKENS
    )
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize(
    "build, norms, rotary",
    [
        # q and k normed per head (4 SimplifiedLayerNormalization kept before GQA, which rotates them), the first
        # norm, 4 with residual
        (qwen3, {"SimplifiedLayerNormalization": 5, "SkipSimplifiedLayerNormalization": 4}, []),
        # q and k normed after moving heads; 4 norms per layer (2 around attention, 2 around the MLP), the final one
        (gemma3, {"SimplifiedLayerNormalization": 9, "SkipSimplifiedLayerNormalization": 4}, []),
        # half of each head of 16 rotated; one LayerNorm per layer (parallel residual) and the final one
        (phi, {"LayerNormalization": 1, "SkipLayerNormalization": 2}, [8] * 4),
        # LayerNorms, each after a residual add (the first after token + position embeddings); no rotary
        (lambda: tiny_model("gpt2"), {"SkipLayerNormalization": 5}, []),
        # the query projection scaled, SDPA unscaled (a product by 1, dropped); 5 LayerNorms, the MLP's on rows
        # flattened to 2-D (a Reshape between the residual add and the norm), only the first adds a residual
        # (token + position embeddings)
        (opt, {"LayerNormalization": 4, "SkipLayerNormalization": 1}, []),
        # pairs of adjacent channels rotated in the first half of each head (interleaved, partial)
        (glm, {"SimplifiedLayerNormalization": 1, "SkipSimplifiedLayerNormalization": 4}, [8] * 4),
        # the same rotation on (batch, sequence, heads, size), before the heads move; parallel residual as Phi's
        (gptj, {"LayerNormalization": 1, "SkipLayerNormalization": 2}, [8] * 4),
        # GPT-J's attention, its projection packed by groups: split as three projections (weight columns reordered)
        (codegen, {"LayerNormalization": 1, "SkipLayerNormalization": 2}, [4] * 4),
    ],
    ids=[
        "qwen3-qk-norm",
        "gemma3-qk-norm-after-transpose",
        "phi-partial-rotary",
        "gpt2-layer-norm",
        "opt-scaled-query",
        "glm-partial-interleaved-rotary",
        "gptj-rotary-before-heads-move",
        "codegen-grouped-qvk-projection",
    ],
)
def test_more_decoder_patterns_fuse_and_generate_like_generate(build, norms, rotary, tmp_path):
    result = exporter.export_for_generation(build(), tmp_path)
    graph = fused_graph(result)
    found = collections.Counter(n.op_type for n in graph.node)
    assert found["GroupQueryAttention"] == 2 and not {"Softmax", "Neg", "ReduceMean"} & set(found)
    kinds = ("SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "LayerNormalization")
    assert {op: found[op] for op in (*kinds, "SkipLayerNormalization") if found[op]} == norms
    # the rotated size of each head, as RotaryEmbedding's rotary_embedding_dim (a whole head: inside GQA)
    dims = [
        next((a.i for a in n.attribute if a.name == "rotary_embedding_dim"), None)
        for n in graph.node
        if n.op_type == "RotaryEmbedding"
    ]
    assert dims == rotary


def test_a_projection_packed_per_head_is_split_and_fuses_with_a_partial_rotation(tmp_path):
    """GPT-NeoX projects q, k and v in one MatMul whose heads each hold their three parts, and rotates
    a quarter of each head: the projection is split per head (and merged again as GQA's packed input),
    each quarter rotated by RotaryEmbedding (onnxruntime needs its num_heads with rotary_embedding_dim)."""
    torch.manual_seed(0)
    config = GPTNeoXConfig(**NEOX_LIKE)
    result = exporter.export_for_generation(AutoModelForCausalLM.from_config(config).eval(), tmp_path)
    graph = fused_graph(result)
    rotary = [
        {a.name: a.i for a in n.attribute if a.name in ("num_heads", "rotary_embedding_dim")}
        for n in graph.node
        if n.op_type == "RotaryEmbedding"
    ]
    assert rotary == [{"num_heads": 4, "rotary_embedding_dim": 4}] * 4  # 16 × partial_rotary_factor 0.25
    found = collections.Counter(n.op_type for n in graph.node)
    assert found["GroupQueryAttention"] == 2 and "Softmax" not in found


def _run(model: ir.Model, batch: int = 2, new: int = 3, past: int = 5) -> list[np.ndarray]:
    """The outputs of a generation graph in onnxruntime on seeded random inputs (a past of `past`)."""
    rng = np.random.default_rng(0)
    feeds = {}
    for value in model.graph.inputs:
        if value.name == "input_ids":
            feeds[value.name] = rng.integers(3, 1000, (batch, new))
        elif value.name == "attention_mask":
            feeds[value.name] = np.ones((batch, past + new), dtype=np.int64)
        elif value.name == "position_ids":
            feeds[value.name] = np.tile(np.arange(past, past + new), (batch, 1))
        else:  # past_key_values.{i}.key / .value: (batch, heads, past, size)
            feeds[value.name] = rng.standard_normal((batch, value.shape[1], past, value.shape[3]), dtype=np.float32)
    session = ort.InferenceSession(
        ir.serde.serialize_model(model).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def test_a_rotation_before_the_heads_move_is_moved_after_it_unchanged():
    """GPT-J rotates q and k on (batch, sequence, heads, size), then moves the heads: `move_heads_first`
    transposes what the rotation reads (the heads, the cos and sin tables) and repeats it after, computing
    the same outputs, the rotation now on (batch, heads, sequence, size) with nothing left before it."""
    model = export_graph(gptj()).model
    InlinePass()(model)
    expected = _run(model)
    assert move_heads_first(model.graph) == 4  # q and k of 2 layers
    RemoveUnusedNodesPass()(model)
    for got, want in zip(_run(model), expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)
    rotated = [n for n in model.graph if n.op_type == "Neg"]
    assert len(rotated) == 4 and all(n.inputs[0].shape[1] == 4 for n in rotated)  # (batch, heads=4, …)


def test_a_long_computation_before_the_heads_move_is_left_as_it_is():
    """Only a rotation's few nodes are moved: 3000 additions and a negation before the transpose (no
    rotation) are left in place, without recursing through all of them."""
    nodes = [onnx.helper.make_node("Add", [f"v{i}", "one"], [f"v{i + 1}"]) for i in range(3000)]
    nodes += [
        onnx.helper.make_node("Neg", ["v3000"], ["negated"]),
        onnx.helper.make_node("Transpose", ["negated"], ["moved"], perm=[0, 2, 1, 3]),
        onnx.helper.make_node("Relu", ["moved"], ["out"]),
    ]
    shape = [2, 3, 4, 8]
    graph = onnx.helper.make_graph(
        nodes,
        "long",
        [onnx.helper.make_tensor_value_info("v0", onnx.TensorProto.FLOAT, shape)],
        [onnx.helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [2, 4, 3, 8])],
        [onnx.numpy_helper.from_array(np.ones(1, dtype=np.float32), "one")],
    )
    model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(onnx.helper.make_model(graph)))
    assert move_heads_first(model.graph) == 0 and len(model.graph) == 3003


def gpt_bigcode() -> torch.nn.Module:
    torch.manual_seed(0)
    config = GPTBigCodeConfig(n_embd=64, n_layer=2, n_head=4, n_positions=256, multi_query=True, **TOKENS)
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize(
    "build, rotary",
    [(lambda: tiny_model("falcon"), True), (gpt_bigcode, False)],
    ids=["falcon-split-heads", "gpt-bigcode-split-last-axis"],
)
def test_a_packed_multi_query_projection_fuses(build, rotary, tmp_path):
    """Falcon and GPT-BigCode project q and their one key/value head in one MatMul and split it after
    shaping heads (Falcon on the heads axis, GPT-BigCode on the last after adding a heads axis of 1):
    GQA with one KV head, q and k rotated in the kernel where the model rotates them."""
    result = exporter.export_for_generation(build(), tmp_path)
    graph = fused_graph(result)
    attentions = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    assert len(attentions) == 2 and not {"Softmax", "Neg"} & {n.op_type for n in graph.node}
    attributes = {a.name: a.i for a in attentions[0].attribute if a.name in ("num_heads", "kv_num_heads", "do_rotary")}
    assert attributes == {"num_heads": 4, "kv_num_heads": 1, **({"do_rotary": 1} if rotary else {})}


def test_scores_masked_to_a_window_fuse_with_the_window_in_the_bias(tmp_path):
    """GPT-Neo's local layers set the scores outside a window of 8 to the float minimum before adding the
    mask: GQA takes that window in its attention bias. The 7-token prompts and 16 new tokens cross the
    window, so a bias without it generates other tokens."""
    torch.manual_seed(0)
    config = GPTNeoConfig(**GPT_NEO_WINDOWED, tie_word_embeddings=False, **TOKENS)
    result = exporter.export_for_generation(AutoModelForCausalLM.from_config(config).eval(), tmp_path)
    graph = fused_graph(result)
    found = collections.Counter(n.op_type for n in graph.node)
    assert found["GroupQueryAttention"] == 2 and "Softmax" not in found


def test_scores_with_a_bias_of_their_own_fuse_with_it_in_the_attention_bias(tmp_path):
    """MPT adds ALiBi (a per-head slope times the key's distance) to the scores, then masks them
    (``where(mask, min, scores + alibi)``): GQA takes ``where(mask, min, alibi)`` as its attention bias, per
    head. The left-padded batch and 16 new tokens generate as ``generate()``; without ALiBi they do not."""
    graph = fused_graph(exporter.export_for_generation(tiny_model("mpt"), tmp_path))
    found = collections.Counter(n.op_type for n in graph.node)
    assert found["GroupQueryAttention"] == 2 and "Softmax" not in found


def test_a_projection_packed_per_head_and_gathered_fuses_with_its_heads_normed(tmp_path):
    """Persimmon shapes its q/k/v projection (with a bias) as (batch, sequence, heads, 3, size), takes each
    part with a Gather and LayerNorms q and k per head before moving the heads: the projection's weight
    columns and bias are reordered part by part and split, and the LayerNorms stay before GQA. Every
    bias and norm weight is random (a fresh model's are 0 and 1, which a wrong order would not show)."""
    torch.manual_seed(0)
    config = PersimmonConfig(**NEOX_LIKE)
    model = AutoModelForCausalLM.from_config(config).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                parameter.copy_(
                    torch.randn(parameter.shape, generator=generator) * 0.5 + (0 if name.endswith("bias") else 1)
                )
    graph = fused_graph(exporter.export_for_generation(model, tmp_path))
    found = collections.Counter(n.op_type for n in graph.node)
    assert found["GroupQueryAttention"] == 2 and "Softmax" not in found
    assert found["LayerNormalization"] == 2 * 2 + 1  # q and k of each layer, and the first input norm


def test_an_interleaved_rotation_is_rotated_by_group_query_attention(tmp_path):
    """Helium rotates pairs of adjacent channels (GPT-J's rotate_every_two, its cos/sin each repeated per
    pair): GQA rotates q and k itself, interleaved, with cos/sin caches evaluated from the graph for every
    position, which are the model's own inverse frequencies times the positions."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(HeliumConfig(**DECODER, head_dim=16, **TOKENS)).eval()
    result = exporter.export_for_generation(model, tmp_path)
    assert result.parity.matched and result.parity.steps == NEW_TOKENS
    graph = onnx.load(result.model_path).graph
    attentions = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    assert len(attentions) == 2 and not {"Neg", "Softmax", "RotaryEmbedding"} & {n.op_type for n in graph.node}
    attributes = {a.name: a.i for a in attentions[0].attribute if a.name in ("do_rotary", "rotary_interleaved")}
    assert attributes == {"do_rotary": 1, "rotary_interleaved": 1}
    tables = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    cos, sin = (tables[name] for name in attentions[0].input[7:9])
    angles = np.arange(256)[:, None] * model.model.rotary_emb.inv_freq.double().numpy()[None]  # context 256
    np.testing.assert_allclose(cos, np.cos(angles), atol=1e-4)
    np.testing.assert_allclose(sin, np.sin(angles), atol=1e-4)


def test_soft_capped_attention_fuses_with_its_cap(tmp_path):
    """Gemma 2 caps its scores (``cap * tanh(scores / cap)``) before the mask: GQA's softcap. Scores well
    beyond a cap of 0.05 (weights of scale 0.5): a graph without the cap differs at the first token."""
    torch.manual_seed(0)
    config = Gemma2Config(
        **DECODER,
        head_dim=16,
        sliding_window=8,
        attn_logit_softcapping=0.05,
        tie_word_embeddings=False,
        **{**TOKENS, "initializer_range": 0.5},
    )
    result = exporter.export_for_generation(AutoModelForCausalLM.from_config(config).eval(), tmp_path)
    assert result.parity.matched and result.parity.steps == NEW_TOKENS
    graph = onnx.load(result.model_path, load_external_data=False).graph
    caps = [a.f for n in graph.node if n.op_type == "GroupQueryAttention" for a in n.attribute if a.name == "softcap"]
    found = collections.Counter(n.op_type for n in graph.node)
    assert caps == pytest.approx([0.05, 0.05]) and "Softmax" not in found
    assert found["Tanh"] == 1  # the final logits' cap only


@pytest.mark.parametrize("name", ["bloom", "xglm"])
def test_attention_on_batched_heads_fuses_and_generates_like_generate(name, tmp_path):
    """BLOOM and XGLM merge batch and heads, (batch·heads, sequence, size), for their products and split
    them around the mask: the products move to 4-D heads and the layers fuse. BLOOM's ALiBi becomes
    part of GQA's attention bias; the left-padded batch and 16 new tokens generate as ``generate()``, and
    without ALiBi in that bias they do not."""
    result = exporter.export_for_generation(tiny_model(name), tmp_path)
    assert result.parity.matched and result.parity.steps == NEW_TOKENS
    found = collections.Counter(n.op_type for n in fused_graph(result).node)
    assert found["GroupQueryAttention"] == 2 and "Softmax" not in found
    *warnings, note = results(result, "FXE0024")
    assert not warnings and (note["properties"]["layers"], note["properties"]["fusedLayers"]) == (2, 2)


def test_reshapes_that_do_not_merge_batch_and_heads_are_not_taken_for_batched_heads():
    """Only a reshape that keeps the last two axes merges (batch, heads); one that merges heads and
    sequence, or splits the merged axis the other way round, is something else."""
    from exporter.generation.batched_heads import _dims, _merges, _splits

    def value(*dims):
        return ir.Value(name="v", shape=ir.Shape(dims), type=ir.TensorType(ir.DataType.FLOAT))

    heads = value("batch_size", 4, "sequence_length", 16)
    assert _merges(heads, value("4*batch_size", "sequence_length", 16))
    assert not _merges(heads, value("batch_size", "4*sequence_length", 16))
    assert not _merges(heads, value("4*batch_size", 16, "sequence_length"))
    merged, batch_and_heads = value("4*batch_size", "sequence_length", "total"), _dims(heads, 4)[:2]
    assert _splits(merged, value("batch_size", 4, "sequence_length", "total"), batch_and_heads)
    assert not _splits(merged, value(4, "batch_size", "sequence_length", "total"), batch_and_heads)


def test_an_attention_left_on_batched_heads_is_reported_unfused(tmp_path, monkeypatch):
    """An attention whose probabilities reach the values through a Reshape (BLOOM's, here with the
    batched-heads rewrite off) is warned about at the user's call, not counted fused."""
    monkeypatch.setattr(fusions, "BATCHED_HEADS", [])
    result = exporter.export_for_generation(tiny_model("bloom"), tmp_path)
    assert result.parity.matched
    *warnings, note = results(result, "FXE0024")
    assert [w["properties"] for w in warnings] == [
        {"layer": f"transformer.h.{i}", "unfused": ["attention"]} for i in range(2)
    ]
    assert (note["properties"]["layers"], note["properties"]["fusedLayers"]) == (2, 0)
    assert not shares_cache(result)  # the unfused layers concatenate past and new
    location = warnings[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert location.endswith("test_generation_fusions.py")  # transformers' code is not the user's: their call


def test_attention_with_sinks_and_a_rotation_without_rotate_half_are_reported_unfused(tmp_path):
    """GPT-OSS softmaxes its scores beside learned sinks and slices the sinks off before the values, and
    rotates by cos/sin without rotate_half's Neg: neither fuses, and both are warned about (the note had
    counted the layers fused)."""
    config = GptOssConfig(
        **DECODER, **TOKENS, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=8
    )
    torch.manual_seed(0)
    result = exporter.export_for_generation(GptOssForCausalLM(config).eval(), tmp_path)
    assert result.parity.matched
    *warnings, note = results(result, "FXE0024")
    assert [w["properties"] for w in warnings] == [
        {"layer": f"model.layers.{i}", "unfused": ["rotary embedding", "attention"]} for i in range(2)
    ]
    assert (note["properties"]["layers"], note["properties"]["fusedLayers"]) == (2, 0)


def test_a_cache_genai_cannot_hold_is_warned_about(tmp_path):
    """DeepSeek's multi-head latent attention caches keys and values of different sizes: onnxruntime-genai's
    cache has one head size (it fed values of the keys' size), so the folder says it cannot run there
    (FXE0026), and the generation check runs it in onnxruntime."""
    config = DeepseekV3Config(
        **{**DECODER, "num_key_value_heads": 4},
        **TOKENS,
        n_routed_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        first_k_dense_replace=1,
        kv_lora_rank=16,
        q_lora_rank=24,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=16,
        n_group=1,
        topk_group=1,
    )
    torch.manual_seed(0)
    result = exporter.export_for_generation(DeepseekV3ForCausalLM(config).eval(), tmp_path)
    assert result.parity.matched
    (warning,) = results(result, "FXE0026")
    assert warning["level"] == "warning"
    assert "keys and values of different shapes (1 head of size 16 and 1 head of size 8)" in warning["message"]["text"]
