"""Dynamic shapes over the model corpus (`tests/corpus.py`), in one process, case by case.

    python benchmarks/dynamic_shapes.py [--cases a,b] [--json OUT]

Per case: a static export, a dynamic one (``dynamic_shapes=True``) without and with the second-size
check (warm: each after one untimed export of the same kind), and of the dynamic export with the
check: whether every input dimension is symbolic, the FXE0020 results, the second-size verdict.
Prints the counts and the median time ratios dynamic/static. Works with an older exporter too (then
without FXE0020 and the check): run it with ``PYTHONPATH=<old checkout>`` to compare.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import corpus  # noqa: E402
import torch  # noqa: E402

import exporter  # noqa: E402


def timed(built: Any, **options: Any) -> tuple[float, Any]:
    model, args, kwargs = built
    try:
        known = {f for f in exporter.ExportOptions.__dataclass_fields__}
        export_options = exporter.ExportOptions(**{k: v for k, v in options.items() if k in known})
        exporter.dynamo_export(model, *args, export_options=export_options, **kwargs)  # warm
        start = time.perf_counter()
        out = exporter.dynamo_export(model, *args, export_options=export_options, **kwargs)
        return time.perf_counter() - start, out
    except exporter.OnnxExporterError as e:
        return float("nan"), e.export_output


def measure(case: corpus.Case) -> dict[str, Any]:
    static_s, _ = timed(case.build())
    unchecked_s, _ = timed(case.build(), dynamic_shapes=True, second_size_check=False)
    checked_s, out = timed(case.build(), dynamic_shapes=True)
    diagnostics = out.diagnostic_context.diagnostics
    all_symbolic, dims = None, []
    if out.model is not None:
        dims = [d for i in out.model_proto.graph.input for d in i.type.tensor_type.shape.dim]
        all_symbolic = all(d.dim_param for d in dims)
    return {
        "case": case.name,
        "exported": out.model is not None,
        "all_input_dims_symbolic": all_symbolic,
        "symbolic_input_dims": sum(1 for d in dims if d.dim_param),
        "input_dims": len(dims),
        "fxe0020": sum(1 for d in diagnostics if d.rule.id == "FXE0020" and "input" in d.properties),
        "second_size": next(
            (d.properties["secondSizeCheck"] for d in diagnostics if "secondSizeCheck" in d.properties), None
        ),
        "second_size_note": next(
            (d.message for d in diagnostics if d.rule.id == "FXE0020" and "skipped" in d.message), None
        ),
        "static_s": static_s,
        "dynamic_s": unchecked_s,
        "dynamic_checked_s": checked_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated case names (default: all)")
    parser.add_argument("--json", help="write the per-case results here")
    args = parser.parse_args()
    cases = [corpus.get(n) for n in args.cases.split(",")] if args.cases else corpus.CASES
    rows = []
    for case in cases:
        torch.manual_seed(0)
        rows.append(row := measure(case))
        print(json.dumps(row), flush=True)

    def ratio(key: str) -> float:
        return statistics.median(
            r[key] / r["static_s"] for r in rows if r[key] == r[key] and r["static_s"] == r["static_s"]
        )

    print(
        f"cases {len(rows)}; dynamic export ok {sum(r['exported'] for r in rows)}; every input dim symbolic {sum(bool(r['all_input_dims_symbolic']) for r in rows)}; "
        f"symbolic input dims {sum(r['symbolic_input_dims'] for r in rows)} of {sum(r['input_dims'] for r in rows)}"
    )
    print(
        f"FXE0020 results {sum(r['fxe0020'] for r in rows)} (in {sum(1 for r in rows if r['fxe0020'])} cases); "
        f"second-size check: passed {sum(r['second_size'] == 'passed' for r in rows)}, failed {sum(r['second_size'] == 'failed' for r in rows)}"
    )
    print(
        f"median export time dynamic/static: {ratio('dynamic_s'):.2f} without the second-size check, {ratio('dynamic_checked_s'):.2f} with it"
    )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
