"""Capture time of a decoder LLM's generation graph (`export_for_generation`'s wrapper, its example and
dynamic shapes), in one process, interleaved (warm-up first), for choices the exporter makes:

- symbolic sizes against none: the dynamic capture as exported against a static one, which is torch.export's
  floor for this model (onnxruntime-genai's builder, which runs no model code, builds its graph in less);
- torch's fake-tensor cache, on and off, for dynamic (as exported) and static captures: the exporter
  turns it off for dynamic captures only (`exporter/capture/extractor.py`);
- transformers' patch that traces SDPA's math backend, applied and left out: the generation exports
  leave it out (`exporter/generation/hf.py`);
- the nodes' stack traces read from the live stack, user frames only, against torch's whole stack
  symbolized for every node (`extractor._KeptFrames`);
- ``tensor_meta`` without its memory format, against torch's contiguity checks in three layouts on
  symbolic strides for every node (`extractor._tensor_meta_without_layout`);
- the KV cache's layers holding the past tensors as given, against transformers' own filling, which
  concatenates each onto an empty tensor (`generation.hf.filled_cache`).

Each row prints the best time of each variant and the median per-round ratio changed / as exported.

    python benchmarks/capture_time.py                     # Qwen2-style, hidden 1024, 8 layers, vocab 32000
    python benchmarks/capture_time.py --size small --rounds 5
    python benchmarks/capture_time.py --only cache --rounds 5    # the rows whose label says "cache"
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=("full", "small"), default="full")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="the rows whose label contains this text")
    args = parser.parse_args()

    import transformers
    from llm_vs_builder import SIZES

    from exporter.capture import extractor
    from exporter.diagnostics import DiagnosticContext
    from exporter.generation import export
    from exporter.generation.export import CausalLMWithCache, _example
    from exporter.generation.hf import transformers_export_patches

    config = transformers.Qwen2Config(**SIZES[args.size], vocab_size=32000, tie_word_embeddings=False)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    wrapper = CausalLMWithCache(model).eval()
    example, shapes = _example(model, uses_positions=True)
    as_exported = {
        name: getattr(extractor, name) for name in ("_fake_tensor_cache", "_KeptFrames", "_tensor_meta_without_layout")
    }

    def capture(dynamic: bool, sdpa_math: bool = False, **changed: object) -> float:
        """Seconds of one capture, with `changed` attributes of `extractor` (the others as exported)."""
        for name, value in {**as_exported, **changed}.items():
            setattr(extractor, name, value)
        patches = transformers_export_patches(unneeded=()) if sdpa_math else transformers_export_patches()
        start = time.perf_counter()
        with torch.no_grad(), patches:
            extractor.FXGraphExtractor().generate_fx(
                wrapper, example, {}, dynamic_shapes=shapes if dynamic else None, ctx=DiagnosticContext()
            )
        return time.perf_counter() - start

    def cache(enabled: bool) -> object:
        return lambda _: torch._dynamo.config.patch(fake_tensor_cache_enabled=enabled)

    def concatenated_cache() -> float:
        """A capture whose cache is filled by transformers (``DynamicCache(ddp_cache_data=…)``)."""
        filled = export.filled_cache
        export.filled_cache = lambda past: transformers.DynamicCache(ddp_cache_data=past)
        try:
            return capture(True)
        finally:
            export.filled_cache = filled

    rows = {
        "static: no symbolic sizes": (lambda: capture(True), lambda: capture(False)),
        "dynamic, fake-tensor cache on": (lambda: capture(True), lambda: capture(True, _fake_tensor_cache=cache(True))),
        "static, fake-tensor cache off": (
            lambda: capture(False),
            lambda: capture(False, _fake_tensor_cache=cache(False)),
        ),
        "dynamic, transformers' SDPA math patch": (lambda: capture(True), lambda: capture(True, sdpa_math=True)),
        "dynamic, whole stacks symbolized": (
            lambda: capture(True),
            lambda: capture(True, _KeptFrames=torch.utils._traceback.CapturedTraceback),
        ),
        "dynamic, tensor_meta memory format": (
            lambda: capture(True),
            lambda: capture(True, _tensor_meta_without_layout=contextlib.nullcontext),
        ),
        "dynamic, cache filled by concatenation": (lambda: capture(True), concatenated_cache),
    }
    capture(True)  # imports, lazy initialization
    print(f"{'changed':<40} {'as exported s':>13} {'changed s':>9} {'changed / as exported':>22}")
    for label, (exported, changed) in rows.items():
        if args.only not in label:
            continue
        ratios, base, other = [], [], []
        for _ in range(args.rounds):
            base.append(exported())
            other.append(changed())
            ratios.append(other[-1] / base[-1])
        print(f"{label:<40} {min(base):>13.2f} {min(other):>9.2f} {statistics.median(ratios):>22.2f}")


if __name__ == "__main__":
    main()
