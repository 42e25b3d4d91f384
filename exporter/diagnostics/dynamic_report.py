"""The results of a dynamic export (FXE0020): each input dimension asked to be dynamic that the code
fixed, at the line that fixed it; a named `Dim` the code fixed (torch.export's "Constraints violated")
as a located error with torch's suggested fix; a note with the graph's symbolic dimensions."""

from __future__ import annotations

from typing import Any

import sympy
import torch
from torch.export.dynamic_shapes import _Dim
from torch.utils._sympy.numbers import int_oo

from exporter.capture import dynamic
from exporter.constants import Prop
from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.diagnostics.locations import Frame, package_path
from exporter.outcome import ASKED_DYNAMIC


def report_specialized(
    ctx: DiagnosticContext,
    program: torch.export.ExportedProgram,
    dims: list[dynamic.InputDim],
    fixed: list[dynamic.Specialization],
    arguments: dict[str, int | str],
    assumptions: list[sympy.Expr],
    unchecked: list[dynamic.Assumption],
    captured: dict[str, tuple[Any, ...]],
) -> None:
    """FXE0020 for each of `dims` that came out static (a warning where the user named the dimension
    in a spec or where every one came out static, a note under ``dynamic_shapes=True``), a note for each of
    the capture's `assumptions` (`capture.Mode.assumes`, spelled by `dynamic.as_bounds`), a warning at the
    line of each `unchecked` equality (`dynamic.unchecked_equalities`), then the note listing the symbolic
    dimensions: a warning with the graph's input shapes when every dimension asked dynamic came out static.
    `arguments` says where the example gives each input (`dynamic.arguments`), for a quick fix; `captured`, the
    shapes a model that is a graph captured before was captured with (`dynamic.captured_shapes`)."""
    if not dims:
        return
    specialized = dynamic.specialized(program, dims)
    all_static = len(specialized) == len(dims)
    for dim, size in specialized:
        found = next((s for s in reversed(fixed) if s.matches(dim.input, dim.index, dim.dim)), None)
        stack, library = _where(found, fixed)
        shape = captured.get(dim.input, ())
        if not stack and dim.dim < len(shape) and not dynamic.is_symbolic(shape[dim.dim]):
            message = (
                f"The model is a graph torch.export captured with dimension {dim.dim} of input '{dim.input}' fixed to "
                f"{size}, so it accepts only that size there (a PT2E-quantized model is such a graph): capture it with "
                f"that dimension dynamic, torch.export.export(..., dynamic_shapes={{{dim.input!r}: {{{dim.dim}: "
                "Dim.AUTO}}), before anything else (prepare_pt2e)."
            )
        elif found is None and size <= 1:
            message = (
                f"Dimension {dim.dim} of input '{dim.input}' is {size} in the example, and torch.export keeps "
                f"such sizes static: give an example with another size there to make it dynamic."
            )
        elif size <= 1:
            message = (
                f"{_code(stack, library)} fixes dimension {dim.dim} of input '{dim.input}' to {size}, the example's size: the "
                "exported graph accepts only that size there. With another example size the code may not fix it."
            )
        else:
            message = (
                f"{_code(stack, library)} fixes dimension {dim.dim} of input '{dim.input}' to {size}: the exported graph "
                "accepts only that size there, though the dimension was asked to be dynamic."
            )
        ctx.report(
            rules.DIMENSION_SPECIALIZED,
            Level.NOTE if dim.spec is True and not all_static else Level.WARNING,
            message,
            stack=stack,
            **{Prop.INPUT: dim.input, Prop.DIM: dim.dim, Prop.SIZE: size},
            requested="dynamic_shapes=True" if dim.spec is True else _spelled(dim.spec),
            **_argument(arguments, dim.input),
        )
    names = dynamic.dim_names(program, dims)
    for assumption in assumptions:
        ctx.report(
            rules.DIMENSION_SPECIALIZED,
            Level.NOTE,
            f"The graph assumes {dynamic.readable(assumption, names)}: torch.export could not show that the model's "
            "code allows every size the dynamic shapes do, and the exported graph does not check it.",
            assumption=str(assumption),
        )
    for narrowing in dynamic.narrowed(program, dims):
        name, bounds = names.get(str(narrowing.symbol), str(narrowing.symbol)), narrowing.range
        sizes = f">= {bounds.lower}" if bounds.upper == int_oo else f"{bounds.lower} … {bounds.upper}"
        where = (
            f"{_code(narrowing.stack)} narrows" if narrowing.by_model else "PyTorch's checks of the model's code narrow"
        )
        ctx.report(
            rules.DIMENSION_SPECIALIZED,
            Level.WARNING if narrowing.by_model else Level.NOTE,
            f"{where} {name} to sizes {sizes}: the exported graph is right only for those, and does not check it.",
            stack=narrowing.stack,
            range=sizes,
        )
    for assumption in unchecked:
        ctx.report(
            rules.DIMENSION_SPECIALIZED,
            Level.WARNING,
            f"{_code(assumption.stack)} assumes {dynamic.readable(assumption.expr, names)}, which torch.export "
            "neither keeps nor checks: the exported graph is right only at sizes where it holds. If the line "
            "branches on it, an example size where it is false makes the code take the path every size can.",
            stack=assumption.stack,
            assumption=str(assumption.expr),
        )
    inputs = {name: _dims(val, names) for name, val in dynamic.user_inputs(program)}
    outputs = [_dims(v, names) for v in _output_values(program)]
    shapes = {Prop.INPUT_SHAPES: inputs, Prop.OUTPUT_SHAPES: outputs}
    if not all_static:
        symbolic = sorted({d for shape in [*inputs.values(), *outputs] for d in shape if isinstance(d, str)})
        message = f"Symbolic dimensions of the graph: {', '.join(symbolic)}."
        ctx.report(rules.DIMENSION_SPECIALIZED, Level.NOTE, message, **shapes)
        return
    asked = [d.spec.__name__ if isinstance(d.spec, _Dim) else f"{d.input} dim {d.dim}" for d in dims]
    spelled = ", ".join(f"{name}[{', '.join(map(str, shape))}]" for name, shape in inputs.items())
    ctx.report(
        rules.DIMENSION_SPECIALIZED,
        Level.WARNING,
        f"Every dimension asked to be dynamic came out static ({', '.join(asked)}): the graph's inputs are {spelled}, "
        "and it accepts only these sizes.",
        **shapes,
        **{ASKED_DYNAMIC: asked},
    )


