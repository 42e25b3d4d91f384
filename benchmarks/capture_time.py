"""Capture time of a decoder LLM's generation graph (`export_for_generation`'s wrapper, its example and
dynamic shapes): dynamic (as exported) and static, with torch's fake-tensor cache on and off, in one
process, interleaved (warm-up first). The exporter turns the cache off for dynamic captures only
(`exporter/capture/extractor.py`); this shows why, as the ratio off / on per round.

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

    def capture(dynamic: bool, cache: bool) -> float:
        extractor._fake_tensor_cache = lambda _: torch._dynamo.config.patch(fake_tensor_cache_enabled=cache)
        start = time.perf_counter()
        with torch.no_grad(), transformers_export_patches():
            extractor.FXGraphExtractor().generate_fx(
                wrapper, example, {}, dynamic_shapes=shapes if dynamic else None, ctx=DiagnosticContext()
            )
        return time.perf_counter() - start

    capture(True, True)  # imports, lazy initialization
    print(f"{'capture':<8} {'cache on s':>10} {'cache off s':>11} {'off / on':>9}")
    for dynamic in (True, False):
        ratios, on, off = [], [], []
        for _ in range(args.rounds):
            on.append(capture(dynamic, True))
            off.append(capture(dynamic, False))
            ratios.append(off[-1] / on[-1])
        label = "dynamic" if dynamic else "static"
        print(f"{label:<8} {min(on):>10.2f} {min(off):>11.2f} {statistics.median(ratios):>9.2f}")


if __name__ == "__main__":
    main()
