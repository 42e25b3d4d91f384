"""Capture time of a decoder LLM's generation graph (`export_for_generation`'s wrapper, its example and
dynamic shapes), in one process, interleaved (warm-up first), for two choices the exporter makes:

- torch's fake-tensor cache, on and off, for dynamic (as exported) and static captures: the exporter
  turns it off for dynamic captures only (`exporter/capture/extractor.py`);
- transformers' patch that traces SDPA's math backend, applied and left out: the generation exports
  leave it out (`exporter/generation/hf.py`).

Each row prints the best time of each variant and the median per-round ratio changed / as exported.

    python benchmarks/capture_time.py                     # Qwen2-style, hidden 1024, 8 layers, vocab 32000
    python benchmarks/capture_time.py --size small --rounds 5
"""

from __future__ import annotations

import argparse
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
    args = parser.parse_args()

    import transformers
    from llm_vs_builder import SIZES

    from exporter.capture import extractor
    from exporter.diagnostics import DiagnosticContext
    from exporter.generation.export import CausalLMWithCache, _example
    from exporter.generation.hf import transformers_export_patches

    config = transformers.Qwen2Config(**SIZES[args.size], vocab_size=32000, tie_word_embeddings=False)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    wrapper = CausalLMWithCache(model).eval()
    example, shapes = _example(model, uses_positions=True)
    exported_cache = extractor._fake_tensor_cache

    def capture(dynamic: bool, cache: bool | None = None, sdpa_math: bool = False) -> float:
        """Seconds of one capture; `cache` None: as the exporter decides."""
        extractor._fake_tensor_cache = (
            exported_cache if cache is None else lambda _: torch._dynamo.config.patch(fake_tensor_cache_enabled=cache)
        )
        patches = transformers_export_patches(unneeded=()) if sdpa_math else transformers_export_patches()
        start = time.perf_counter()
        with torch.no_grad(), patches:
            extractor.FXGraphExtractor().generate_fx(
                wrapper, example, {}, dynamic_shapes=shapes if dynamic else None, ctx=DiagnosticContext()
            )
        return time.perf_counter() - start

    rows = {
        "dynamic, fake-tensor cache on": (lambda: capture(True), lambda: capture(True, cache=True)),
        "static, fake-tensor cache off": (lambda: capture(False), lambda: capture(False, cache=False)),
        "dynamic, transformers' SDPA math patch": (lambda: capture(True), lambda: capture(True, sdpa_math=True)),
    }
    capture(True)  # imports, lazy initialization
    print(f"{'changed':<40} {'as exported s':>13} {'changed s':>9} {'changed / as exported':>22}")
    for label, (exported, changed) in rows.items():
        ratios, base, other = [], [], []
        for _ in range(args.rounds):
            base.append(exported())
            other.append(changed())
            ratios.append(other[-1] / base[-1])
        print(f"{label:<40} {min(base):>13.2f} {min(other):>9.2f} {statistics.median(ratios):>22.2f}")


if __name__ == "__main__":
    main()
