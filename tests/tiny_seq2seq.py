"""Tiny encoder–decoder models of the architectures `exporter.export_for_generation` is tested on:
2 + 2 layers, hidden size 64, random weights (seed 0) scaled up so that greedy generation varies,
vocabulary of 1000; token ids pad 0, decoder start 1, eos 2. Whisper takes 80 mel bins over its
3000 frames (1500 encoder positions, as onnxruntime-genai expects)."""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoModelForSpeechSeq2Seq,
    BartConfig,
    MarianConfig,
    T5Config,
    WhisperConfig,
)

TOKENS = dict(vocab_size=1000, pad_token_id=0, eos_token_id=2, decoder_start_token_id=1)
LAYERS = dict(
    d_model=64,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=128,
    decoder_ffn_dim=128,
)


def whisper_config(encoder_layers: int = 2, decoder_layers: int = 2) -> WhisperConfig:
    return WhisperConfig(
        **{**LAYERS, "encoder_layers": encoder_layers, "decoder_layers": decoder_layers},
        num_mel_bins=80,
        max_source_positions=1500,
        max_target_positions=64,
        init_std=0.2,
        bos_token_id=2,
        suppress_tokens=[],
        begin_suppress_tokens=None,
        **TOKENS,
    )


CONFIGS = {
    "whisper": whisper_config,
    "t5": lambda: T5Config(d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4, initializer_factor=4.0, **TOKENS),
    "bart": lambda: BartConfig(
        **LAYERS, max_position_embeddings=128, init_std=0.2, bos_token_id=1, forced_eos_token_id=None, **TOKENS
    ),
    "marian": lambda: MarianConfig(**LAYERS, max_position_embeddings=128, init_std=0.2, **TOKENS),
}


def tiny_seq2seq(name: str, config=None) -> torch.nn.Module:
    torch.manual_seed(0)
    config = config or CONFIGS[name]()
    auto = AutoModelForSpeechSeq2Seq if config.model_type == "whisper" else AutoModelForSeq2SeqLM
    return auto.from_config(config).eval()


def whisper_tokenizer() -> Any:
    """A byte-level BPE tokenizer of the tiny models' 1000 ids (no merges), saved as Whisper's:
    ``<|pad|>`` 0, ``<|startoftranscript|>`` 1, ``<|endoftext|>`` 2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import WhisperTokenizerFast

    special = ["<|pad|>", "<|startoftranscript|>", "<|endoftext|>"]
    vocab = {token: i for i, token in enumerate(special + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab |= {f"w{i}": i for i in range(len(vocab), TOKENS["vocab_size"])}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(special)
    eos = "<|endoftext|>"
    tokens = {"unk_token": eos, "bos_token": eos, "eos_token": eos, "pad_token": "<|pad|>"}
    return WhisperTokenizerFast(tokenizer_object=tokenizer, **tokens)
