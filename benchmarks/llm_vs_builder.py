"""onnxlens' `export_for_generation` side by side with onnxruntime-genai's model builder
(``python -m onnxruntime_genai.models.builder -m <folder> -o <out> -p <precision> -e cpu``) on the same
saved random weights, in one run: export seconds, folder size, prefill ms and decode ms/token in
onnxruntime-genai, tokens against ``generate()`` (fp32) or agreement with the fp32 model (int4, int8);
and the int4 token agreement of both on a tiny Llama trained here (random weights predict near ties,
where agreement means little).

Both tools export from the command line, folder to folder (ours: ``python -m exporter <folder> -o <out>
--precision <precision> --no-generation-check``; neither checks by generating), each in a fresh process
(imports included; onnxlens' modules byte-compiled first, as an installed package's are), one after
another; the decode runs are interleaved (ours, builder, ours, builder …) and the best of `--passes` is
kept.

    python benchmarks/llm_vs_builder.py                       # the issue's size: hidden 1024, 8 layers, vocab 32000
    python benchmarks/llm_vs_builder.py --size small          # hidden 512, 4 layers, vocab 32000
    python benchmarks/llm_vs_builder.py --archs qwen2 --precisions fp32,int4 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

SIZES = {
    "full": dict(
        hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=2
    ),
    "small": dict(
        hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2
    ),
}
PROMPT_TOKENS, NEW_TOKENS = 32, 48
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def save_model(arch: str, size: dict, folder: str) -> None:
    """A random-weight model of `arch` (seed 0), saved as a Hugging Face folder."""
    import torch
    import transformers

    config_class = {"qwen2": transformers.Qwen2Config, "llama": transformers.LlamaConfig}[arch]
    config = config_class(
        **size,
        vocab_size=32000,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    save_tokenizer(folder, config.vocab_size)


def save_tokenizer(folder: str, vocab_size: int) -> None:
    """A word-level tokenizer of `vocab_size` made-up tokens: the builder loads the folder's tokenizer
    (Llama's own class would need sentencepiece); the benchmark feeds token ids."""
    import tokenizers
    import transformers

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, vocab_size)}}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.save_pretrained(folder)


def save_trained(folder: str) -> list[list[int]]:
    """A 2-layer Llama (hidden 64, byte vocabulary) trained for a few seconds on a repeated sentence; its prompts."""
    import torch
    import transformers

    text = "the quick brown fox jumps over the lazy dog, and the dog sleeps. "
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    data = torch.tensor(list((text * 8).encode()))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(120):
        starts = torch.randint(0, len(data) - 33, (16,))
        batch = torch.stack([data[s : s + 33] for s in starts])
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(folder)
    save_tokenizer(folder, config.vocab_size)
    return [list(text[i : i + 9].encode()) for i in (0, 10, 20, 30)]


def byte_compile_onnxlens() -> None:
    """Byte-compile onnxlens' modules, as pip does when it installs a package (it did the builder's): a
    checkout run where Python writes no bytecode (``PYTHONDONTWRITEBYTECODE``) compiles them from source in
    every export, 0.3-0.5 s of it."""
    import compileall

    compileall.compile_dir(os.path.join(ROOT, "exporter"), quiet=1)


def export(tool: str, source: str, out: str, precision: str) -> float:
    """Seconds of one export in a fresh process."""
    shutil.rmtree(out, ignore_errors=True)
    if tool == "onnxlens":
        command = [
            sys.executable,
            "-m",
            "exporter",
            source,
            "-o",
            out,
            "--precision",
            precision,
            "--no-generation-check",
        ]
    else:
        command = [
            sys.executable,
            "-m",
            "onnxruntime_genai.models.builder",
            "-m",
            source,
            "-o",
            out,
            "-p",
            precision,
            "-e",
            "cpu",
        ]
    start = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if run.returncode:
        raise RuntimeError(f"{tool} {precision} failed:\n{run.stderr[-3000:]}")
    return seconds


def folder_mb(folder: str) -> float:
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)) / 2**20


