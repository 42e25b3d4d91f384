"""What diagnostics cost, and where they point.

    python benchmarks/diagnostics_overhead.py [--cases a,b] [--repeats 5]

For each corpus model, in one warm process, exports are timed interleaved (round-robin, so
machine noise hits every mode alike) in four modes:

- ``none``: diagnostics switched off (no results recorded, no full user stacks at capture);
- ``info``: the default (`DiagnosticOptions()`);
- ``debug``: `verbosity_level=logging.DEBUG` (per-node trail, graph dumps);
- ``op-debug``: `op_level_debug=True` at the default verbosity.

It prints per-model medians and ratios to ``none``, then the median ratio over models. It also
reports the share of FX nodes (with a stack trace) whose primary location is in user code.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import sys
import time
from collections.abc import Iterator

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import corpus  # noqa: E402
import torch  # noqa: E402

import exporter  # noqa: E402
from exporter.capture import extractor as capture  # noqa: E402
from exporter.diagnostics import context  # noqa: E402
from exporter.diagnostics.locations import stack_of  # noqa: E402

MODES = ("none", "info", "debug", "op-debug")


@contextlib.contextmanager
def diagnostics_off() -> Iterator[None]:
    """Record nothing and keep torch.export's default (forward-only) stack traces."""
    report, wants, stacks = context.DiagnosticContext.report, context.DiagnosticContext.wants, capture.full_user_stacks
    context.DiagnosticContext.report = lambda self, *a, **k: None
    context.DiagnosticContext.wants = lambda self, level: False
    capture.full_user_stacks = contextlib.nullcontext
    try:
        yield
    finally:
        context.DiagnosticContext.report, context.DiagnosticContext.wants, capture.full_user_stacks = (
            report,
            wants,
            stacks,
        )


def export_once(case: corpus.Case, mode: str) -> float:
    model, args, kwargs = case.build()
    options = {
        "none": exporter.ExportOptions(),
        "info": exporter.ExportOptions(),
        "debug": exporter.ExportOptions(diagnostic_options=exporter.DiagnosticOptions(logging.DEBUG)),
        "op-debug": exporter.ExportOptions(op_level_debug=True),
    }[mode]
    with diagnostics_off() if mode == "none" else contextlib.nullcontext():
        start = time.perf_counter()
        exporter.dynamo_export(model, *args, export_options=options, **kwargs)
        return time.perf_counter() - start


def location_share(case: corpus.Case) -> tuple[int, int, int]:
    """(FX nodes, nodes with a stack trace, nodes whose primary location is user code)."""
    model, args, kwargs = case.build()
    job = exporter.Exporter(exporter.ExportOptions(), model, args, kwargs)
    job.export()
    nodes = list(job._translator.onnx_nodes)
    traced = [n for n in nodes if n.meta.get("stack_trace")]
    user = [n for n in traced if (s := stack_of(n)) and s[0].is_user_code]
    return len(nodes), len(traced), len(user)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated corpus case names (default: all that export)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cases = [corpus.get(n) for n in args.cases.split(",")] if args.cases else corpus.CASES

    rows, ratios = [], {m: [] for m in MODES[1:]}
    totals = [0, 0, 0]
    for case in cases:
        try:
            for mode in MODES:  # warm-up (and skip models that do not export)
                export_once(case, mode)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"{case.name}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:80]})", flush=True)
            continue
        times = {m: [] for m in MODES}
        for _ in range(args.repeats):
            for mode in MODES:
                times[mode].append(export_once(case, mode))
        med = {m: statistics.median(t) for m, t in times.items()}
        for m in MODES[1:]:
            ratios[m].append(med[m] / med["none"])
        share = location_share(case)
        totals = [a + b for a, b in zip(totals, share)]
        rows.append((case.name, med, share))
        print(
            f"{case.name:28s} none {med['none']:.3f}s  info x{med['info'] / med['none']:.2f}  "
            f"debug x{med['debug'] / med['none']:.2f}  op-debug x{med['op-debug'] / med['none']:.2f}  "
            f"user-located {share[2]}/{share[1]} (of {share[0]} nodes)",
            flush=True,
        )
    print()
    for m in MODES[1:]:
        print(
            f"median export-time ratio {m}/none over {len(ratios[m])} models: {statistics.median(ratios[m]):.3f} "
            f"(geomean {statistics.geometric_mean(ratios[m]):.3f}, max {max(ratios[m]):.3f})"
        )
    print(
        f"FX nodes with a stack trace whose primary location is user code: {totals[2]}/{totals[1]} "
        f"({100 * totals[2] / max(totals[1], 1):.1f}%); nodes without a stack trace: {totals[0] - totals[1]}"
    )
    print(f"torch {torch.__version__}")


if __name__ == "__main__":
    main()
