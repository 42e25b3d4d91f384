"""The second-size check of a dynamic export (FXE0020): a graph that is only right at the example's
sizes is never reported as dynamic and fine.

Each symbol of the inputs' dynamic dimensions gets another size within its range (derived dimensions
follow, ``2*seq``), the inputs are redrawn at those sizes from the example's own values (token ids
stay in the vocabulary, masks stay masks), and the final ONNX model runs in onnxruntime against the
model run eagerly on the same inputs. The sizes tried, until the model runs eagerly at one:

- about 1.5 times the example's, by an odd step: a size through a stride or a patch (``H // 8``)
  changes too, and so does parity (one more pixel of a 32-pixel image would still make 4 patches
  of 8, and a graph fixed to 4 patches would pass);
- twice the example's (models that need multiples of a stride);
- one more than the example's (models with a low bound, e.g. a position table).

Where the model itself runs at none of them, nothing is claimed (a note).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx_ir as ir
import sympy
import torch
import torch.utils._pytree as pytree

from exporter.capture import adapters, dynamic
from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.verify import numerics

# (atol, rtol) of whole-model outputs by dtype: looser than op-level debug's, errors add up over ops.
TOLERANCES = {
    torch.float64: (1e-6, 1e-5),
    torch.float32: (1e-4, 1e-3),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
}


def check(
    program: torch.export.ExportedProgram,
    model: ir.Model,
    input_adapter: adapters.InputAdapter,
    output_adapter: adapters.OutputAdapter,
    torch_model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    names: dict[str, str],
    ctx: DiagnosticContext,
) -> None:
    """Run `model` at other sizes of its dynamic dimensions against `torch_model`; an error if they
    differ, naming the dimensions whose change alone makes the graph wrong."""
    examples = _example_sizes(program, args, kwargs)
    if not examples:
        return

    def spell(sizes: dict[sympy.Symbol, int]) -> str:
        return ", ".join(f"{names.get(str(s), str(s))}={v}" for s, v in sizes.items())

    def attempt(sizes: dict[sympy.Symbol, int]) -> _Outcome:
        return _attempt(program, model, input_adapter, output_adapter, torch_model, (args, kwargs), sizes, spell(sizes))

    for sizes in _other_sizes(program, examples):
        outcome = attempt(sizes)
        if not outcome.eager_error:
            break
    else:
        ctx.report(
            rules.DIMENSION_SPECIALIZED,
            Level.NOTE,
            f"Second-size check skipped: the model does not run eagerly at {spell(sizes)} ({outcome.eager_error}), nor at the other sizes tried.",
            sizes=spell(sizes),
        )
        return
    if outcome.ok:
        ctx.report(
            rules.DIMENSION_SPECIALIZED,
            Level.NOTE,
            f"Second-size check passed at {spell(sizes)}.",
            sizes=spell(sizes),
            secondSizeCheck="passed",
        )
        return
    if outcome.ort_unavailable:
        ctx.report(
            rules.DIMENSION_SPECIALIZED,
            Level.NOTE,
            f"Second-size check skipped: onnxruntime does not run this model ({outcome.ort_unavailable}).",
            sizes=spell(sizes),
        )
        return
    alone = {s: attempt({**examples, s: sizes[s]}).ok for s in sizes} if len(sizes) > 1 else {}  # one at a time
    culprits = [names.get(str(s), str(s)) for s, ok in alone.items() if ok is False]
    innocent = [names.get(str(s), str(s)) for s, ok in alone.items() if ok is True]
    message = outcome.message
    if culprits and innocent:
        make, do = ("makes" if len(culprits) == 1 else "make"), ("does" if len(innocent) == 1 else "do")
        message += (
            f" Changed one at a time, {', '.join(culprits)} {make} it wrong and {', '.join(innocent)} {do} not: keep "
            f"{', '.join(culprits)} at the example's size (static in dynamic_shapes)."
        )
    details = {"culprits": culprits} if culprits else {}
    ctx.report(
        rules.DIMENSION_SPECIALIZED,
        Level.ERROR,
        message,
        sizes=spell(sizes),
        secondSizeCheck="failed",
        **outcome.details,
        **details,
    )


@dataclasses.dataclass
class _Outcome:
    """One run of the exported graph against eager PyTorch at some sizes."""

    ok: bool | None = None  # None: not compared
    message: str = ""  # why it is not right
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    eager_error: str = ""  # the model does not run at these sizes
    ort_unavailable: str = ""  # onnxruntime does not run the model at all


def _attempt(
    program: torch.export.ExportedProgram,
    model: ir.Model,
    input_adapter: adapters.InputAdapter,
    output_adapter: adapters.OutputAdapter,
    torch_model: Any,
    inputs: tuple[tuple, dict],
    sizes: dict[sympy.Symbol, int],
    spelled: str,
) -> _Outcome:
    """Run `model` and `torch_model` on the inputs redrawn at `sizes` and compare their outputs."""
    args, kwargs = inputs
    new_args, new_kwargs = _redrawn(program, inputs, sizes)
    try:
        expected = numerics.eager(torch_model, new_args, new_kwargs)
    except Exception as e:
        return _Outcome(eager_error=f"{type(e).__name__}: {e}")
    try:
        actual = _onnxruntime(model, input_adapter.apply(*new_args, **new_kwargs))
    except Exception as e:
        try:  # does onnxruntime run it at all (e.g. it has no bf16 kernels)?
            _onnxruntime(model, input_adapter.apply(*args, **kwargs))
        except Exception:
            return _Outcome(ort_unavailable=type(e).__name__)
        return _Outcome(
            False,
            f"The exported graph fails in onnxruntime at {spelled} though the model runs eagerly there: {type(e).__name__}: {str(e).splitlines()[0]}",
        )
    for i, (a, e) in enumerate(zip(actual, output_adapter.apply(expected))):
        e = e.detach().numpy() if isinstance(e, torch.Tensor) else np.asarray(e)
        atol, rtol = TOLERANCES.get(_dtype(e), (0.0, 0.0))
        if a.shape != e.shape or not np.allclose(
            a.astype(np.float64), e.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True
        ):
            error = (
                f"max abs error {np.abs(a.astype(np.float64) - e.astype(np.float64)).max():.3g}"
                if a.shape == e.shape
                else f"shape {a.shape} vs {e.shape}"
            )
            message = f"The exported graph is only right at the example's sizes: at {spelled}, output {i} differs from eager PyTorch ({error}; atol {atol:g}, rtol {rtol:g})."
            return _Outcome(False, message, {"output": i})
    return _Outcome(True)


def _example_sizes(program: torch.export.ExportedProgram, args: tuple, kwargs: dict) -> dict[sympy.Symbol, int]:
    """The example's size of each symbol of the inputs' dimensions."""
    examples: dict[sympy.Symbol, int] = {}
    tensors = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    for (_, val), example in zip(dynamic.user_inputs(program), tensors):
        for size, example_size in zip(val.shape, example.shape):
            if dynamic.is_symbolic(size) and (expr := size.node.expr).is_Symbol:
                examples.setdefault(expr, int(example_size))
    return examples


def _other_sizes(
    program: torch.export.ExportedProgram, examples: dict[sympy.Symbol, int]
) -> list[dict[sympy.Symbol, int]]:
    """The sizes to try, in order (see the module's docstring): each gives every symbol another size
    within its range."""
    candidates = []
    for step in (lambda n: (n // 2) | 1, lambda n: n, lambda n: 1):
        sizes = {symbol: _within_range(program, symbol, n, step(n)) for symbol, n in examples.items()}
        if sizes not in candidates:
            candidates.append(sizes)
    return candidates


def _within_range(program: torch.export.ExportedProgram, symbol: sympy.Symbol, example: int, step: int) -> int:
    """``example + step``, or ``example - step`` above the symbol's upper bound (``example ± 1`` if neither fits)."""
    bounds = program.range_constraints.get(symbol)
    lower, upper = (bounds.lower, bounds.upper) if bounds is not None else (0, sympy.oo)
    for size in (example + step, example - step, example + 1, example - 1):
        if lower <= size <= upper:
            return size
    return example


def _redrawn(program: torch.export.ExportedProgram, inputs: Any, sizes: dict[sympy.Symbol, int]) -> tuple[tuple, dict]:
    """The inputs at `sizes`, each element drawn from the example tensor's own values."""
    shapes = iter(
        [
            [int(d.node.expr.xreplace(sizes)) if dynamic.is_symbolic(d) else int(d) for d in val.shape]
            for _, val in dynamic.user_inputs(program)
        ]
    )
    generator = torch.Generator().manual_seed(0)

    def redraw(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        shape = next(shapes)
        if x.numel() == 0:
            return torch.zeros(shape, dtype=x.dtype)
        if x.is_floating_point():  # new values (no ties for argmax/topk) of the example's scale
            std = x.float().std().nan_to_num() if x.numel() > 1 else torch.tensor(0.0)
            return (torch.randn(shape, generator=generator) * std + x.float().mean()).to(x.dtype)
        index = tuple(
            torch.arange(n).remainder(x.shape[d]).view([-1 if i == d else 1 for i in range(len(shape))])
            for d, n in enumerate(shape)
        )
        return x[index]  # the example tiled: ids stay in the vocabulary, masks keep their pattern

    return pytree.tree_map(redraw, inputs)


def _onnxruntime(model: ir.Model, inputs: list[Any]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(
        ir.serde.serialize_model(model).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    feeds = {
        i.name: (x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x))
        for i, x in zip(session.get_inputs(), inputs)
    }
    return session.run(None, feeds)


def _dtype(array: np.ndarray) -> torch.dtype:
    return {
        np.dtype("float64"): torch.float64,
        np.dtype("float32"): torch.float32,
        np.dtype("float16"): torch.float16,
    }.get(array.dtype, torch.int64)
