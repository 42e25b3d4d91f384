"""onnxlens's generation export side by side with optimum-onnx's, on the same tiny causal LMs.

    python benchmarks/generation_vs_optimum.py --optimum-python OTHER_VENV/bin/python [--archs llama,gpt2]
        [--repeats 3] [--tokens 32] [--threads 1]

optimum-onnx pins transformers 4.57, so it runs from another virtualenv (``pip install
"optimum-onnx[onnxruntime]"`` there). Each tiny model of `tests/tiny_lms.py` is saved to disk once;
then, interleaved, a fresh process per export times the export call only (after imports):
``exporter.export_for_generation(model, dir, verify_generation=False)`` on the loaded model here,
``optimum.exporters.onnx.main_export(dir, task="text-generation-with-past")`` there (it loads the
model itself). Both models have the same input and output names, so the same onnxruntime loop
(`exporter.generation.check.greedy_generate`, `--threads` threads) decodes `--tokens` tokens with
each, interleaved; decode ms/token excludes the prefill. Parity: 16 greedy tokens, batch 1 and a
left-padded batch of 2, against ``generate(do_sample=False)`` of the same weights here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from tiny_lms import tiny_model  # noqa: E402

from exporter.generation.check import greedy_generate  # noqa: E402

ONNXLENS = """
import json, sys, time
from transformers import AutoModelForCausalLM
import exporter
model = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()
start = time.perf_counter()
exporter.export_for_generation(model, sys.argv[2], verify_generation=False)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""
OPTIMUM = """
import json, sys, time
from optimum.exporters.onnx import main_export
start = time.perf_counter()
main_export(sys.argv[1], output=sys.argv[2], task="text-generation-with-past")
print(json.dumps({"seconds": time.perf_counter() - start}))
"""
PADDED = ([[5, 17, 300, 42, 7, 99, 12], [0, 0, 0, 8, 9, 10, 11]], [[1] * 7, [0, 0, 0, 1, 1, 1, 1]])


def timed_export(python: str, script: str, model_dir: str, out: str) -> float:
    run = subprocess.run(
        [python, "-c", script, model_dir, out],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    if run.returncode:
        raise RuntimeError(run.stderr[-2000:])
    return json.loads(run.stdout.strip().splitlines()[-1])["seconds"]


def parity(model: torch.nn.Module, session: ort.InferenceSession) -> bool:
    for ids, mask in [([PADDED[0][0]], [PADDED[1][0]]), PADDED]:
        with torch.no_grad():
            expected = model.generate(
                torch.tensor(ids), attention_mask=torch.tensor(mask), max_new_tokens=16, do_sample=False, pad_token_id=0
            )[:, 7:]
        if greedy_generate(session, np.array(ids), np.array(mask), 16, {2}, 0).tokens.tolist() != expected.tolist():
            return False
    return True


def decode_ms(session: ort.InferenceSession, tokens: int) -> float:
    ids = np.array(PADDED[0][:1])
    start = time.perf_counter()
    result = greedy_generate(session, ids, np.ones_like(ids), tokens, set(), 0)
    return ((time.perf_counter() - start) * 1000 - result.prefill_ms) / len(result.decode_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimum-python", required=True)
    parser.add_argument("--archs", default="llama,gpt2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    print(f"{'arch':6} {'exporter':9} {'export s':>9} {'parity':>7} {'decode ms/tok':>14}")
    for name in args.archs.split(","):
        model = tiny_model(name)
        with tempfile.TemporaryDirectory() as work:
            model_dir = os.path.join(work, "hf")
            model.save_pretrained(model_dir)
            exporters = {"onnxlens": (sys.executable, ONNXLENS), "optimum": (args.optimum_python, OPTIMUM)}
            seconds: dict[str, list[float]] = {e: [] for e in exporters}
            for r in range(args.repeats):
                for e, (python, script) in exporters.items():
                    seconds[e].append(timed_export(python, script, model_dir, os.path.join(work, f"{e}{r}")))
            sessions = {
                e: ort.InferenceSession(
                    os.path.join(work, f"{e}0", "model.onnx"), options, providers=["CPUExecutionProvider"]
                )
                for e in exporters
            }
            latency: dict[str, list[float]] = {e: [] for e in exporters}
            for _ in range(args.repeats):
                for e, session in sessions.items():
                    latency[e].append(decode_ms(session, args.tokens))
            for e, session in sessions.items():
                ok = "ok" if parity(model, session) else "DIFFER"
                print(
                    f"{name:6} {e:9} {statistics.median(seconds[e]):9.2f} {ok:>7} {statistics.median(latency[e]):14.3f}"
                )


if __name__ == "__main__":
    main()
