"""``genai_config.json``: what onnxruntime-genai needs to load a generation export and generate.

The layout is the one onnxruntime-genai's model builder writes (``model.decoder.inputs`` /
``outputs`` name patterns, head sizes, token ids, ``search`` defaults from the generation config).
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

from exporter.generation.shared_cache import shares_cache

FILE = "genai_config.json"
# onnxruntime-genai's decoder model types; another model type is run as the generic "decoder".
GENAI_TYPES = ("gemma", "llama", "mistral", "phi3", "qwen2")


def build(config: Any, generation_config: Any, graph: ir.Graph, filename: str, uses_positions: bool) -> dict[str, Any]:
    """The genai config of a `graph` exported by `exporter.generation.export` (its KV cache one buffer per layer
    where the graph allows, `shared_cache.shares_cache`)."""
    keys = [v for v in graph.inputs if v.name.startswith("past_key_values.") and v.name.endswith(".key")]
    layers, (_, kv_heads, _, head_size) = len(keys), keys[0].shape
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    inputs = {"input_ids": "input_ids", "attention_mask": "attention_mask"}
    if uses_positions:
        inputs["position_ids"] = "position_ids"
    inputs |= {"past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"}
    context_length = context_length_of(config) or 2048
    eos = _first_set(generation_config, config, "eos_token_id")
    pad = _first_set(generation_config, config, "pad_token_id")
    if pad is None:  # genai masks this id at the end of a batch's rows (it pads on the right); else the end of sequence
        pad = eos[0] if isinstance(eos, list) else eos
    ids = {
        "bos_token_id": _first_set(generation_config, config, "bos_token_id"),
        "eos_token_id": eos,
        "pad_token_id": pad,
    }
    return {
        "model": {
            **{name: value for name, value in ids.items() if value is not None},  # genai refuses null ids
            "context_length": context_length,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": filename,
                "head_size": head_size,
                "hidden_size": text.hidden_size,
                "inputs": inputs,
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
                "num_attention_heads": text.num_attention_heads,
                "num_hidden_layers": layers,
                "num_key_value_heads": kv_heads,
            },
            "type": config.model_type if config.model_type in GENAI_TYPES else "decoder",
            "vocab_size": text.vocab_size,
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": bool(getattr(generation_config, "do_sample", False)),
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": context_length,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": shares_cache(graph),
            "repetition_penalty": getattr(generation_config, "repetition_penalty", None) or 1.0,
            "temperature": getattr(generation_config, "temperature", None) or 1.0,
            "top_k": getattr(generation_config, "top_k", None) or 50,
            "top_p": getattr(generation_config, "top_p", None) or 1.0,
        },
    }


def incompatibility(graph: ir.Graph) -> str | None:
    """Why onnxruntime-genai cannot run `graph` (its cache has one head count and size for all keys and
    values), or None."""
    caches = [v for v in graph.inputs if v.name.startswith("past_key_values.")]
    layouts = {(v.shape[1], v.shape[3]) for v in caches}
    if len(layouts) <= 1:
        return None
    described = " and ".join(
        f"{heads} head{'s' * (heads != 1)} of size {size}" for heads, size in sorted(layouts, key=str)
    )
    return f"its KV cache holds keys and values of different shapes ({described}); genai's has one head count and size"


def context_length_of(config: Any) -> int | None:
    """The most positions the model takes (prompt and generated tokens), if its config says."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    names = ("max_position_embeddings", "n_positions", "max_seq_len")  # MPT's is max_seq_len
    return next((value for name in names if (value := getattr(text, name, None))), None)


def _first_set(generation_config: Any, config: Any, name: str) -> Any:
    value = getattr(generation_config, name, None)
    return value if value is not None else getattr(config, name, None)
