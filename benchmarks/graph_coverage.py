"""Node → source line coverage of the graph command's data over the corpus.

    python benchmarks/graph_coverage.py [--cases a,b]

Exports each corpus model (default options, in one process), converts it with
`onnxlens_server.graph.graph_json` and counts its nodes: with a source line (the innermost user
frame of the node's stack), and with one in the model's file (`tests/corpus.py`; the others are at
this script's export call, the innermost user frame when the model's code is a library's, e.g.
transformers'). Prints one line per model, the totals and the slowest conversion.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import corpus  # noqa: E402

import exporter  # noqa: E402
from onnxlens_server.graph import graph_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated corpus case names (default: all)")
    names = parser.parse_args().cases
    cases = [corpus.get(name) for name in names.split(",")] if names else corpus.CASES
    totals = [0, 0, 0]
    slowest = (0.0, "")
    with tempfile.TemporaryDirectory() as folder:
        for case in cases:
            model, args, kwargs = case.build()
            path = os.path.join(folder, f"{case.name}.onnx")
            try:
                exporter.dynamo_export(model, *args, **kwargs).save(path)
            except Exception as e:
                print(f"{case.name:32s} export failed: {type(e).__name__}")
                continue
            start = time.perf_counter()
            nodes = graph_json(path, None)["nodes"]
            slowest = max(slowest, (time.perf_counter() - start, case.name))
            located = [n for n in nodes if n["source"]]
            inside = [n for n in located if os.path.samefile(n["source"]["path"], corpus.__file__)]
            for i, count in enumerate((len(nodes), len(located), len(inside))):
                totals[i] += count
            print(
                f"{case.name:32s} {len(nodes):5d} nodes  {len(located):5d} with a line  {len(inside):5d} in the model's file"
            )
    nodes, located, inside = totals
    print(
        f"total: {nodes} nodes, {located} with a source line ({located / max(nodes, 1):.1%}), "
        f"{inside} in the model's file ({inside / max(nodes, 1):.1%}); slowest conversion {slowest[0] * 1000:.0f} ms ({slowest[1]})"
    )


if __name__ == "__main__":
    main()