def constraint_violation(
    error: BaseException,
    fixed: list[dynamic.Specialization],
    narrowings: list[dynamic.Narrowing],
    option: Any,
    arguments: dict[str, int | str],
) -> tuple[str, list[Frame], dict[str, Any]] | None:
    """(message, stack, properties) when `error` is torch.export refusing a named `Dim` the code fixed or
    narrowed (located by `fixed` and `narrowings`). The properties hold torch's suggested fixes and the
    spec as settings JSON (`dynamic.as_settings`), for a quick fix."""
    found = dynamic.violation(error)
    option = dynamic.requested_spec(option)
    if found is None or not isinstance(option, dict):
        return None
    names, fixes = found
    for index, (input_name, spec) in enumerate(option.items()):
        for dim, dim_spec in dynamic.per_dim(spec):
            if isinstance(dim_spec, _Dim) and dim_spec.__name__ in names:
                found = next((s for s in reversed(fixed) if s.matches(input_name, index, dim)), None)
                narrowing = next((n for n in narrowings if (n.dim.input, n.dim.dim) == (input_name, dim)), None)
                stack, library = _where(found, fixed) if found else (narrowing.stack if narrowing else [], None)
                value = f" to {found.value}" if found else ""
                # a range torch.export suggests (``Dim('seq', min=101)``): the code narrows the sizes, fixes none
                narrows = found is None and any(f"Dim({dim_spec.__name__!r}" in fix for fix in fixes)
                verb = "allows only some sizes of" if narrows else "fixes"
                message = (
                    f"{_code(stack, library)} {verb} dimension {dim} of input '{input_name}'{value}, but it is declared dynamic as "
                    f"Dim({dim_spec.__name__!r}). torch.export suggests: {'; '.join(fixes) or 'make the dimension static'}."
                )
                properties = {
                    Prop.INPUT: input_name,
                    Prop.DIM: dim,
                    Prop.DIM_NAME: dim_spec.__name__,
                    Prop.SUGGESTED_FIXES: fixes,
                }
                dynamic_shapes = {Prop.DYNAMIC_SHAPES: dynamic.as_settings(option)}
                return message, stack, properties | _argument(arguments, input_name) | dynamic_shapes
    return None


def _argument(arguments: dict[str, int | str], name: str) -> dict[str, Any]:
    return {Prop.ARGUMENT: arguments[name]} if name in arguments else {}


def _where(
    found: dynamic.Specialization | None, fixed: list[dynamic.Specialization]
) -> tuple[list[Frame], Frame | None]:
    """The user frames and library line where `found` was fixed; for one fixed with no frame of the model's
    (torch.export solving its guards at the end), those of the one located dimension fixed to the same size:
    an input the model ties to it (T5's ids and their attention mask)."""
    if found is None:
        return [], None
    if found.stack or found.library:
        return found.stack, found.library
    same = [s for s in fixed if s.value == found.value and (s.stack or s.library)]
    places = {(tuple(s.stack[:1]), s.library) for s in same}
    return (same[0].stack, same[0].library) if len(places) == 1 else ([], None)


def _code(stack: list[Frame], library: Frame | None = None) -> str:
    """The user's line of `stack`, else the `library` line with its file (``transformers/…/modeling_x.py:174``)."""
    if stack and stack[0].snippet:
        return f"`{stack[0].snippet}`"
    if library is not None and library.snippet:
        return f"`{library.snippet}` ({package_path(library.path)}:{library.line})"
    return "The model's code"


def _spelled(spec: Any) -> str:
    return f"Dim({spec.__name__!r})" if isinstance(spec, _Dim) else str(spec)


def _dims(value: Any, names: dict[str, str]) -> list[int | str]:
    return (
        [dynamic.readable(d, names) if dynamic.is_symbolic(d) else int(d) for d in value.shape]
        if isinstance(value, torch.Tensor)
        else []
    )


def _output_values(program: torch.export.ExportedProgram) -> list[Any]:
    output = next(n for n in program.graph.nodes if n.op == "output")
    values = [
        a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        for a in torch.utils._pytree.tree_leaves(output.args[0])
    ]
    return values[len(values) - len(program.graph_signature.user_outputs) :]
