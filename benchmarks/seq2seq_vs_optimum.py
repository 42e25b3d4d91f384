"""onnxlens's encoder–decoder export side by side with optimum-onnx's (and onnxruntime-genai's model
builder for Whisper), on the same tiny models.

    python benchmarks/seq2seq_vs_optimum.py --optimum-python /work/venvs/optimum/bin/python
        [--archs whisper,t5,bart,marian] [--repeats 3] [--tokens 32] [--threads 1]

optimum-onnx pins transformers 4.57, so it runs from another virtualenv (torch, then
``pip install "optimum-onnx[onnxruntime]"`` there). Each tiny model of `tests/tiny_seq2seq.py` is
saved to disk once; then, interleaved, a fresh process per export (``process s``: its wall time,
imports included) times the export call only (``export s``):
``exporter.export_for_generation(model, dir, verify_generation=False)`` here,
``optimum.exporters.onnx.main_export(dir, task=...-with-past)`` there; the builder
(``python -m onnxruntime_genai.models.builder``, Whisper) is timed as a process only.

Parity: 16 greedy tokens, batch 1 and a batch of 2 (text: left-padded), against transformers'
greedy ``generate`` (without logits processors) of the same weights here: ours and optimum's
folders through the same onnxruntime loop (`exporter.generation.seq2seq_check.greedy_generate_seq2seq`:
both have optimum's names), the builder's through onnxruntime-genai. Decode ms/token: `--tokens`
tokens, the first decoder step excluded, interleaved, `--threads` threads. Last, optimum's own
``ORTModelForSeq2SeqLM`` / ``ORTModelForSpeechSeq2Seq`` loads our folder in its virtualenv and
generates; its tokens are compared with its transformers' eager ``generate`` of the same weights.
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
from typing import Any

import numpy as np
import onnxruntime as ort
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from tiny_seq2seq import tiny_seq2seq  # noqa: E402

from exporter.generation.seq2seq_check import eager_generate, greedy_generate_seq2seq  # noqa: E402

ONNXLENS = """
import json, sys, time
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq
import exporter
speech = AutoConfig.from_pretrained(sys.argv[1]).model_type == "whisper"
model = (AutoModelForSpeechSeq2Seq if speech else AutoModelForSeq2SeqLM).from_pretrained(sys.argv[1]).eval()
start = time.perf_counter()
exporter.export_for_generation(model, sys.argv[2], verify_generation=False)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""
OPTIMUM = """
import json, sys, time
from transformers import AutoConfig
from optimum.exporters.onnx import main_export
speech = AutoConfig.from_pretrained(sys.argv[1]).model_type == "whisper"
task = "automatic-speech-recognition-with-past" if speech else "text2text-generation-with-past"
start = time.perf_counter()
main_export(sys.argv[1], output=sys.argv[2], task=task)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""
BUILDER = [
    "-m",
    "onnxruntime_genai.models.builder",
    "-m",
    "openai/whisper-tiny",
    "-p",
    "fp32",
    "-e",
    "cpu",
]  # -m only names the model: its weights and config come from -i
OPTIMUM_LOADS = """
import json, sys, torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq
from optimum.onnxruntime import ORTModelForSeq2SeqLM, ORTModelForSpeechSeq2Seq
model_dir, folder = sys.argv[1], sys.argv[2]
speech = AutoConfig.from_pretrained(model_dir).model_type == "whisper"
eager = (AutoModelForSpeechSeq2Seq if speech else AutoModelForSeq2SeqLM).from_pretrained(model_dir).eval()
try:
    loaded = (ORTModelForSpeechSeq2Seq if speech else ORTModelForSeq2SeqLM).from_pretrained(folder, use_cache=True)
except Exception as e:
    print(json.dumps({"loads": False, "error": f"{type(e).__name__}: {e}"[:300]}))
    sys.exit()
if speech:
    inputs = {"input_features": torch.randn(2, 80, 3000, generator=torch.Generator().manual_seed(0))}
else:
    inputs = {"input_ids": torch.tensor([[5, 17, 300, 42, 7, 99, 12], [3, 4, 5, 8, 9, 10, 11]])}
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
kwargs = dict(max_new_tokens=16, do_sample=False, num_beams=1, decoder_input_ids=torch.ones(2, 1, dtype=torch.long))
with torch.no_grad():
    expected, produced = eager.generate(**inputs, **kwargs).tolist(), loaded.generate(**inputs, **kwargs).tolist()
print(json.dumps({"loads": True, "merged": loaded.decoder.is_merged, "equal": expected == produced,
                  "tokens": sum(len(row) - 1 for row in produced)}))
