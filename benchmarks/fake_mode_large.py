"""Fake mode on models larger than comfortable: export time, peak memory, and saving real weights.

    python benchmarks/fake_mode_large.py export-7b            # LLaMA-7B under fake mode
    python benchmarks/fake_mode_large.py save-2b --dir /tmp/x  # ~2B LLaMA, 8+ GiB fp32 checkpoint

Each step runs in a fresh process (peak RSS is per process, from getrusage):

- ``export-7b``: build LLaMA-2-7B's architecture under `enable_fake_mode`, export; wall time and
  peak RSS.
- ``generation-7b``: LLaMA-2-7B's generation graph (KV-cache inputs and presents,
  `exporter.generation.export.export_graph`) under fake mode, in memory; wall time and peak RSS.
- ``save-2b``: write a real fp32 safetensors checkpoint for a ~2B LLaMA tensor by tensor (random
  values, never all in memory); export the model under fake mode; save with the checkpoint; report
  the peak RSS after export and after the save (the save's increase); then, in another process,
  load the saved model in onnxruntime and run it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import struct
import subprocess
import sys
import time

LLAMA_7B = dict(
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    max_position_embeddings=4096,
)
LLAMA_2B = dict(
    vocab_size=32000,
    hidden_size=2560,
    intermediate_size=6912,
    num_hidden_layers=26,
    num_attention_heads=20,
    num_key_value_heads=20,
    max_position_embeddings=4096,
)


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def fake_export(config_kwargs: dict):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import exporter

    config = LlamaConfig(**config_kwargs, use_cache=False)
    start = time.perf_counter()
    with exporter.enable_fake_mode() as ctx:
        model = LlamaForCausalLM(config).eval()
        input_ids = torch.randint(0, config.vocab_size, (1, 16))
    params = sum(p.numel() for p in model.parameters())
    export_output = exporter.dynamo_export(model, input_ids, export_options=exporter.ExportOptions(fake_context=ctx))
    return export_output, model, params, time.perf_counter() - start


def export_7b(_: argparse.Namespace) -> None:
    _, _, params, seconds = fake_export(LLAMA_7B)
    print(
        json.dumps(
            {
                "step": "export-7b",
                "params": params,
                "seconds": round(seconds, 1),
                "peak_rss_gib": round(peak_rss_gib(), 2),
            }
        )
    )


def generation_7b(_: argparse.Namespace) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    import exporter
    from exporter.generation.export import export_graph

    start = time.perf_counter()
    with exporter.enable_fake_mode() as ctx:
        model = LlamaForCausalLM(LlamaConfig(**LLAMA_7B)).eval()
    export_output = export_graph(model, exporter.ExportOptions(fake_context=ctx))
    inputs = [v.name for v in export_output.model.graph.inputs]
    print(
        json.dumps(
            {
                "step": "generation-7b",
                "graph_inputs": inputs[:4] + ["…"],
                "seconds": round(time.perf_counter() - start, 1),
                "peak_rss_gib": round(peak_rss_gib(), 2),
            }
        )
    )


def write_checkpoint(model, path: str) -> int:
    """A safetensors file with random fp32 values for every tensor of `model`, written one tensor at a time."""
    import torch

    entries = {name: tuple(t.shape) for name, t in {**model.state_dict(), **dict(model.named_buffers())}.items()}
    header, offset = {}, 0
    for name, shape in entries.items():
        size = 4 * int(torch.Size(shape).numel())
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    generator = torch.Generator().manual_seed(0)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for name, shape in entries.items():
            if name.endswith("inv_freq"):
                dim = shape[0] * 2
                tensor = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
            else:
                tensor = torch.randn(shape, generator=generator) * 0.02
            f.write(tensor.numpy().tobytes())
            del tensor
    return 8 + len(blob) + offset


def checkpoint_step(args: argparse.Namespace) -> None:
    """Write the ~2B model's fp32 checkpoint (in its own process: it does not count for the save)."""
    _, model, _, _ = fake_export(LLAMA_2B)
    start = time.perf_counter()
    size = write_checkpoint(model, os.path.join(args.dir, "llama2b.safetensors"))
    print(
        json.dumps(
            {
                "step": "write-checkpoint",
                "gib": round(size / 2**30, 2),
                "seconds": round(time.perf_counter() - start, 1),
            }
        ),
        flush=True,
    )


def save_2b(args: argparse.Namespace) -> None:
    os.makedirs(args.dir, exist_ok=True)
    checkpoint = os.path.join(args.dir, "llama2b.safetensors")
    if not os.path.exists(checkpoint):
        subprocess.run([sys.executable, __file__, "write-checkpoint", "--dir", args.dir], check=True)
    export_output, model, params, export_seconds = fake_export(LLAMA_2B)
    rss_after_export = rss_before_save = peak_rss_gib()
    start = time.perf_counter()
    export_output.save(os.path.join(args.dir, "llama2b.onnx"), model_state_dict=checkpoint)
    print(
        json.dumps(
            {
                "step": "save-2b",
                "params": params,
                "checkpoint_gib": round(os.path.getsize(checkpoint) / 2**30, 2),
                "export_seconds": round(export_seconds, 1),
                "save_seconds": round(time.perf_counter() - start, 1),
                "peak_rss_after_export_gib": round(rss_after_export, 2),
                "peak_rss_after_save_gib": round(peak_rss_gib(), 2),
                "save_increase_gib": round(peak_rss_gib() - rss_before_save, 2),
            }
        ),
        flush=True,
    )
    subprocess.run([sys.executable, __file__, "run-saved", "--dir", args.dir], check=True)


def run_saved(args: argparse.Namespace) -> None:
    import numpy as np
    import onnxruntime as ort

    start = time.perf_counter()
    session = ort.InferenceSession(os.path.join(args.dir, "llama2b.onnx"), providers=["CPUExecutionProvider"])
    ids = np.random.default_rng(0).integers(0, 32000, (1, 16), dtype=np.int64)
    (logits,) = session.run(None, {"input_ids": ids})[:1]
    print(
        json.dumps(
            {
                "step": "run-saved",
                "load_and_run_seconds": round(time.perf_counter() - start, 1),
                "logits_shape": list(logits.shape),
                "finite": bool(np.isfinite(logits).all()),
                "peak_rss_gib": round(peak_rss_gib(), 2),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["export-7b", "generation-7b", "save-2b", "write-checkpoint", "run-saved"])
    parser.add_argument("--dir", default="/tmp/onnxlens-fake-bench")
    args = parser.parse_args()
    steps = {
        "export-7b": export_7b,
        "generation-7b": generation_7b,
        "save-2b": save_2b,
        "write-checkpoint": checkpoint_step,
        "run-saved": run_saved,
    }
    steps[args.step](args)


if __name__ == "__main__":
    main()
