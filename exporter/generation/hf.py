"""What the generation exports read of a Hugging Face model and its folder (shared by the causal-LM and the
encoder–decoder exports): the cache argument's name, the cache of given tensors, the tokenizer files,
transformers' export patches."""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
import sys
from collections.abc import Collection, Iterator
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


def filled_cache(past_key_values: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """A ``DynamicCache`` whose layers hold `past_key_values`' (key, value) tensors as they are.

    ``DynamicCache(ddp_cache_data=…)`` would concatenate each onto an empty tensor: two ops a layer that
    the graph drops again, which made an 8-layer decoder's capture 1.09x slower (`benchmarks/capture_time.py`).
    """
    from transformers import DynamicCache

    if not past_key_values:
        return DynamicCache()
    cache = DynamicCache(ddp_cache_data=[(None, None)] * len(past_key_values))  # empty layers, no data
    for layer, (key, value) in zip(cache.layers, past_key_values):
        layer.device, layer.keys, layer.values, layer.is_initialized = key.device, key, value, True
    return cache


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


# transformers routes SDPA through its math backend while tracing, for vision-language models whose
# batch comes from a data-dependent op. A generation export's batch is an input dimension, and tracing
# the math backend (its safe softmax, reductions and symbolic broadcasts) made an 8-layer decoder's
# capture 1.2x slower (`benchmarks/capture_time.py`); the graph is the same less a no-op ``contiguous``.
_UNNEEDED_PATCHES = frozenset({("torch.nn.functional", "scaled_dot_product_attention")})


@contextlib.contextmanager
def transformers_export_patches(unneeded: Collection[tuple[str, str]] = _UNNEEDED_PATCHES) -> Iterator[None]:
    """transformers' own patches for torch.export (sliding-window cache layers traced as full ones,
    …), where this transformers has them, less the `unneeded` ones (module, attribute). Those of model
    modules not imported are left out (the model being exported uses none of them, and importing the
    30-odd vision and audio modules they patch took over a second)."""
    try:
        import transformers.exporters.exporter_dynamo  # noqa: F401  (registers the "dynamo" patches)
        from transformers.exporters import utils
    except ImportError:
        yield
        return
    resolved = [
        (owner, attribute, factory)
        for path, attribute, factory in utils._PATCHES.get("dynamo", [])
        if (path, attribute) not in unneeded
        and _imported_model_module(path)
        and (owner := utils.import_dotted_path(path, missing_ok=True)) is not None
    ]
    with utils.patch_attributes(resolved):
        yield


def _imported_model_module(path: str) -> bool:
    """False for a path in a model module (``transformers.models.<model>.<module>.…``) not imported yet."""
    parts = path.split(".")
    return parts[:2] != ["transformers", "models"] or ".".join(parts[:4]) in sys.modules
