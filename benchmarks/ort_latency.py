"""onnxruntime latency of several models compared on a noisy machine: many short interleaved rounds.

`measure` loads every model in one process (CPU provider, 1 intra-op and 1 inter-op thread) and,
after a warm-up, runs rounds in which each model runs one short block (~``BLOCK_SECONDS``, at least one
run) in a random order, recording the median time of the block's runs. Load that comes and goes then
hits the models alike, and `ratio_summary` compares two models round by round: the median of the per-round
ratios, with a 95 % confidence interval of that median (order statistics) and the ratios' p25-p75.
Two sessions of the same model differ by up to 3 % this way on a loaded 2-core machine, beyond that
interval (timed in long blocks, SigLIP with identical graphs was 1.11x in one run, 1.005x in the next).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WARMUP_RUNS = 5
WARMUP_SECONDS = 0.05  # per model, at least WARMUP_RUNS runs
BLOCK_SECONDS = 0.001  # one model's runs in a round
BUDGET_SECONDS = 3.0  # rounds of all models together, bounded by MIN_ROUNDS and MAX_ROUNDS
MIN_ROUNDS = 200
MAX_ROUNDS = 600
Z95 = 1.96


def session(model_bytes: bytes, optimized_path: Path | None = None) -> Any:
    """A CPU onnxruntime session with one intra-op and one inter-op thread (writing the graph its
    optimizer made to `optimized_path`)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def _run_seconds(sess: Any, feeds: dict[str, Any], runs: int) -> list[float]:
    """The seconds of each of `runs` consecutive runs."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - start)
    return times


def measure(models: dict[str, tuple[Any, dict[str, Any]]], seed: int = 0) -> dict[str, list[float]]:
    """Per model (name -> (session, feeds)), the median milliseconds of its runs in each round (rounds
    aligned): a run another process preempted changes a block's median only when it has one run."""
    blocks, round_seconds = {}, 0.0
    for name, (sess, feeds) in models.items():
        warm: list[float] = []
        while len(warm) < WARMUP_RUNS or sum(warm) < WARMUP_SECONDS:
            warm += _run_seconds(sess, feeds, 1)
        blocks[name] = max(1, round(BLOCK_SECONDS / max(min(warm), 1e-7)))
        round_seconds += blocks[name] * statistics.median(warm)
    rounds = min(MAX_ROUNDS, max(MIN_ROUNDS, int(BUDGET_SECONDS / round_seconds)))
    rng = random.Random(seed)
    order = list(models)
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            sess, feeds = models[name]
            times[name].append(statistics.median(_run_seconds(sess, feeds, blocks[name])) * 1e3)
    return times


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between order statistics."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median_ci95(values: Sequence[float]) -> tuple[float, float]:
    """A distribution-free 95 % confidence interval of the median (order statistics n/2 -+ 1.96 sqrt(n)/2)."""
    ordered = sorted(values)
    n = len(ordered)
    half = Z95 * math.sqrt(n) / 2
    return ordered[max(0, math.floor(n / 2 - half))], ordered[min(n - 1, math.ceil(n / 2 + half) - 1)]


def ratio_summary(ours: Sequence[float], theirs: Sequence[float]) -> dict[str, Any]:
    """Round-by-round ``ours / theirs``: median, 95 % CI of the median, p25 and p75, rounds."""
    ratios = [a / b for a, b in zip(ours, theirs) if b > 0]
    low, high = median_ci95(ratios)
    return {
        "median": statistics.median(ratios),
        "ci95": [low, high],
        "p25": percentile(ratios, 25),
        "p75": percentile(ratios, 75),
        "rounds": len(ratios),
    }


def verdict(summary: dict[str, Any], goal: float) -> str:
    """``over`` when the whole CI is above `goal`, ``ok`` when it is at or below, else ``unsure``."""
    low, high = summary["ci95"]
    return "over" if low > goal else "ok" if high <= goal else "unsure"
