"""Comparing onnxruntime's values with PyTorch's: per-dtype tolerances, max errors, an error histogram.

The default tolerances (``TOLERANCES``, by dtype name; ``ExportOptions.verify_tolerances`` overrides
any of them) hold for whole models: errors add up over ops, so they are looser than op-level debug's.
A value matches when every element satisfies ``|onnx - torch| <= atol + rtol * |torch|`` and both have
their NaNs and infinities at the same places. Integer and boolean values must be equal. The max
relative error is taken over the elements at least ``atol`` in magnitude.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from exporter.verify.fast_paths import regular_paths

# (atol, rtol) by dtype name. float32: the corpus's models differ from eager PyTorch by at most 4e-6.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-6, 1e-5),
    "float32": (1e-4, 1e-3),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 5e-2),
}

# Upper edges of the error histogram's bins (absolute error); a last bin counts larger errors.
_EDGES = (0.0, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)


def tolerances(overrides: Mapping[str, tuple[float, float]] | None = None) -> dict[str, tuple[float, float]]:
    """The default tolerances with `overrides` (dtype name → (atol, rtol)) applied."""
    merged = dict(TOLERANCES)
    for name, (atol, rtol) in (overrides or {}).items():
        if name not in TOLERANCES:
            raise ValueError(f"unknown dtype {name!r} in tolerances; known: {', '.join(TOLERANCES)}")
        merged[name] = (float(atol), float(rtol))
    return merged


@dataclasses.dataclass
class Comparison:
    """One ONNX value against PyTorch's."""

    ok: bool
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    atol: float = 0.0
    rtol: float = 0.0
    mismatched: int = 0  # elements out of tolerance (or NaN/inf where the other is not)
    elements: int = 0
    histogram: dict[str, int] | None = None
    problem: str | None = None  # a shape or dtype that differs

    def describe(self) -> str:
        if self.problem:
            return self.problem
        return f"max abs error {self.max_abs_error:.3g}, max rel error {self.max_rel_error:.3g} (atol {self.atol:g}, rtol {self.rtol:g})"

    def properties(self) -> dict[str, Any]:
        props = {
            "ok": self.ok,
            "maxAbsError": self.max_abs_error,
            "maxRelError": self.max_rel_error,
            "atol": self.atol,
            "rtol": self.rtol,
            "mismatchedElements": self.mismatched,
            "elements": self.elements,
            "errorHistogram": self.histogram,
            "problem": self.problem,
        }
        return {k: v for k, v in props.items() if v is not None}


