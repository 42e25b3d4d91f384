"""Tiny causal LMs of the architectures `exporter.export_for_generation` is tested on: 2 layers,
hidden size 64, random weights (seed 0), vocabulary of 1000; token ids bos 1, eos 2, pad 0. And
`genai_generate`, greedy generation from an exported folder in onnxruntime-genai, and
`fp16_logit_errors`, an fp16 export's logits against PyTorch's own half-precision model's."""

from __future__ import annotations

import os

import numpy as np
import torch
from transformers import (
    AutoModelForCausalLM,
    BloomConfig,
    FalconConfig,
    Gemma2Config,
    GemmaConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    MptConfig,
    Phi3Config,
    XGLMConfig,
)

TOKENS = dict(vocab_size=1000, initializer_range=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0)
DECODER = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
# GPT-Neo with a global and a local layer whose window of 8 prompts and new tokens cross
GPT_NEO_WINDOWED = dict(
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    attention_types=[[["global", "local"], 1]],
    window_size=8,
    max_position_embeddings=256,
)
CONFIGS = {
    "llama": lambda: LlamaConfig(**DECODER, **TOKENS),
    "mistral": lambda: MistralConfig(**DECODER, sliding_window=8, **TOKENS),  # the window is crossed while generating
    "phi3": lambda: Phi3Config(**DECODER, original_max_position_embeddings=256, **TOKENS),
    # untied output embeddings: tied ones make these tiny random models repeat their last token
    "gemma": lambda: GemmaConfig(
        **{**DECODER, "num_key_value_heads": 1}, head_dim=16, tie_word_embeddings=False, **TOKENS
    ),
    "gpt2": lambda: GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=256, tie_word_embeddings=False, **TOKENS),
}

# One architecture for each class of problem a sweep beyond the five found: checked by generating.
MORE_CONFIGS = {
    # eager attention (soft-capping): PyTorch's matmul guards "sequence_length != 1", an assumption
    "gemma2": lambda: Gemma2Config(**DECODER, head_dim=16, sliding_window=8, tie_word_embeddings=False, **TOKENS),
    "bloom": lambda: BloomConfig(
        hidden_size=64, n_layer=2, n_head=4, tie_word_embeddings=False, **TOKENS
    ),  # ALiBi, baddbmm
    "falcon": lambda: FalconConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, tie_word_embeddings=False, **TOKENS
    ),  # 1 KV head
    "mpt": lambda: MptConfig(
        d_model=64, n_layers=2, n_heads=4, max_seq_len=256, **TOKENS
    ),  # max(0, positions - length)
    "xglm": lambda: XGLMConfig(
        d_model=64, num_layers=2, attention_heads=4, ffn_dim=128, max_position_embeddings=256, **TOKENS
    ),
    "mixtral": lambda: MixtralConfig(
        **DECODER, num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False, **TOKENS
    ),  # MoE
}


def tiny_model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config({**CONFIGS, **MORE_CONFIGS}[name]()).eval()


def genai_generate(folder: str | os.PathLike, ids: list[list[int]], new_tokens: int = 16) -> list[list[int]]:
    """`new_tokens` greedy tokens per row of `ids` (equal lengths) with onnxruntime-genai from the folder."""
    import onnxruntime_genai as og  # after onnxruntime, whose library it loads

    genai_model = og.Model(str(folder))
    params = og.GeneratorParams(genai_model)
    params.set_search_options(max_length=len(ids[0]) + new_tokens, do_sample=False, batch_size=len(ids))
    generator = og.Generator(genai_model, params)
    generator.append_tokens(np.array(ids, dtype=np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return [[int(t) for t in generator.get_sequence(i)][len(ids[0]) :] for i in range(len(ids))]


def fp16_logit_errors(model: torch.nn.Module, onnx_path: str | os.PathLike, ids: np.ndarray) -> tuple[float, float]:
    """The largest logit error against the fp32 `model` on the prompt `ids` (batch 1, no past) of its fp16
    export at `onnx_path` (fp32 inputs and outputs) and of PyTorch's own half-precision model."""
    import copy

    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = {value.name for value in session.get_inputs()}
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(ids.shape[1])[None]}
    feeds = {name: value for name, value in feeds.items() if name in names}
    for value in session.get_inputs():
        if value.name.startswith("past_key_values."):
            feeds[value.name] = np.zeros((1, value.shape[1], 0, value.shape[3]), dtype=np.float32)
    logits = session.run(["logits"], feeds)[0]
    with torch.no_grad():
        fp32 = model(torch.tensor(ids)).logits.numpy()
        half = copy.deepcopy(model).half()(torch.tensor(ids)).logits.float().numpy()
    return float(np.abs(logits - fp32).max()), float(np.abs(half - fp32).max())
