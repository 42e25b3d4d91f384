"""What the generation exports read of a Hugging Face model and its folder (shared by the causal-LM and the
encoder–decoder exports): the cache argument's name, the tokenizer files, transformers' export patches."""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
from collections.abc import Iterator
from typing import Any

import torch

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
)


def cache_argument(model: torch.nn.Module) -> str:
    """The name `model.forward` takes its cache by (transformers 5 renamed ``past_key_values``)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def copy_tokenizer(model: torch.nn.Module, tokenizer: Any, output_dir: str) -> list[str]:
    """Save `tokenizer`, or copy the tokenizer files of the model's folder on disk; their names."""
    if tokenizer is not None:
        return sorted(
            {os.path.basename(p) for p in tokenizer.save_pretrained(output_dir)}
            & set(os.listdir(output_dir)) - {"config.json"}
        )
    source = getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "")
    copied = []
    if source and os.path.isdir(source):
        for name in TOKENIZER_FILES:
            if os.path.isfile(path := os.path.join(source, name)):
                shutil.copy2(path, os.path.join(output_dir, name))
                copied.append(name)
    return copied


@contextlib.contextmanager
def transformers_export_patches() -> Iterator[None]:
    """transformers' own patches for torch.export (sliding-window cache layers traced as full ones,
    SDPA's math backend on CPU, …), where this transformers has them."""
    try:
        import transformers.exporters.exporter_dynamo  # noqa: F401  (registers the "dynamo" patches)
        from transformers.exporters.utils import apply_patches
    except ImportError:
        yield
        return
    with apply_patches("dynamo"):
        yield