"""
TEXT = ([[5, 17, 300, 42, 7, 99, 12], [0, 0, 0, 8, 9, 10, 11]], [[1] * 7, [0, 0, 0, 1, 1, 1, 1]])


def run(command: list[str]) -> tuple[dict, float]:
    start = time.perf_counter()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=env)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    lines = done.stdout.strip().splitlines()
    return (json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}), seconds


def inputs_of(name: str, batch: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    if name == "whisper":
        return torch.randn(batch, 80, 3000, generator=torch.Generator().manual_seed(0)), None
    ids, mask = TEXT
    return torch.tensor(ids[-batch:]), torch.tensor(mask[-batch:])


def feeds(inputs: torch.Tensor, mask: torch.Tensor | None) -> dict[str, np.ndarray]:
    if mask is None:
        return {"input_features": inputs.numpy()}
    return {"input_ids": inputs.numpy(), "attention_mask": mask.numpy()}


def sessions(folder: str, options: ort.SessionOptions) -> tuple[ort.InferenceSession, ort.InferenceSession]:
    load = [os.path.join(folder, f) for f in ("encoder_model.onnx", "decoder_model_merged.onnx")]
    return tuple(ort.InferenceSession(path, options, providers=["CPUExecutionProvider"]) for path in load)


def ort_tokens(pair: tuple, inputs: torch.Tensor, mask: torch.Tensor | None, tokens: int, eos: set[int]) -> Any:
    start = np.ones((inputs.shape[0], 1), dtype=np.int64)
    return greedy_generate_seq2seq(*pair, feeds(inputs, mask), start, tokens, eos, 0)


def decode_ms(name: str, exporter: str, folder: str, pair: tuple | None, tokens: int) -> float:
    """Decode ms/token of batch 1 (the first decoder step excluded)."""
    inputs, mask = inputs_of(name, 1)
    if exporter == "builder":
        return genai_run(folder, inputs, tokens)[1]
    return statistics.mean(ort_tokens(pair, inputs, mask, tokens, set()).decode_ms)


def genai_run(folder: str, inputs: torch.Tensor, tokens: int) -> tuple[list[list[int]], float]:
    """Greedy tokens (after the start token) and decode ms/token (first step excluded) in onnxruntime-genai."""
    import onnxruntime_genai as og

    model = og.Model(folder)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=1 + tokens, do_sample=False, batch_size=inputs.shape[0])
    generator = og.Generator(model, params)
    features = inputs.numpy()  # read in place by genai: kept alive
    generator.set_model_input("audio_features", features)
    generator.append_tokens(np.ones((inputs.shape[0], 1), dtype=np.int32))
    times = []
    while not generator.is_done():
        start = time.perf_counter()
        generator.generate_next_token()
        times.append((time.perf_counter() - start) * 1000)
    rows = [generator.get_sequence(r).tolist()[1:] for r in range(inputs.shape[0])]
    return rows, statistics.mean(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimum-python", required=True)
    parser.add_argument("--archs", default="whisper,t5,bart,marian")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    print(f"{'arch':8} {'exporter':9} {'export s':>9} {'process s':>10} {'parity':>7} {'decode ms/tok':>14}")
    loader_results = {}
    for name in args.archs.split(","):
        model = tiny_seq2seq(name)
        with tempfile.TemporaryDirectory() as work:
            model_dir = os.path.join(work, "hf")
            model.save_pretrained(model_dir)
            exporters = {
                "onnxlens": [sys.executable, "-c", ONNXLENS, model_dir],
                "optimum": [args.optimum_python, "-c", OPTIMUM, model_dir],
            }
            if name == "whisper":
                exporters["builder"] = [
                    sys.executable,
                    *BUILDER,
                    "-i",
                    model_dir,
                    "-c",
                    os.path.join(work, "cache"),
                    "-o",
                ]
            seconds = {e: [] for e in exporters}
            process = {e: [] for e in exporters}
            for r in range(args.repeats):
                for e, command in exporters.items():
                    result, wall = run([*command, os.path.join(work, f"{e}{r}")])
                    seconds[e].append(result.get("seconds", float("nan")))
                    process[e].append(wall)
            folders = {e: os.path.join(work, f"{e}0") for e in exporters}
            pairs = {e: sessions(folders[e], options) for e in exporters if e != "builder"}
            latency = {e: [] for e in exporters}
            failures: dict[str, str] = {}
            for _ in range(args.repeats):
                for e in exporters:
                    try:
                        latency[e].append(decode_ms(name, e, folders[e], pairs.get(e), args.tokens))
                    except Exception as error:  # an export that does not run: reported, not fatal
                        failures[e] = f"{type(error).__name__}: {str(error)[:300]}"
            parity = {e: e not in failures for e in exporters}
            for batch in (1, 2):
                inputs, mask = inputs_of(name, batch)
                expected = eager_generate(model, inputs, mask, torch.ones(batch, 1, dtype=torch.long), 16)[0].tolist()
                for e in exporters:
                    if e in failures:
                        continue
                    if e == "builder":
                        produced = genai_run(folders[e], inputs, 16)[0]
                    else:
                        produced = ort_tokens(pairs[e], inputs, mask, 16, {2}).tokens.tolist()
                    parity[e] &= produced == expected
            for e in exporters:
                ok = "ok" if parity[e] else "FAILS" if e in failures else "DIFFER"
                export, latency_ms = statistics.median(seconds[e]), statistics.median(latency[e] or [float("nan")])
                print(f"{name:8} {e:9} {export:9.2f} {statistics.median(process[e]):10.2f} {ok:>7} {latency_ms:14.3f}")
            for e, failure in failures.items():
                print(f"  {e} fails in onnxruntime: {failure}")
            for e in ("onnxlens", "optimum"):
                loads = run([args.optimum_python, "-c", OPTIMUM_LOADS, model_dir, folders[e]])[0]
                loader_results[f"{name} ({e}'s folder)"] = loads
    print("\noptimum's ORTModelFor*.from_pretrained (its generate vs its transformers' eager generate, batch 2):")
    for name, result in loader_results.items():
        print(f"  {name:28} {json.dumps(result)}")


if __name__ == "__main__":
    main()
