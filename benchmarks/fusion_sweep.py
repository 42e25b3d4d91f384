"""Fusion coverage of `exporter.export_for_generation` over causal-LM architectures of transformers.

    python benchmarks/fusion_sweep.py [--archs llama,phi] [--json out.json]

For each tiny random model (2 layers, hidden 64, vocabulary 1000; `ARCHS`): export with the default
fused kernels, the export's own generation check (FXE0022: 16 greedy tokens of a left-padded batch in
onnxruntime against ``generate()``), then, from the ONNX graph, how much of the model each fused
kernel covers, counted against the eager model independently of the fusion code:

- attention: ``GroupQueryAttention`` nodes / decoder layers;
- rotary: ``RotaryEmbedding`` nodes (and 2 per ``GroupQueryAttention`` that rotates q and k itself, ``do_rotary``)
  / 2 per layer with rotary positions (``-`` when the model has none);
- norms: one-kernel norm nodes (``SimplifiedLayerNormalization``, ``LayerNormalization`` and their
  ``Skip…`` forms) / the normalization modules one forward pass of the eager model calls (hooks on
  modules whose class name has ``Norm``), and how many of them also add the residual (skip).

- genai: the folder in onnxruntime-genai (its KV cache one buffer per layer where ``genai_config.json``
  says ``past_present_share_buffer``), a batch of two 7-token prompts, 16 greedy tokens against ``generate()``.
- warnings: the export's warnings by rule (FXE0024: a part of a layer that did not fuse; FXE0026: a KV cache
  onnxruntime-genai cannot hold, whose genai column is then left out).
- fp16: an fp16 export's largest logit error on a 12-token prompt against the fp32 model, as a multiple of
  PyTorch's own half-precision model's (about 1 or below: the graph rounds no worse than PyTorch does).

An architecture that fails to export or to generate like ``generate()`` is listed with its error.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

import numpy as np
import onnx
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import transformers  # noqa: E402
from tiny_lms import (  # noqa: E402
    CONFIGS,
    DECODER,
    GPT_NEO_WINDOWED,
    MORE_CONFIGS,
    TOKENS,
    fp16_logit_errors,
    genai_generate,
)

import exporter  # noqa: E402

UNTIED = dict(tie_word_embeddings=False)  # tied random embeddings make tiny models repeat their last token
HEADS = dict(head_dim=16)
DEEPSEEK_MOE = dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, first_k_dense_replace=1)
MLA = dict(
    DECODER,
    num_key_value_heads=4,
    kv_lora_rank=16,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=16,
)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
NEOX = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
GPT = dict(n_embd=64, n_layer=2, n_head=4, n_positions=256)


def _config(name: str, **kwargs) -> Callable[[], transformers.PretrainedConfig]:
    return lambda: getattr(transformers, name)(**{**TOKENS, **UNTIED, **kwargs})


ARCHS: dict[str, Callable[[], transformers.PretrainedConfig]] = {
    **CONFIGS,
    "qwen2": _config("Qwen2Config", **DECODER),
    **MORE_CONFIGS,
    "qwen3": _config("Qwen3Config", **DECODER, **HEADS),  # q/k norms
    "qwen2_moe": _config(
        "Qwen2MoeConfig", **DECODER, **MOE, shared_expert_intermediate_size=64
    ),  # MoE with a shared expert
    "qwen3_moe": _config("Qwen3MoeConfig", **DECODER, **HEADS, **MOE),
    "phi": _config("PhiConfig", **NEOX, max_position_embeddings=256),  # LayerNorm, partial rotary, parallel residual
    "stablelm": _config("StableLmConfig", **DECODER),  # LayerNorm, partial rotary
    "starcoder2": _config("Starcoder2Config", **DECODER),  # LayerNorm, biases
    "olmo": _config("OlmoConfig", **DECODER),  # LayerNorm without weights
    "olmo2": _config("Olmo2Config", **DECODER),  # norms after attention and MLP, q/k norms
    "cohere": _config("CohereConfig", **DECODER),  # LayerNorm, interleaved rotary, parallel residual
    "gpt_neox": _config("GPTNeoXConfig", **NEOX, max_position_embeddings=256),  # partial rotary, parallel residual
    "gptj": _config("GPTJConfig", **GPT, rotary_dim=8),  # interleaved partial rotary
    "codegen": _config("CodeGenConfig", **GPT, n_ctx=256, rotary_dim=8),
    "gpt_bigcode": _config("GPTBigCodeConfig", **GPT, multi_query=True),  # one KV head
    "gpt_neo": _config("GPTNeoConfig", **GPT_NEO_WINDOWED),  # a local layer: scores masked to a window
    "opt": _config(
        "OPTConfig",
        hidden_size=64,
        ffn_dim=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=256,
        word_embed_proj_dim=64,
    ),  # learned positions, LayerNorm
    # multipliers; the attention's as in Granite's checkpoints (not 1)
    "granite": _config("GraniteConfig", **DECODER, attention_multiplier=0.125),
    "granitemoe": _config(
        "GraniteMoeConfig", **DECODER, attention_multiplier=0.125, num_local_experts=4, num_experts_per_tok=2
    ),
    "gemma3_text": _config("Gemma3TextConfig", **DECODER, **HEADS, sliding_window=8),
    "nemotron": _config("NemotronConfig", **DECODER),  # LayerNorm1P, partial rotary
    "persimmon": _config("PersimmonConfig", **NEOX, max_position_embeddings=256),  # q/k LayerNorm
    "smollm3": _config("SmolLM3Config", **DECODER),  # rotary in some layers only
    "glm": _config("GlmConfig", **DECODER, **HEADS),  # interleaved partial rotary
    "helium": _config("HeliumConfig", **DECODER, **HEADS),
    "ministral": _config("MinistralConfig", **DECODER, **HEADS, sliding_window=8),
    "internlm3": _config("InternLM3Config", **DECODER, **HEADS),
    "ernie4_5": _config("Ernie4_5Config", **DECODER, **HEADS),
    "glm4": _config("Glm4Config", **DECODER, **HEADS),  # norms after attention and MLP too
    "glm4_moe": _config("Glm4MoeConfig", **DECODER, **HEADS, **DEEPSEEK_MOE),
    "exaone4": _config("Exaone4Config", **DECODER, **HEADS),  # q/k norms, norms after
    "exaone": _config(
        "ExaoneConfig",
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    ),
    "arcee": _config("ArceeConfig", **DECODER),  # ReLU² MLP
    "seed_oss": _config("SeedOssConfig", **DECODER, **HEADS),
    "olmo3": _config("Olmo3Config", **DECODER, sliding_window=8),
    "olmoe": _config("OlmoeConfig", **DECODER, num_experts=4, num_experts_per_tok=2),
    "flex_olmo": _config("FlexOlmoConfig", **DECODER, num_experts=4, num_experts_per_tok=2),
    "apertus": _config("ApertusConfig", **DECODER),  # xIELU activation
    "bitnet": _config("BitNetConfig", **DECODER),
    "lfm2": _config("Lfm2Config", **DECODER),
    "cwm": _config("CwmConfig", **DECODER, **HEADS, sliding_window=8),
    "vaultgemma": _config("VaultGemmaConfig", **DECODER, **HEADS),
    "phimoe": _config("PhimoeConfig", **DECODER, num_local_experts=4, num_experts_per_tok=2),
    # mixture of attention heads; its routers tie over a generated padding token's zero embedding (FXE0022 warning)
    "jetmoe": _config(
        "JetMoeConfig",
        hidden_size=64,
        num_hidden_layers=2,
        num_key_value_heads=2,
        kv_channels=16,
        intermediate_size=128,
        num_local_experts=4,
        num_experts_per_tok=2,
    ),
    # attention the fused kernels do not take (FXE0024 warnings): sinks, chunked attention with L2 q/k norms, …
    "gpt_oss": _config(
        "GptOssConfig", **DECODER, **HEADS, num_local_experts=4, num_experts_per_tok=2, sliding_window=8
    ),
    "llama4_text": _config(
        "Llama4TextConfig",
        **DECODER,
        **HEADS,
        num_local_experts=4,
        num_experts_per_tok=1,
        intermediate_size_mlp=128,
        attention_chunk_size=8,
    ),
    "hunyuan_v1_dense": _config("HunYuanDenseV1Config", **DECODER, **HEADS),
    "doge": _config("DogeConfig", **DECODER),
    # multi-head latent attention: keys and values of different sizes (FXE0026: onnxruntime-genai cannot run it)
    "deepseek_v3": _config("DeepseekV3Config", **MLA, **DEEPSEEK_MOE, q_lora_rank=24, n_group=1, topk_group=1),
    "deepseek_v2": _config("DeepseekV2Config", **MLA, **DEEPSEEK_MOE, q_lora_rank=None),
}

GENAI_PROMPTS = [[5, 17, 300, 42, 7, 99, 12], [3, 4, 5, 8, 9, 10, 11]]
GENAI_TOKENS = 16
NORM_KERNELS = (
    "SimplifiedLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "LayerNormalization",
    "SkipLayerNormalization",
)


def tiny(name: str) -> torch.nn.Module:
    """A random `name` model whose norms' weights and biases are random too: a fresh model's are all 1 and 0,
    and two norms of one input (GPT-NeoX's parallel residual) would then be one node after deduplication."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(ARCHS[name]()).eval()
    with torch.no_grad():
        for module in model.modules():
            if "Norm" in type(module).__name__:
                for parameter in module.parameters(recurse=False):
                    parameter.add_(torch.randn(parameter.shape) * 0.1)
    return model


def eager_counts(model: torch.nn.Module) -> tuple[int, int, bool]:
    """(decoder layers, normalization modules one forward calls, whether positions are rotary)."""
    called: set[str] = set()
    hooks = [
        module.register_forward_hook(lambda m, i, o, name=name: called.add(name))
        for name, module in model.named_modules()
        if "Norm" in type(module).__name__
    ]
    try:
        with torch.no_grad():
            model(input_ids=torch.ones(1, 3, dtype=torch.long))
    finally:
        for hook in hooks:
            hook.remove()
    config = model.config.get_text_config(decoder=True)
    rotary = any("Rotary" in type(m).__name__ for m in model.modules()) or bool(getattr(config, "rotary_dim", None))
    return config.num_hidden_layers, len(called), rotary


def sweep_one(name: str) -> dict:
    row: dict = {"arch": name}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        try:
            model = tiny(name)
            layers, norms, rotary = eager_counts(model)
            row.update(layers=layers, norm_modules=norms, rotary=rotary)
            result = exporter.export_for_generation(model, out)
        except Exception as error:  # noqa: BLE001 - the sweep reports every architecture
            row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
            row["trace"] = traceback.format_exc(limit=3)
            return row
        nodes = onnx.load(result.model_path, load_external_data=False).graph.node
        ops = collections.Counter(n.op_type for n in nodes)
        in_attention = sum(any(a.name == "do_rotary" and a.i for a in n.attribute) for n in nodes)  # q and k in GQA
        with open(os.path.join(out, "model.sarif")) as f:
            results = json.load(f)["runs"][0]["results"]
        with open(os.path.join(out, "genai_config.json")) as f:
            shared = json.load(f)["search"]["past_present_share_buffer"]
        warnings = collections.Counter(r["ruleId"] for r in results if r["level"] == "warning")
        genai = None if warnings["FXE0026"] else genai_matches(model, out)  # a cache genai cannot hold
    with tempfile.TemporaryDirectory() as out:
        fp16 = fp16_error(model, out)
    row.update(
        seconds=round(time.perf_counter() - start, 1),
        generate=f"{result.parity.steps}/{result.parity.steps}" if result.parity.matched else "DIFFER",
        attention=ops["GroupQueryAttention"],
        rotary_fused=ops["RotaryEmbedding"] + 2 * in_attention,
        norms_fused=sum(ops[op] for op in NORM_KERNELS),
        skip=ops["SkipSimplifiedLayerNormalization"] + ops["SkipLayerNormalization"],
        softmax_left=ops["Softmax"],
        summary=result.check,
        genai="—" if genai is None else f"{genai}/{len(GENAI_PROMPTS)} rows" + (" (shared cache)" if shared else ""),
        warnings=[f"{n} {rule}" for rule, n in sorted(warnings.items())],
        fp16=round(fp16, 2),
    )
    return row


def fp16_error(model: torch.nn.Module, folder: str) -> float:
    """The largest logit error of `model`'s fp16 export (in `folder`) against the fp32 model on a 12-token
    prompt, divided by the error of PyTorch's half-precision model."""
    exporter.export_for_generation(
        model, folder, verify_generation=False, export_options=exporter.ExportOptions(precision="fp16")
    )
    onnx_error, half_error = fp16_logit_errors(
        model,
        os.path.join(folder, "model.onnx"),
        np.random.default_rng(0).integers(3, model.config.vocab_size, (1, 12)),
    )
    return onnx_error / half_error


def genai_matches(model: torch.nn.Module, folder: str) -> int:
    """How many rows of `GENAI_PROMPTS` onnxruntime-genai generates as ``generate()`` does from `folder`."""
    with torch.no_grad():
        expected = model.generate(
            torch.tensor(GENAI_PROMPTS), max_new_tokens=GENAI_TOKENS, do_sample=False, pad_token_id=0
        )[:, len(GENAI_PROMPTS[0]) :].tolist()
    produced = genai_generate(folder, GENAI_PROMPTS, GENAI_TOKENS)
    return sum(p == e for p, e in zip(produced, expected))


def table_line(row: dict) -> str:
    if "error" in row:
        return f"| {row['arch']} | — | — | — | {row['error']} | — | — | — |"
    layers = row["layers"]
    rotary = f"{row['rotary_fused']}/{2 * layers}" if row["rotary"] else "—"
    norms = f"{row['norms_fused']}/{row['norm_modules']} ({row['skip']} skip)"
    return (
        f"| {row['arch']} | {row['attention']}/{layers} | {rotary} | {norms} | {row['generate']} | {row['genai']} "
        f"| {row['fp16']} | {'; '.join(row['warnings']) or '—'} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=",".join(ARCHS))
    parser.add_argument("--json")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    print(
        "| architecture | attention → GQA | rotary → RotaryEmbedding | norms in one kernel (with residual) "
        "| tokens = generate() | onnxruntime-genai = generate() | fp16 logit error / PyTorch half's | warnings |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for name in args.archs.split(","):
        row = sweep_one(name)
        rows.append(row)
        print(table_line(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
