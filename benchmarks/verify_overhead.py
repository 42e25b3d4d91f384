"""What `--verify` costs: verified export time / plain export time over the corpus, and peak RSS.

    python benchmarks/verify_overhead.py [--cases a,b] [--repeats 3] [--no-rss]

For each corpus model, in one warm process, a plain export (`ExportOptions()`) and a verified one
(`ExportOptions(verify=True)`) are timed interleaved (plain, verify, plain, verify, …), each on a
freshly built model. The corpus's models match, so a verified export runs the final model once in
onnxruntime and the model once eagerly; the bisection that follows a divergence is timed on its
own (`divergence.bisect` on the same export: one more onnxruntime session, one FX-graph run), as a
share of the plain export, with the nodes it compared and the share of FX values it could map.
Then, unless ``--no-rss``, the largest Hugging Face model of the corpus and a larger LLaMA (random
weights, ``--large-layers`` layers of width 1024: 8 layers ≈ 170M parameters) are exported in fresh
processes — plain, verified, and verified followed by a bisection — and each process's time and peak
RSS (``ru_maxrss``) are printed. ``--faults`` instead exports the injected faults of
``tests/test_verify.py`` with ``verify=True`` and prints, for each, the line found, the nodes compared,
the onnxruntime sessions and runs, and the seconds (export, and its verify stage).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import corpus  # noqa: E402
import torch  # noqa: E402

import exporter  # noqa: E402
from exporter.api import Exporter  # noqa: E402
from exporter.verify import (
    divergence,
    numerics,  # noqa: E402
)


def _export(case: corpus.Case, verify: bool) -> float:
    model, args, kwargs = case.build()
    start = time.perf_counter()
    Exporter(exporter.ExportOptions(verify=verify), model, args, kwargs).export()
    return time.perf_counter() - start


def _bisect(case: corpus.Case) -> tuple[float, divergence.Bisection]:
    model, args, kwargs = case.build()
    job = Exporter(exporter.ExportOptions(), model, args, kwargs)
    export_output = job.export()
    verifier = job._verifier
    inputs = [numerics.to_numpy(x) for x in verifier.input_adapter.apply(*args, **kwargs)]
    feeds = {i.name: x for i, x in zip(export_output.model.graph.inputs, inputs)}
    start = time.perf_counter()
    result = divergence.bisect(verifier.program, export_output.model, feeds, args, kwargs, verifier.tolerances)
    return time.perf_counter() - start, result


def _params(case: corpus.Case) -> int:
    model, _, _ = case.build()
    return sum(p.numel() for p in model.parameters()) if isinstance(model, torch.nn.Module) else 0


MODES = ("plain", "verify", "verify+bisect")


def _large_llama(layers: int) -> corpus.Built:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=256,
        attn_implementation=corpus.HF_ATTN,
    )
    return LlamaForCausalLM(config).eval(), (), corpus._token_inputs(32000, 2, 64)


def _child(name: str, mode: str, layers: int) -> None:
    """Export `name` (a corpus case, or "large") in `mode`; print seconds, peak RSS in MiB and parameters."""
    import resource

    model, args, kwargs = _large_llama(layers) if name == "large" else corpus.get(name).build()
    start = time.perf_counter()
    job = Exporter(exporter.ExportOptions(verify=mode != "plain"), model, args, kwargs)
    export_output = job.export()
    if mode == "verify+bisect":  # as after a divergence: one more onnxruntime session, one FX-graph run
        verifier = job._verifier
        inputs = [numerics.to_numpy(x) for x in verifier.input_adapter.apply(*args, **kwargs)]
        feeds = {i.name: x for i, x in zip(export_output.model.graph.inputs, inputs)}
        divergence.bisect(verifier.program, export_output.model, feeds, args, kwargs, verifier.tolerances)
    seconds = time.perf_counter() - start
    print(
        seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, sum(p.numel() for p in model.parameters())
    )


def _fresh_processes(name: str, layers: int, repeats: int) -> None:
    """Each mode `repeats` times, interleaved, each in a fresh process: median seconds, median peak RSS."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    results: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    for _ in range(repeats):
        for mode in MODES:
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--child", name, mode, "--large-layers", str(layers)],
                capture_output=True,
                text=True,
                cwd=root,
                env={**os.environ, "PYTHONPATH": root},
                check=True,
            )
            seconds, rss, params = out.stdout.split()
            results[mode].append((float(seconds), float(rss)))
    plain = statistics.median(s for s, _ in results["plain"])
    print(
        f"{name} ({int(params) / 1e6:.1f}M parameters), fresh processes, median of {repeats}: "
        + "; ".join(
            f"{mode} {statistics.median(s for s, _ in runs):.1f}s ({statistics.median(s for s, _ in runs) / plain:.2f}x), "
            f"peak RSS {statistics.median(r for _, r in runs):.0f} MiB"
            for mode, runs in results.items()
        )
    )