def compare(
    actual: np.ndarray,
    expected: np.ndarray,
    dtype: str,
    tols: Mapping[str, tuple[float, float]],
    *,
    histogram: bool = False,
) -> Comparison:
    """Compare onnxruntime's `actual` with PyTorch's `expected` (of torch dtype name `dtype`)."""
    atol, rtol = tols.get(dtype, (0.0, 0.0))
    result = Comparison(ok=True, atol=atol, rtol=rtol, elements=int(expected.size))
    if actual.shape != expected.shape:
        result.ok, result.problem = False, f"shape {list(actual.shape)} vs PyTorch {list(expected.shape)}"
        return result
    if expected.size == 0:
        return result
    work = np.float32 if {actual.dtype.name, expected.dtype.name} <= {"float32", "float16"} else np.float64
    a, e = actual.astype(work, copy=False), expected.astype(work, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: compared below as non-finite values
        diff = np.abs(a - e)
    both_finite = np.isfinite(a) & np.isfinite(e)
    same_nonfinite = (np.isnan(a) & np.isnan(e)) | (np.isinf(e) & (a == e))
    bad = ~both_finite & ~same_nonfinite
    bad |= both_finite & ~(diff <= atol + rtol * np.abs(e))
    result.mismatched = int(bad.sum())
    result.ok = result.mismatched == 0
    finite_diff = np.where(both_finite, diff, 0.0)
    result.max_abs_error = float("inf") if (~both_finite & ~same_nonfinite).any() else float(finite_diff.max())
    meaningful = both_finite & (np.abs(e) >= max(atol, 1e-12))  # relative errors of values near 0 say nothing
    result.max_rel_error = (
        float("inf")
        if result.max_abs_error == float("inf")
        else float((finite_diff[meaningful] / np.abs(e[meaningful])).max())
        if meaningful.any()
        else 0.0
    )
    if histogram:
        result.histogram = _histogram(np.where(same_nonfinite, 0.0, np.where(both_finite, diff, np.inf)))
    return result


def compare_outputs(
    actual: list[np.ndarray],
    expected: list[np.ndarray],
    tols: Mapping[str, tuple[float, float]],
    *,
    histogram: bool = False,
) -> list[Comparison]:
    """Each of onnxruntime's outputs against PyTorch's (same count). Rows that only trade places among ties
    of a sorted output are put back in PyTorch's order first: detections of equal scores (within tolerance)
    come out of a sort or NonMaxSuppression in either order, and neither order is wrong."""
    comparisons = [compare(a, e, dtype_of(e), tols, histogram=histogram) for a, e in zip(actual, expected)]
    if all(c.ok for c in comparisons):
        return comparisons
    for order in _tie_orders(actual, expected, tols):
        rows = len(order)
        reordered = [
            a[order] if a.ndim and a.shape == e.shape and a.shape[0] == rows else a for a, e in zip(actual, expected)
        ]
        again = [compare(a, e, dtype_of(e), tols, histogram=histogram) for a, e in zip(reordered, expected)]
        if all(c.ok for c in again):
            return again
    return comparisons


def dtype_of(array: np.ndarray) -> str:
    """The dtype name of a numpy value, for `TOLERANCES`."""
    return array.dtype.name


def _tie_orders(
    actual: list[np.ndarray], expected: list[np.ndarray], tols: Mapping[str, tuple[float, float]]
) -> Iterator[np.ndarray]:
    """Row orders of `actual` that undo swaps among ties: for each sorted 1-D float output that matches in
    order, rows within a run of its equal values (within tolerance) matched to PyTorch's rows by every output
    of that many rows (none for a key output where some row of a run matches none of the run's)."""
    for a, e in zip(actual, expected):
        if e.ndim != 1 or len(e) < 2 or a.shape != e.shape or e.dtype.kind != "f":
            continue
        steps = np.diff(e.astype(np.float64))
        if not (np.all(steps <= 0) or np.all(steps >= 0)) or not compare(a, e, dtype_of(e), tols).ok:
            continue
        atol, rtol = tols.get(dtype_of(e), (0.0, 0.0))
        ties = np.abs(steps) <= atol + rtol * np.abs(e[1:])  # row i + 1 ties with row i
        rows = [
            i for i, (x, y) in enumerate(zip(actual, expected)) if x.ndim and x.shape == y.shape and len(y) == len(e)
        ]
        order, start = np.arange(len(e)), 0
        for end in [*np.flatnonzero(~ties) + 1, len(e)]:  # runs [start, end)
            if end - start > 1 and not _match_run(order, start, end, [(actual[i], expected[i]) for i in rows], tols):
                break
            start = end
        else:
            yield order


def _match_run(
    order: np.ndarray,
    start: int,
    end: int,
    pairs: list[tuple[np.ndarray, np.ndarray]],
    tols: Mapping[str, tuple[float, float]],
) -> bool:
    """Set ``order[start:end]`` to the rows of the run that match PyTorch's rows ``start…end-1`` in every
    output of `pairs` (the nearest free one first); False if some row has no match."""
    free = list(range(start, end))
    for row in range(start, end):
        found = next(
            (
                j
                for j in sorted(free, key=lambda j: abs(j - row))
                if all(compare(a[j], e[row], dtype_of(e), tols).ok for a, e in pairs)
            ),
            None,
        )
        if found is None:
            return False
        order[row] = found
        free.remove(found)
    return True


def _histogram(errors: np.ndarray) -> dict[str, int]:
    """Element counts by absolute error: ``"0"``, ``"<=1e-07"`` … ``"<=1"``, ``">1"`` (inf/NaN count as >1)."""
    counts, lower = {}, -1.0
    for edge in _EDGES:
        counts["0" if edge == 0 else f"<={edge:g}"] = int(((errors > lower) & (errors <= edge)).sum())
        lower = edge
    counts[f">{_EDGES[-1]:g}"] = int((errors > _EDGES[-1]).sum())
    return counts


def to_numpy(value: Any) -> np.ndarray:
    """A PyTorch value as onnxruntime sees it (complex tensors as their real view)."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.is_complex():
            value = torch.view_as_real(value)
        if value.dtype == torch.bfloat16:
            import ml_dtypes

            return value.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return value.numpy()
    if isinstance(value, bool):
        return np.array(value)
    if isinstance(value, int):
        return np.array(value, dtype=np.int64)
    return np.array(value, dtype=np.float32)


def dtype_name(value: Any) -> str:
    """The torch dtype name of a value (the real dtype of a complex tensor), for `TOLERANCES`."""
    if isinstance(value, torch.Tensor):
        dtype = value.dtype.to_real() if value.is_complex() else value.dtype
        return str(dtype).removeprefix("torch.")
    return "float32" if isinstance(value, float) else "int64"


def eager(model: Any, args: tuple, kwargs: dict, *, fast_paths: bool = False) -> Any:
    """The model's outputs on copies of `args`/`kwargs`, leaving the inputs (a forward may mutate them,
    ``x.add_(1)``: onnxruntime must get the values the user gave) and the buffers (running stats) as they were;
    on the path the exported graph computes, unless `fast_paths` (`exporter.verify.fast_paths`)."""
    buffers = {name: b.clone() for name, b in model.named_buffers()} if isinstance(model, torch.nn.Module) else {}
    paths = contextlib.nullcontext() if fast_paths else regular_paths()
    try:
        with torch.no_grad(), paths:
            args, kwargs = pytree.tree_map_only(torch.Tensor, torch.clone, (args, kwargs))
            return model(*args, **kwargs)
    finally:
        if buffers:
            with torch.no_grad():
                for name, b in model.named_buffers():
                    b.copy_(buffers[name])
