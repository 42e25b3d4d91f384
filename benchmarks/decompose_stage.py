"""The FX "passes" stage, node-by-node decomposition vs the whole-program `run_decompositions`.

For each corpus case, captures the model once per repeat and times, interleaved in one process,
(a) ``exporter.passes.decompose.decompose`` (what the exporter runs) and (b) the previous method,
``program.run_decompositions`` with the same table, whenever the program has an untranslatable
node. Prints per case the medians and their ratio to the capture time.

    python benchmarks/decompose_stage.py [--cases hf_bert,hf_resnet] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import corpus  # noqa: E402

from exporter.capture.extractor import FXGraphExtractor  # noqa: E402
from exporter.diagnostics import DiagnosticContext  # noqa: E402
from exporter.passes import decompose  # noqa: E402
from exporter.translate.registry import default_registry  # noqa: E402


def _capture(case: corpus.Case):
    model, args, kwargs = case.build()
    start = time.perf_counter()
    program = FXGraphExtractor().generate_fx(model, args, kwargs, dynamic_shapes=False, ctx=DiagnosticContext())
    return program, time.perf_counter() - start


def measure(case: corpus.Case, repeats: int) -> dict[str, float] | None:
    registry = default_registry()
    program, _ = _capture(case)
    nodes = decompose.untranslatable_targets(program, registry)
    if not nodes:
        return None
    capture, node_by_node, whole = [], [], []
    for _ in range(repeats):
        program, seconds = _capture(case)
        capture.append(seconds)
        start = time.perf_counter()
        decompose.decompose(program, registry)
        node_by_node.append(time.perf_counter() - start)
        program, _ = _capture(case)
        start = time.perf_counter()
        program.run_decompositions(decompose.onnx_friendly_decomposition_table(registry, nodes))
        whole.append(time.perf_counter() - start)
    return {
        name: statistics.median(v)
        for name, v in (("capture", capture), ("node_by_node", node_by_node), ("whole", whole))
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated corpus case names (default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    chosen = set(options.cases.split(",")) if options.cases else None
    decompose.onnx_friendly_decomposition_table(default_registry())  # collected once per process, not timed
    print(
        "| case | capture s | passes s, node by node | passes s, whole program | node by node / capture | whole / capture |"
    )
    print("|---|---|---|---|---|---|")
    ratios = []
    for case in corpus.CASES:
        if chosen and case.name not in chosen:
            continue
        m = measure(case, options.repeats)
        if m is None:
            continue
        ratios.append((m["node_by_node"] / m["capture"], m["whole"] / m["capture"]))
        print(
            f"| {case.name} | {m['capture']:.3f} | {m['node_by_node']:.3f} | {m['whole']:.3f} | "
            f"{ratios[-1][0]:.2f} | {ratios[-1][1]:.2f} |",
            flush=True,
        )
    if ratios:
        print(
            f"\nmedian passes/capture: node by node {statistics.median(r[0] for r in ratios):.2f}, "
            f"whole program {statistics.median(r[1] for r in ratios):.2f} over {len(ratios)} cases"
        )


if __name__ == "__main__":
    main()
