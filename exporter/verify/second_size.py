"""The second-size check of a dynamic export (FXE0020): a graph that is only right at the example's
sizes is never reported as dynamic and fine.

Every symbol of the inputs' dynamic dimensions gets another size within its range (derived dimensions
follow, ``2*seq``; a symbol seen only through one, ``8*s``, is solved from the example), the inputs are
redrawn at those sizes from the example's own values (token ids stay in the vocabulary, masks stay
masks), and the final ONNX model runs in onnxruntime against the model run eagerly on the same inputs.

Sizes that keep what the example's sizes have in common can hide a graph right only at the example:
torch.export drops guards it cannot state (a branch on ``h / w``, ``min(16 / h, 20 / w)``), so a graph
traced for one aspect ratio passes at any size of that ratio. The check therefore probes a family of
sizes, each changing every dimension, all compared where the model runs eagerly:

- about 1.5 times the example's (3 more at least), by an odd step: a size through a stride or a patch (``H // 8``)
  changes too, and so does parity (one more pixel of a 32-pixel image would still make 4 patches
  of 8, and a graph fixed to 4 patches would pass);
- the same step for the dimensions on even axes and one more for those on odd axes, then the reverse:
  the ratios between neighbouring dimensions of a tensor change both ways (height/width), and one more
  than a size shares no divisor with it. The axis, not the symbol's rank among all, decides: the same
  axis of two inputs (a sequence's length in ``input_ids`` and ``attention_mask``) is usually one size
  that torch.export did not tie, and sizes that disagree there are inputs no caller gives.

Where the model runs eagerly at none of them, the next family: twice the example's and the skews of
twice and three times (models that need multiples of a stride), then one more than the example's
(models with a low bound, e.g. a position table). Where the model runs at none, nothing is claimed (a
note). An onnxruntime failure at a probe is an error, unless onnxruntime lacks a kernel the model needs
at the example's sizes too (a note).

A probe whose outputs differ from eager is compared with the model exported statically at its sizes
(`static_export`): where the dynamic graph is no further from eager than that graph (twice its error,
or the tolerance), the difference is not the dynamic shapes' but numerics at those sizes (a detector's
boxes rounded to whole pixels, a threshold on computed scores, a translation's error): a warning, not
a refusal.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir
import sympy
import torch
import torch.utils._pytree as pytree

from exporter.capture import adapters, dynamic
from exporter.constants import Prop
from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.outcome import NUMERICS
from exporter.verify import numerics, seeded


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
    tolerances: dict[str, tuple[float, float]] | None = None,
    static_export: Callable[[tuple, dict], Callable[[tuple, dict], list[np.ndarray]] | None] | None = None,
) -> None:
    """Run `model` at other sizes of its dynamic dimensions against `torch_model` (within `tolerances`,
    overrides of `numerics.TOLERANCES` as verify takes them); an error at the first sizes where they differ
    (or onnxruntime fails), naming the dimensions whose change alone makes the graph wrong. With
    `static_export` (inputs → a function running the model exported statically at their sizes, or None),
    sizes where a static graph differs from eager as much are numerics: a warning."""
    examples = _example_sizes(program, args, kwargs)
    if not examples:
        return
    session, tols = _Session(model), numerics.tolerances(tolerances)
    drawn = set(seeded.random_outputs(program, [v.name for v in model.graph.outputs]))  # not comparable

    def spell(sizes: dict[sympy.Symbol, int]) -> str:
        return ", ".join(f"{names.get(str(s), str(s))}={v}" for s, v in sizes.items())

    numerics_only: list[_Outcome] = []  # probes where a static graph differs from eager as much

    def attempt(sizes: dict[sympy.Symbol, int]) -> _Outcome:
        outcome = _attempt(
            program,
            session,
            input_adapter,
            output_adapter,
            torch_model,
            (args, kwargs),
            sizes,
            spell(sizes),
            tols,
            drawn,
        )
        if outcome.ok is False and outcome.errors and static_export is not None:
            outcome = _against_static(outcome, static_export, tols)
            if outcome.ok:
                numerics_only.append(outcome)
        return outcome

    passed: list[dict[sympy.Symbol, int]] = []
    skipped: list[tuple[dict[sympy.Symbol, int], str]] = []  # the model does not run eagerly there
    failed: tuple[dict[sympy.Symbol, int], _Outcome] | None = None
    for family in _families(program, examples):
        for sizes in family:
            outcome = attempt(sizes)
            if outcome.eager_error:
                skipped.append((sizes, outcome.eager_error))
            elif outcome.ok:
                passed.append(sizes)
            else:
                failed = sizes, outcome
                break
        if passed or failed:
            break
    if failed is None and not passed:
        sizes, error = skipped[0]
        ctx.report(  # a warning: the model may take the example's sizes only (LeViT's table of 196 patches)
            rules.DIMENSION_SPECIALIZED,
            Level.WARNING,
            f"Second-size check skipped: the model does not run eagerly at {spell(sizes)} ({error}), nor at the other "
            "sizes tried, so the dynamic dimensions are not checked: the model may take the example's sizes only.",
            sizes=spell(sizes),
        )
        return
    for numeric in numerics_only[:1]:
        ctx.report(rules.DIMENSION_SPECIALIZED, Level.WARNING, numeric.message, **numeric.details)
    if failed is None:
        spelled = "; ".join(spell(s) for s in passed)
        ctx.report(
            rules.DIMENSION_SPECIALIZED,
            Level.NOTE,
            f"Second-size check passed at {spelled}.",
            sizes=spelled,
            **{Prop.SECOND_SIZE_CHECK: "passed"},
        )
        return
    sizes, outcome = failed
    if outcome.ort_unavailable:
        ctx.report(
            rules.DIMENSION_SPECIALIZED,
            Level.NOTE,
            f"Second-size check skipped: onnxruntime does not run this model ({outcome.ort_unavailable}).",
            sizes=spell(sizes),
        )
        return
    message = outcome.message
    if passed:  # each size was changed there too: the graph is wrong for how they relate, not for any one
        message += (
            f" It matched at {'; '.join(spell(s) for s in passed)}: the graph holds at some sizes only, as after a "
            "branch on the sizes' order or ratio that torch.export did not keep."
        )
    alone = {s: attempt({**examples, s: sizes[s]}).ok for s in sizes} if len(sizes) > 1 and not passed else {}
    culprits = [names.get(str(s), str(s)) for s, ok in alone.items() if ok is False]
    innocent = [names.get(str(s), str(s)) for s, ok in alone.items() if ok is True]
    if culprits and innocent:
        make, do = ("makes" if len(culprits) == 1 else "make"), ("does" if len(innocent) == 1 else "do")
        message += (
            f" Changed one at a time, {', '.join(culprits)} {make} it wrong and {', '.join(innocent)} {do} not: keep "
            f"{', '.join(culprits)} at the example's size (static in dynamic_shapes)."
        )
    details = ({"culprits": culprits} if culprits else {}) | ({"matched": [spell(s) for s in passed]} if passed else {})
    ctx.report(
        rules.DIMENSION_SPECIALIZED,
        Level.ERROR,
        message,
        sizes=spell(sizes),
        **{Prop.SECOND_SIZE_CHECK: "failed"},
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
    errors: list[float] = dataclasses.field(default_factory=list)  # each output's max abs error (compared)
    inputs: tuple[tuple, dict] | None = None  # the inputs at these sizes
    expected: list[np.ndarray] = dataclasses.field(default_factory=list)  # eager's outputs there


def _attempt(
    program: torch.export.ExportedProgram,
    session: _Session,
    input_adapter: adapters.InputAdapter,
    output_adapter: adapters.OutputAdapter,
    torch_model: Any,
    inputs: tuple[tuple, dict],
    sizes: dict[sympy.Symbol, int],
    spelled: str,
    tols: dict[str, tuple[float, float]],
    drawn: set[int],
) -> _Outcome:
    """Run the ONNX model and `torch_model` on the inputs redrawn at `sizes` and compare their outputs, but
    those that depend on random numbers (`drawn`)."""
    args, kwargs = inputs
    new_args, new_kwargs = _redrawn(program, inputs, sizes)
    try:
        expected = output_adapter.apply(numerics.eager(torch_model, new_args, new_kwargs))
    except Exception as e:
        return _Outcome(eager_error=f"{type(e).__name__}: {e}")
    try:
        actual = session.run(input_adapter.apply(*new_args, **new_kwargs))
    except Exception as e:
        failure = f"{type(e).__name__}: {_first_line(e).rstrip('.')}."
        try:
            session.run(input_adapter.apply(*args, **kwargs))
        except Exception as at_example:  # onnxruntime without a kernel the model needs (bf16) runs it at no size
            if type(at_example).__name__ == "NotImplemented":
                return _Outcome(ort_unavailable=failure)
            return _Outcome(
                False, f"The exported graph fails in onnxruntime at {spelled}, and at the example's sizes: {failure}"
            )
        return _Outcome(
            False,
            f"The exported graph fails in onnxruntime at {spelled} though the model runs eagerly there: {failure}",
        )
    if len(actual) != len(expected):
        message = f"The exported graph has {len(actual)} outputs at {spelled}, eager PyTorch {len(expected)}."
        return _Outcome(False, message)
    expected = [numerics.to_numpy(e) for e in expected]
    comparisons = numerics.compare_outputs(actual, expected, tols)
    for i, comparison in enumerate(comparisons):
        if not comparison.ok and i not in drawn:
            error = comparison.problem or (
                f"max abs error {comparison.max_abs_error:.3g}; atol {comparison.atol:g}, rtol {comparison.rtol:g}"
            )
            message = f"The exported graph is only right at the example's sizes: at {spelled}, output {i} differs from eager PyTorch ({error})."
            errors = [0.0 if j in drawn else c.max_abs_error for j, c in enumerate(comparisons)]
            if any(c.problem for j, c in enumerate(comparisons) if j not in drawn):  # nothing to compare numbers by
                errors = []
            return _Outcome(
                False, message, {"output": i}, errors=errors, inputs=(new_args, new_kwargs), expected=expected
            )
    return _Outcome(True)


def _against_static(
    outcome: _Outcome,
    static_export: Callable[[tuple, dict], Callable[[tuple, dict], list[np.ndarray]] | None],
    tols: dict[str, tuple[float, float]],
) -> _Outcome:
    """`outcome` (outputs that differ from eager) judged against the model exported statically at its sizes:
    numerics (ok, with a warning's message) where no output is further from eager than twice that graph's
    error or its tolerance; else `outcome` itself."""
    args, kwargs = outcome.inputs
    run = static_export(args, kwargs)
    if run is None:  # the model does not export statically there: nothing to tell numerics apart by
        return outcome
    try:
        comparisons = numerics.compare_outputs(run(args, kwargs), outcome.expected, tols)
    except Exception:  # noqa: BLE001 - the static graph does not run either: keep the first finding
        return outcome
    if any(c.problem for c in comparisons):
        return outcome
    for dynamic_error, comparison in zip(outcome.errors, comparisons):
        if dynamic_error > max(2 * comparison.max_abs_error, comparison.atol):
            return outcome
    i = outcome.details["output"]
    message = (
        outcome.message.replace("The exported graph is only right at the example's sizes: at", "At", 1)
        + f" A graph exported statically at those sizes differs as much (max abs error {comparisons[i].max_abs_error:.3g}):"
        " not the dynamic shapes, but numerics there (outputs that round or threshold float differences, or a"
        " translation's)."
    )
    return _Outcome(True, message, {"output": i, Prop.SECOND_SIZE_CHECK: NUMERICS})


def _example_sizes(program: torch.export.ExportedProgram, args: tuple, kwargs: dict) -> dict[sympy.Symbol, int]:
    """The example's size of each symbol of the inputs' dimensions: read where a dimension is the symbol,
    solved where it is seen only through an expression of it alone (``8*s``, as torch.export derives a size
    the code needs a multiple of)."""
    examples: dict[sympy.Symbol, int] = {}
    tensors = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    dims = [
        (size.node.expr, int(example_size))
        for (_, val), example in zip(dynamic.user_inputs(program), tensors)
        for size, example_size in zip(val.shape, example.shape)
        if dynamic.is_symbolic(size)
    ]
    for expr, example_size in dims:
        if expr.is_Symbol:
            examples.setdefault(expr, example_size)
    for expr, example_size in dims:
        unknown = expr.free_symbols - examples.keys()
        if len(unknown) == 1 and len(expr.free_symbols) == 1:
            (symbol,) = unknown
            solutions = [s for s in sympy.solve(sympy.Eq(expr, example_size), symbol) if s.is_integer]
            if solutions:
                examples[symbol] = int(solutions[0])
    return examples


def _grow(n: int) -> int:
    """About half the example's size, odd, and more than one (it differs from the step of one)."""
    return max((n // 2) | 1, 3)


# The families of probes (see the module's docstring), each probe as the step added to the sizes on even
# and on odd axes.
_FAMILIES: tuple[tuple[tuple[Callable[[int], int], Callable[[int], int]], ...], ...] = (
    ((_grow, _grow), (_grow, lambda n: 1), (lambda n: 1, _grow)),
    ((lambda n: n, lambda n: n), (lambda n: n, lambda n: 2 * n), (lambda n: 2 * n, lambda n: n)),
    ((lambda n: 1, lambda n: 1),),
)


def _families(
    program: torch.export.ExportedProgram, examples: dict[sympy.Symbol, int]
) -> list[list[dict[sympy.Symbol, int]]]:
    """The families of sizes to try, in order, each size given to every symbol within its range (sizes
    an earlier probe had are not tried again)."""
    axes = _axes(program)
    seen: list[dict[sympy.Symbol, int]] = []
    families = []
    for steps in _FAMILIES:
        family = []
        for even, odd in steps:
            sizes = {
                symbol: _within_range(program, symbol, n, (odd if axes.get(symbol, 0) % 2 else even)(n))
                for symbol, n in examples.items()
            }
            if sizes not in seen:
                seen.append(sizes)
                family.append(sizes)
        families.append(family)
    return families


def _axes(program: torch.export.ExportedProgram) -> dict[sympy.Symbol, int]:
    """The axis each symbol first sizes among the inputs' dimensions (alone or in an expression)."""
    axes: dict[sympy.Symbol, int] = {}
    for _, val in dynamic.user_inputs(program):
        for axis, size in enumerate(val.shape):
            if dynamic.is_symbolic(size):
                for symbol in size.node.expr.free_symbols:
                    axes.setdefault(symbol, axis)
    return axes


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


class _Session:
    """The ONNX model in onnxruntime (CPU), created at the first run and kept for the others."""

    def __init__(self, model: ir.Model) -> None:
        self._model = model
        self._session: Any = None

    def run(self, inputs: list[Any]) -> list[np.ndarray]:
        import onnxruntime as ort

        if self._session is None:
            proto = ir.serde.serialize_model(self._model).SerializeToString()
            self._session = ort.InferenceSession(proto, providers=["CPUExecutionProvider"])
        feeds = {
            i.name: (x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x))
            for i, x in zip(self._session.get_inputs(), inputs)
        }
        return self._session.run(None, feeds)


def run_static(export_output: Any, args: tuple, kwargs: dict) -> list[np.ndarray]:
    """An `ExportOutput`'s model run in onnxruntime on the model's inputs `args`, `kwargs`."""
    return _Session(export_output.model).run(list(export_output.adapt_torch_inputs_to_onnx(*args, **kwargs)))


def _first_line(error: Exception) -> str:
    """The message's first line, without onnxruntime's status prefix (``[ONNXRuntimeError] : 2 : INVALID_ARGUMENT :``)."""
    lines = str(error).strip().splitlines()
    return re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", lines[0]) if lines else ""