def _faults() -> None:
    import test_verify as t
    from fixtures import diverging_models as models

    faults = [
        (
            "sigmoid 1% high",
            "gated-sigmoid",
            lambda: models.Gated().eval(),
            (5, 16),
            torch.float32,
            t.sigmoid_one_percent_high,
            "sigmoid",
            None,
        ),
        (
            "softmax overflow",
            "attention-softmax",
            lambda: models.ScaledAttention(40.0).eval(),
            (2, 6, 16),
            torch.float32,
            t.softmax_without_max,
            "softmax",
            "int",
        ),
        (
            "float16 norm 5% high",
            "half-normalize",
            lambda: models.NormalizedHalf().eval().half(),
            (4, 64),
            torch.float16,
            t.norm_five_percent_high,
            "linalg_vector_norm",
            None,
        ),
        (
            "mean within tolerance, amplified",
            "centered-sub",
            lambda: models.Centered().eval(),
            (3, 16),
            torch.float32,
            t.mean_ten_ppm_high,
            "mean",
            "dim",
        ),
    ]
    for title, marker, build, shape, dtype, function, name, overload in faults:
        torch.manual_seed(0)
        model, x = build(), torch.randn(*shape).to(dtype)
        options = exporter.ExportOptions(verify=True, onnx_registry=t.registry_with(function, name, overload))
        job = Exporter(options, model, (x,), {})
        start = time.perf_counter()
        try:
            job.export()
        except exporter.OnnxExporterError:
            pass
        seconds = time.perf_counter() - start
        [error] = [d for d in job.ctx.errors() if d.rule.id == "FXE0021"]
        p = error.properties
        print(
            f"{title:34} line {error.location.line} (expected {t.line_of(marker)}) {p['fxTarget']}: "
            f"{p['nodesCompared']} nodes compared, {p['ortSessions']} sessions, {p['ortRuns']} runs; "
            f"export {seconds:.2f}s, verify stage {job.timings['verify']:.2f}s"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", help="comma-separated corpus case names (default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-rss", action="store_true")
    parser.add_argument("--large-layers", type=int, default=8)
    parser.add_argument("--faults", action="store_true", help="only the injected faults of tests/test_verify.py")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child, args.large_layers)
        return
    if args.faults:
        _faults()
        return
    cases = [corpus.get(n) for n in args.cases.split(",")] if args.cases else list(corpus.CASES)
    ratios: dict[str, float] = {}
    print(
        f"{'case':28} {'plain s':>8} {'verify s':>8} {'ratio':>6} {'bisect/plain':>12} {'compared':>8} {'mapped':>6} {'ort runs':>8} first divergence"
    )
    for case in cases:
        plain, verified = [], []
        try:
            for _ in range(args.repeats):
                plain.append(_export(case, False))
                verified.append(_export(case, True))
        except exporter.OnnxExporterError as e:
            print(f"{case.name:28} failed: {str(e).splitlines()[0][:100]}")
            continue
        p, v = statistics.median(plain), statistics.median(verified)
        ratios[case.name] = v / p
        if case.ort_note:  # onnxruntime does not run it: verification skips it, nothing to bisect
            print(f"{case.name:28} {p:8.3f} {v:8.3f} {v / p:6.2f} {'(not run in onnxruntime)':>12}", flush=True)
            continue
        bisect_seconds, result = _bisect(case)
        first = result.divergence.node.name if result.divergence else "-"
        print(
            f"{case.name:28} {p:8.3f} {v:8.3f} {v / p:6.2f} {bisect_seconds / p:12.2f} {result.compared:8d} "
            f"{result.mapped_fraction:6.2f} {result.ort_runs:8d} {first}",
            flush=True,
        )
    values = sorted(ratios.values())
    print(
        f"\nverify/plain over {len(values)} models: median {statistics.median(values):.2f}, max {values[-1]:.2f} ({max(ratios, key=ratios.get)})"
    )
    hf = [c for c in cases if "hf" in c.tags]
    if hf:
        largest = max(hf, key=_params)
        if largest.name in ratios:
            print(
                f"largest Hugging Face model {largest.name} ({_params(largest) / 1e6:.2f}M parameters): verify/plain {ratios[largest.name]:.2f}"
            )
        if not args.no_rss:
            _fresh_processes(largest.name, args.large_layers, args.repeats)
    if not args.no_rss:
        _fresh_processes("large", args.large_layers, args.repeats)


if __name__ == "__main__":
    main()
