"""Self-check for tests/corpus.py, independent of the onnxlens exporter.

For every corpus case (or the ones named on the command line) it:

1. builds the case twice and runs eager on both builds (deterministic build?), and
   runs a stateless model a second time (deterministic forward?);
2. captures it with ``torch.export.export(..., strict=False)``, statically and with
   every tensor dim ``Dim.AUTO`` (what ``dynamic_shapes=True`` means for the exporter);
3. exports it with ``torch.onnx.export(..., dynamo=True)``, runs the ONNX model in
   onnxruntime and compares the flattened outputs with eager (complex outputs are
   compared as ``view_as_real``; a mutating model is rebuilt for the reference).

It prints one line per case and a summary. Failures in steps 2 and 3 are reported,
not fatal: they show which cases are realistic targets for the exporter.

    python tests/check_corpus_eager.py [--no-onnx | --onnx-dynamic] [CASE ...]
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402


class CallableModule(nn.Module):
    """Wraps a plain function so torch.export / torch.onnx.export accept it."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def short_reason(exc: BaseException, limit: int = 110) -> str:
    """Innermost cause of an exception, as one short line."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    return f"{type(exc).__name__}: {text}"[:limit]


def fresh(case: corpus.Case) -> tuple[nn.Module, tuple, dict]:
    """Build the case, wrap callables, register HF pytrees (needed for cache outputs)."""
    model, args, kwargs = case.build()
    if not isinstance(model, nn.Module):
        model = CallableModule(model)
    if "hf" in case.tags:
        corpus.register_hf_pytrees(model)
    return model, args, kwargs


def leaves(outputs: Any) -> list[torch.Tensor]:
    """Flattened tensor outputs, complex ones as their real view."""
    flat = [x for x in pytree.tree_leaves(outputs) if isinstance(x, torch.Tensor)]
    return [torch.view_as_real(x) if x.is_complex() else x for x in flat]


def run_eager(model: nn.Module, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    with torch.no_grad():
        return [x.detach().clone() for x in leaves(model(*args, **kwargs))]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b, strict=True))


def auto_dynamic_shapes(model: nn.Module, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Dim.AUTO for every dim of every tensor input, keyed by forward's parameter names."""

    def spec(value: Any) -> Any:
        return pytree.tree_map(
            lambda x: dict.fromkeys(range(x.dim()), torch.export.Dim.AUTO) if isinstance(x, torch.Tensor) else None,
            value,
        )

    bound = inspect.signature(model.forward).bind(*args, **kwargs)
    return {name: spec(value) for name, value in bound.arguments.items()}


def check_torch_export(case: corpus.Case, dynamic: bool) -> str:
    model, args, kwargs = fresh(case)
    try:
        shapes = auto_dynamic_shapes(model, args, kwargs) if dynamic else None
        torch.export.export(model, args, kwargs, dynamic_shapes=shapes, strict=False)
        return "ok"
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        return "FAIL " + short_reason(e)


def check_onnx(case: corpus.Case, dynamic: bool) -> tuple[str, float | None, str]:
    """Export with torch.onnx.export(dynamo=True), run in onnxruntime, compare to eager."""
    model, args, kwargs = fresh(case)
    sink = io.StringIO()
    try:
        shapes = auto_dynamic_shapes(model, args, kwargs) if dynamic else None
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            program = torch.onnx.export(model, args, kwargs=kwargs, dynamo=True, dynamic_shapes=shapes, verbose=False)
    except Exception as e:  # noqa: BLE001
        return "FAIL " + short_reason(e), None, ""

    try:
        got = [x.detach() for x in program(*args, **kwargs)]
    except Exception as e:  # noqa: BLE001
        return "ORT-FAIL " + short_reason(e), None, ""

    ref_model, ref_args, ref_kwargs = fresh(case)  # fresh state for mutating models
    want = run_eager(ref_model, ref_args, ref_kwargs)
    if len(got) != len(want):
        return f"ok (outputs: onnx {len(got)} vs eager {len(want)})", None, "n/a"
    err, close = 0.0, True
    for g, w in zip(got, want, strict=True):
        if g.shape != w.shape:
            return f"ok (shape {tuple(g.shape)} vs {tuple(w.shape)})", None, "MISMATCH"
        g64, w64 = g.to(torch.float64), w.to(torch.float64)
        diff = (g64 - w64).abs()
        err = max(err, diff.max().item() if diff.numel() else 0.0)
        close &= bool((diff <= case.atol + case.rtol * w64.abs()).all())
    return "ok", err, "within tol" if close else "MISMATCH"


def check_case(case: corpus.Case, onnx: bool, onnx_dynamic: bool) -> dict[str, Any]:
    start = time.perf_counter()
    row: dict[str, Any] = {"name": case.name}
    try:
        m1, a1, k1 = fresh(case)
        out1 = run_eager(m1, a1, k1)
        m2, a2, k2 = fresh(case)
        deterministic = same(out1, run_eager(m2, a2, k2))
        if "mutation" not in case.tags:
            deterministic &= same(out1, run_eager(m1, a1, k1))
        row["eager"] = "ok" if deterministic else "NONDETERMINISTIC"
    except Exception as e:  # noqa: BLE001
        row["eager"] = "FAIL " + short_reason(e)
    row["export"] = check_torch_export(case, dynamic=False)
    row["dynamic"] = check_torch_export(case, dynamic=True)
    if onnx:
        row["onnx"], row["err"], row["tol"] = check_onnx(case, onnx_dynamic)
    row["secs"] = time.perf_counter() - start
    return row


def format_row(row: dict[str, Any]) -> str:
    err = row.get("err")
    parts = [
        f"{row['name']:<26}",
        f"eager={row['eager']}",
        f"export={row['export']}",
        f"dyn={row['dynamic']}",
    ]
    if "onnx" in row:
        parts.append(f"onnx={row['onnx']}")
        parts.append(f"maxabs={err:.2e}" if err is not None else "maxabs=-")
        if row["tol"]:
            parts.append(row["tol"])
    parts.append(f"{row['secs']:.1f}s")
    return " | ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    parser.add_argument("--no-onnx", action="store_true", help="skip torch.onnx.export")
    parser.add_argument("--onnx-dynamic", action="store_true", help="torch.onnx.export with every dim Dim.AUTO")
    opts = parser.parse_args(argv)

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(2)

    cases = [corpus.get(n) for n in opts.cases] if opts.cases else corpus.CASES
    start = time.perf_counter()
    rows = []
    for case in cases:
        row = check_case(case, onnx=not opts.no_onnx, onnx_dynamic=opts.onnx_dynamic)
        print(format_row(row), flush=True)
        rows.append(row)

    def count(key: str, ok: str = "ok") -> int:
        return sum(str(r.get(key, "")).startswith(ok) for r in rows)

    print(
        f"\n{len(rows)} cases: eager ok {count('eager')}, torch.export ok {count('export')}, "
        f"dynamic ok {count('dynamic')}"
        + ("" if opts.no_onnx else f", torch.onnx.export ok {count('onnx')}, onnx within tol {count('tol', 'within')}")
        + f"; total {time.perf_counter() - start:.1f}s"
    )
    return 0 if count("eager") == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
