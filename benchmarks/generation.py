"""Generation export per architecture: export time, parity, decode latency in onnxruntime vs eager.

    python benchmarks/generation.py [--archs llama,gpt2] [--tokens 32] [--repeats 5] [--threads 1]

For each tiny causal LM of `tests/tiny_lms.py`: `exporter.export_for_generation` ("export s": capture
to ONNX; "total s": the whole call, with writing the folder and its generation check, whose result is
"parity"), then, interleaved `--repeats` times, greedy generation of `--tokens`
tokens from one 7-token prompt eagerly (``model.generate(do_sample=False)``) and in onnxruntime with
the exported KV cache (`exporter.generation.check.greedy_generate`). Decode ms/token is the wall time
from the first generated token to the last, divided by the tokens after the first (the prefill is
excluded on both sides): eager from a streamer's timestamps, onnxruntime from the loop's own step
times. torch and onnxruntime use `--threads` threads. Medians; their ratio ORT / eager.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from tiny_lms import CONFIGS, tiny_model  # noqa: E402

import exporter  # noqa: E402
from exporter.generation.check import greedy_generate  # noqa: E402

PROMPT = [[5, 17, 300, 42, 7, 99, 12]]


class _Stamps:
    """A `generate` streamer that records when each token arrives (the first call is the prompt)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: torch.Tensor) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def eager_decode_ms(model: torch.nn.Module, tokens: int) -> tuple[float, list[int]]:
    stamps = _Stamps()
    ids = torch.tensor(PROMPT)
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=False,
            pad_token_id=0,
            streamer=stamps,
        )
    generated = stamps.times[1:]  # [0] is the prompt
    return (generated[-1] - generated[0]) * 1000 / (len(generated) - 1), out[0, ids.shape[1] :].tolist()


def ort_decode_ms(session: ort.InferenceSession, tokens: int) -> tuple[float, list[int]]:
    ids = np.array(PROMPT)
    start = time.perf_counter()
    result = greedy_generate(session, ids, np.ones_like(ids), tokens, set(), 0)
    total = (time.perf_counter() - start) * 1000
    return (total - result.prefill_ms) / (len(result.decode_ms)), result.tokens[0].tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=",".join(CONFIGS))
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    print(
        f"torch {torch.__version__}, onnxruntime {ort.__version__}, {args.threads} thread(s), {args.tokens} tokens, {args.repeats} interleaved repeats"
    )
    print(
        f"{'arch':8} {'export s':>9} {'total s':>8} {'parity':>8} {'eager ms/tok':>13} {'ORT ms/tok':>11} {'ORT/eager':>10}"
    )
    for name in args.archs.split(","):
        model = tiny_model(name)
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            result = exporter.export_for_generation(model, out)
            export_seconds = time.perf_counter() - start
            session = ort.InferenceSession(result.model_path, options, providers=["CPUExecutionProvider"])
            eager, onnx = [], []
            for _ in range(args.repeats):
                ms, eager_tokens = eager_decode_ms(model, args.tokens)
                eager.append(ms)
                ms, ort_tokens = ort_decode_ms(session, args.tokens)
                onnx.append(ms)
            same = "same" if eager_tokens == ort_tokens else "DIFFER"
        e, o = statistics.median(eager), statistics.median(onnx)
        parity = "ok" if result.parity.matched else "FAILED"
        print(
            f"{name:8} {result.export_seconds:9.2f} {export_seconds:8.2f} {parity:>8} {e:13.3f} {o:11.3f} {o / e:10.2f}   ({args.tokens} tokens {same})"
        )


if __name__ == "__main__":
    main()