def genai_generate(folder: str, prompt: list[int], new_tokens: int) -> tuple[list[int], float, float, float]:
    """Greedy tokens from onnxruntime-genai, prefill ms, decode ms/token: the mean and the median step (the
    median is not moved by the few steps another process delays on a shared machine)."""
    import onnxruntime_genai as og

    model = og.Model(folder)
    params = og.GeneratorParams(model)
    length = len(prompt) + new_tokens
    params.set_search_options(max_length=length, min_length=length, do_sample=False, batch_size=1)  # no early end
    generator = og.Generator(model, params)
    start = time.perf_counter()
    generator.append_tokens(np.array([prompt], dtype=np.int32))
    prefill = (time.perf_counter() - start) * 1000
    steps = []
    while not generator.is_done():
        start = time.perf_counter()
        generator.generate_next_token()
        steps.append((time.perf_counter() - start) * 1000)
    tokens = [int(t) for t in generator.get_sequence(0)][len(prompt) :]
    decode = steps[1:] or [float("nan")]
    return tokens, prefill, float(np.mean(decode)), float(np.median(decode))


def eager_tokens(source: str, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(source, torch_dtype="float32").eval()
    with torch.no_grad():
        return [
            model.generate(
                torch.tensor([p]), max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0
            )[0, len(p) :].tolist()
            for p in prompts
        ]


def agreement(got: list[int], want: list[int]) -> float:
    return sum(a == b for a, b in zip(got, want)) / len(want)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--archs", default="qwen2,llama")
    parser.add_argument("--precisions", default="fp32,int4,int8")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--keep", help="a folder to keep the saved models and both tools' exports in")
    args = parser.parse_args()
    byte_compile_onnxlens()
    work = args.keep or tempfile.mkdtemp(prefix="llm_vs_builder_")
    rows = []
    prompt = list(np.random.default_rng(0).integers(3, 32000, PROMPT_TOKENS))
    for arch in args.archs.split(","):
        source = os.path.join(work, arch)
        save_model(arch, SIZES[args.size], source)
        [expected] = eager_tokens(source, [prompt], NEW_TOKENS)
        fp32_tokens: dict[str, list[int]] = {}
        for precision in args.precisions.split(","):
            folders = {tool: os.path.join(work, f"{arch}-{precision}-{tool}") for tool in ("onnxlens", "builder")}
            seconds = {tool: export(tool, source, folders[tool], precision) for tool in folders}
            best: dict[str, tuple] = {}
            for _ in range(args.passes):
                for tool, folder in folders.items():
                    tokens, *times = genai_generate(folder, prompt, NEW_TOKENS)
                    old = best.get(tool)
                    best[tool] = (tokens, *([min(t, o) for t, o in zip(times, old[1:])] if old else times))
            for tool, (tokens, prefill, decode, median) in best.items():
                if precision == "fp32":
                    fp32_tokens[tool] = tokens
                rows.append(dict(
                    arch=arch, tool=tool, precision=precision, export_s=seconds[tool], folder_mb=folder_mb(folders[tool]),
                    prefill_ms=prefill, decode_ms=decode, decode_median_ms=median, same_as_generate=sum(a == b for a, b in zip(tokens, expected)),
                    agreement=agreement(tokens, expected),
                ))  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    trained = os.path.join(work, "trained")
    prompts = save_trained(trained)
    expected = eager_tokens(trained, prompts, 16)
    for tool in ("onnxlens", "builder"):
        folder = os.path.join(work, f"trained-int4-{tool}")
        export(tool, trained, folder, "int4")
        got = [genai_generate(folder, p, 16)[0] for p in prompts]
        rows.append(
            dict(
                arch="trained-llama",
                tool=tool,
                precision="int4",
                agreement=float(np.mean([agreement(g, e) for g, e in zip(got, expected)])),
            )
        )
        print(json.dumps(rows[-1]), flush=True)
    print(table(rows, args.size))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def table(rows: list[dict], size: str) -> str:
    lines = [
        f"size {size}: prompt {PROMPT_TOKENS} tokens, {NEW_TOKENS} new, greedy in onnxruntime-genai (best of passes)",
        "| arch | precision | tool | export s | folder MB | prefill ms | decode ms/token (mean, median step) "
        "| tokens = generate() (fp32) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "export_s" in r:
            lines.append(
                f"| {r['arch']} | {r['precision']} | {r['tool']} | {r['export_s']:.1f} | {r['folder_mb']:.0f} | {r['prefill_ms']:.0f} "
                f"| {r['decode_ms']:.2f}, {r['decode_median_ms']:.2f} | {r['same_as_generate']}/{NEW_TOKENS} |"
            )
    lines += ["", "| trained tiny Llama, int4 | token agreement with fp32 generate() |", "|---|---|"]
    lines += [f"| {r['tool']} | {r['agreement']:.1%} |" for r in rows if r["arch"] == "trained-llama"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
