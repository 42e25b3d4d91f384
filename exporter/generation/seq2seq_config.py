"""The configs of an encoder–decoder export: onnxruntime-genai's ``genai_config.json`` and
``audio_processor_config.json`` (Whisper, its ``whisper`` model type), and the processor files of
the model's folder beside the tokenizer's.

The layout is the one onnxruntime-genai's model builder writes for Whisper, naming the folder's
graphs and optimum's input/output names: the encoder (``input_features`` → ``last_hidden_state``
and the cross-attention cache ``present.{i}.encoder.*``), the merged decoder's genai copy (its
pasts; ``use_cache_branch`` defaults to the branch fed the cache).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import torch

FILE = "genai_config.json"
AUDIO_PROCESSOR_FILE = "audio_processor_config.json"
# Whisper's log-mel features: 25 ms windows every 10 ms of 16 kHz audio, 30 s chunks
N_FFT, HOP_LENGTH, CHUNK_SECONDS = 400, 160, 30


def write(model: torch.nn.Module, output_dir: str, encoder_file: str, decoder_file: str) -> list[str]:
    """Write onnxruntime-genai's configs where it runs the model (Whisper); the names written."""
    if model.config.model_type != "whisper":
        return []
    configs = {
        FILE: build(model, encoder_file, decoder_file),
        AUDIO_PROCESSOR_FILE: audio_processor(model.config.num_mel_bins),
    }
    for name, config in configs.items():
        with open(os.path.join(output_dir, name), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=4)
    return list(configs)


def build(model: torch.nn.Module, encoder_file: str, decoder_file: str) -> dict[str, Any]:
    """``genai_config.json`` of a Whisper export (model type ``whisper``)."""
    config, generation_config = model.config, model.generation_config
    heads, size = config.decoder_attention_heads, config.d_model // config.decoder_attention_heads
    session = {"log_id": "onnxruntime-genai", "provider_options": []}
    sizes = {
        "head_size": size,
        "hidden_size": config.d_model,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
    }
    ids = {
        name: _first_set(generation_config, config, name) for name in ("bos_token_id", "eos_token_id", "pad_token_id")
    }
    context = config.max_target_positions
    return {
        "model": {
            **{name: value for name, value in ids.items() if value is not None},  # genai refuses null ids
            "context_length": context,
            "decoder": {
                "session_options": session,
                "filename": decoder_file,
                **sizes,
                "inputs": {
                    "input_ids": "input_ids",
                    "past_key_names": "past_key_values.%d.decoder.key",
                    "past_value_names": "past_key_values.%d.decoder.value",
                    "cross_past_key_names": "past_key_values.%d.encoder.key",
                    "cross_past_value_names": "past_key_values.%d.encoder.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.decoder.key",
                    "present_value_names": "present.%d.decoder.value",
                },
                "num_hidden_layers": config.decoder_layers,
            },
            "encoder": {
                "session_options": session,
                "filename": encoder_file,
                **{
                    **sizes,
                    "num_attention_heads": config.encoder_attention_heads,
                    "num_key_value_heads": config.encoder_attention_heads,
                },
                "inputs": {"audio_features": "input_features"},
                "outputs": {
                    "encoder_hidden_states": "last_hidden_state",
                    "cross_present_key_names": "present.%d.encoder.key",
                    "cross_present_value_names": "present.%d.encoder.value",
                },
                "num_hidden_layers": config.encoder_layers,
            },
            "type": "whisper",
            "vocab_size": config.vocab_size,
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": False,
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": context,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": False,  # presents are past + new, not a preallocated buffer
            "repetition_penalty": 1.0,
            "temperature": 1.0,
            "top_k": 1,
            "top_p": 1.0,
        },
    }


def audio_processor(mel_bins: int) -> dict[str, Any]:
    """onnxruntime-genai's audio processor (onnxruntime-extensions): decode, STFT, log-mel features."""
    stft = {"n_fft": N_FFT, "frame_length": N_FFT, "hop_length": HOP_LENGTH}
    mel = {"chunk_size": CHUNK_SECONDS, "hop_length": HOP_LENGTH, "n_fft": N_FFT, "n_mel": mel_bins}
    return {
        "feature_extraction": {
            "sequence": [
                {"operation": {"name": "audio_decoder", "type": "AudioDecoder"}},
                {"operation": {"name": "STFT", "type": "STFTNorm", "attrs": stft}},
                {"operation": {"name": "log_mel_spectrogram", "type": "LogMelSpectrum", "attrs": mel}},
            ]
        }
    }


def copy_processor(model: torch.nn.Module, output_dir: str, names: tuple[str, ...]) -> list[str]:
    """Copy the processor files of the model's folder on disk; their names."""
    source = getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "")
    copied = []
    if source and os.path.isdir(source):
        for name in names:
            if os.path.isfile(path := os.path.join(source, name)) and not os.path.exists(
                os.path.join(output_dir, name)
            ):
                shutil.copy2(path, os.path.join(output_dir, name))
                copied.append(name)
    return copied


def _first_set(generation_config: Any, config: Any, name: str) -> Any:
    value = getattr(generation_config, name, None)
    return value if value is not None else getattr(config, name, None)
