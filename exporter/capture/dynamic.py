"""Dynamic shapes: which input dimensions to make symbolic, what torch.export made of them, and the
user line that fixed each one it could not keep.

``ExportOptions.dynamic_shapes`` is ``True`` (every dimension of every input, `Dim.AUTO`) or a
torch.export spec (by argument name or position: `Dim("batch")`, derived dims such as ``2 * seq``,
`Dim.AUTO`, `Dim.DYNAMIC`, `Dim.STATIC`, ``None``). Capture runs with size-oblivious reasoning, so an
example size of 1 (or 0) does not make a dimension static by itself, and with every dimension that the
code fixes recorded (`Specialization`) with the user's frames at that moment.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import re
import traceback
from collections.abc import Iterator
from typing import Any

import sympy
import torch
import torch.fx.experimental._config as shape_config
from torch._guards import TracingContext
from torch.export.dynamic_shapes import _DerivedDim, _Dim, _DimHint
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from exporter.diagnostics.locations import EXPORTER_ROOT, Frame, is_tooling, library_frame, stack_of

_EXPORTER = EXPORTER_ROOT + os.sep
_VIOLATED = re.compile(r"Constraints violated \(([^)]*)\)")
_SIZE_FIX = re.compile(r"^\w+ = -?\d+$")  # a suggested fix that fixes a size: ``h = 224``
_SOURCE = re.compile(r"^L\['(?:flat_args'\]\[(?P<index>\d+)\]|(?P<name>\w+)'\])\.size\(\)\[(?P<dim>\d+)\]$")


@dataclasses.dataclass(frozen=True)
class Specialization:
    """A symbolic dimension the code made a constant: torch's name of it, the value, where."""

    source: str  # e.g. ``L['x'].size()[1]`` (non-strict) or ``L['flat_args'][0].size()[1]`` (strict)
    value: int
    stack: list[Frame]  # user frames, innermost first
    library: Frame | None = None  # without user frames, the line of a package's model code (transformers') that did it

    def matches(self, name: str, index: int, dim: int) -> bool:
        """Whether this is dimension `dim` of the user input `name` (flat input `index`)."""
        found = _SOURCE.match(self.source)
        return bool(found) and int(found["dim"]) == dim and (found["name"] == name or found["index"] == str(index))


@dataclasses.dataclass(frozen=True)
class InputDim:
    """One dimension of a user input that was asked to be dynamic."""

    input: str  # the graph input's name (the argument's, for top-level tensors)
    index: int  # position among the flat user inputs
    dim: int
    spec: Any  # True (every dim), a `Dim`, or a `_DimHint`


def requested(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], option: Any) -> Any:
    """The torch.export ``dynamic_shapes`` for the option: every dimension `Dim.AUTO` for True, the
    spec itself otherwise, None for no dynamic dims."""
    if option is None or option is False:
        return None
    if option is not True:
        return _with_dims(option)

    def spec(x: Any) -> Any:
        return {i: torch.export.Dim.AUTO for i in range(x.dim())} if isinstance(x, torch.Tensor) else None

    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except TypeError:
        return torch.utils._pytree.tree_map(spec, (args, kwargs))
    return {name: torch.utils._pytree.tree_map(spec, value) for name, value in bound.arguments.items()}


def var_keyword_tensors(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """The keyword arguments holding tensors that `module`'s forward takes only through its ``**kwargs``
    (torch.export refuses every dynamic_shapes spec for those: "Must provide a tree_name")."""
    forward = module.forward if isinstance(module, torch.nn.Module) else module
    try:
        signature = inspect.signature(forward)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return []
    var_keyword = next((p.name for p in signature.parameters.values() if p.kind == p.VAR_KEYWORD), None)
    extra = bound.arguments.get(var_keyword, {}) if var_keyword else {}
    leaves = torch.utils._pytree.tree_leaves
    return [name for name, value in extra.items() if any(isinstance(x, torch.Tensor) for x in leaves(value))]


def has_size_0_or_1(inputs: Any) -> bool:
    """Whether an input tensor has a dimension of size 0 or 1 (which torch.export makes static)."""
    return any(
        isinstance(x, torch.Tensor) and any(d <= 1 for d in x.shape) for x in torch.utils._pytree.tree_leaves(inputs)
    )


@contextlib.contextmanager
def capturing(dynamic: bool, oblivious: bool) -> Iterator[list[Specialization]]:
    """The capture context of an export: for a dynamic one, every symbol fixed to a number is recorded,
    and with `oblivious`, size-oblivious reasoning (an example size of 0 or 1 stays symbolic unless the
    code fixes it)."""
    found: list[Specialization] = []
    if not dynamic:
        yield found
        return
    original = ShapeEnv._set_replacement

    def record(shape_env: ShapeEnv, symbol: sympy.Symbol, target: sympy.Expr, message: str) -> None:
        if target.is_number and symbol not in shape_env.replacements:
            sources = shape_env.var_to_sources.get(symbol) or []
            if sources:
                frames = _model_stack()
                user = [f for f in frames if f.is_user_code]
                found.append(
                    Specialization(sources[0].name, int(target), user, None if user else library_frame(frames))
                )
        original(shape_env, symbol, target, message)

    ShapeEnv._set_replacement = record
    try:
        with shape_config.patch(backed_size_oblivious=oblivious):
            yield found
    finally:
        ShapeEnv._set_replacement = original


def requested_dims(program: torch.export.ExportedProgram, option: Any) -> list[InputDim]:
    """The user input dimensions `option` asked to be dynamic (top-level tensor arguments of a spec)."""
    inputs = user_inputs(program)
    if option is True:
        return [InputDim(name, i, d, True) for i, (name, val) in enumerate(inputs) for d in range(val.dim())]
    if not option:
        return []
    option = _with_dims(option)
    specs = option if isinstance(option, dict) else dict(zip([name for name, _ in inputs], option))
    found = []
    for i, (name, val) in enumerate(inputs):
        spec = specs.get(name)
        found += [InputDim(name, i, d, s) for d, s in per_dim(spec) if d < val.dim() and _is_dynamic(s)]
    return found


def specialized(program: torch.export.ExportedProgram, dims: list[InputDim]) -> list[tuple[InputDim, int]]:
    """The requested dimensions that came out static, with their size."""
    inputs = user_inputs(program)
    return [(d, int(size)) for d in dims if not is_symbolic(size := inputs[d.index][1].shape[d.dim])]


def still_symbolic(program: torch.export.ExportedProgram, fixed: list[Specialization]) -> list[Specialization]:
    """The recorded specializations whose input dimension the program keeps symbolic: size-oblivious
    capture does that with a size the code compares with 0 or 1 (``if x.shape[0] == 1:``), and the
    graph then holds only at that size."""
    inputs = user_inputs(program)
    return [
        s
        for s in fixed
        if any(
            s.matches(name, i, d) and is_symbolic(size)
            for i, (name, val) in enumerate(inputs)
            for d, size in enumerate(val.shape)
        )
    ]


def violation(error: BaseException | None) -> tuple[set[str], list[str]] | None:
    """The named Dims torch.export refused in `error` ("Constraints violated (h, w)!") and its suggested
    fixes (``h = Dim('h', min=33)``, ``h = 224``), or None for another error."""
    text = "" if error is None else str(error)
    violated = _VIOLATED.search(text)
    if violated is None:
        return None
    fixes = text.split("Suggested fixes:", 1)[1].strip().splitlines() if "Suggested fixes:" in text else []
    return {n.strip() for n in violated[1].split(",")}, [line.strip() for line in fixes if "=" in line]


def loosened(spec: Any, errors: list[BaseException]) -> Any:
    """`spec` with the named Dims that `errors` refused as `Dim.DYNAMIC` where torch.export's suggested fixes
    only bound their sizes (``h = Dim('h', min=33)``, ``w = 8*_w``) and fix none: torch.export then narrows
    their ranges itself (`narrowed` says by what; a line of the model keeps the refusal, see the extractor).
    None where a fix fixes a size, there is none, or a refused Dim is derived."""
    found = [v for v in map(violation, errors) if v is not None]
    fixes = [fix for _, fixes in found for fix in fixes]
    if not fixes or any(_SIZE_FIX.match(fix) for fix in fixes):
        return None
    names = {name for names, _ in found for name in names}
    derived = False

    def loosen(x: Any) -> Any:
        nonlocal derived
        if isinstance(x, _DerivedDim) and x.root.__name__ in names:
            derived = True
        if isinstance(x, _Dim) and x.__name__ in names:
            return torch.export.Dim.DYNAMIC
        if isinstance(x, dict):
            return {k: loosen(v) for k, v in x.items()}
        return type(x)(loosen(v) for v in x) if isinstance(x, (list, tuple)) else x

    loose = loosen(spec)
    return None if derived else loose


def _shape_env(program: torch.export.ExportedProgram) -> ShapeEnv | None:
    sizes = [size for _, val in user_inputs(program) for size in val.shape if is_symbolic(size)]
    return sizes[0].node.shape_env if sizes else None


@dataclasses.dataclass(frozen=True)
class Assumption:
    """An equality of sizes the model's code made torch.export assume, and where."""

    expr: sympy.Expr
    stack: list[Frame]


def unchecked_equalities(program: torch.export.ExportedProgram) -> list[Assumption]:
    """Equalities of the input sizes that a line of the model made torch.export assume (a branch such as
    ``if num_patches == num_positions``, DINOv2's at its pretrained size) and that the exported program drops:
    not true at every size its ranges allow, and not checked. The graph is right only where they hold."""
    shape_env = _shape_env(program)
    if shape_env is None:
        return []
    ranges = dict(program.range_constraints)
    found: dict[str, Assumption] = {}
    for guard in shape_env.guards:
        frame = _model_frame(guard)
        if not isinstance(guard.expr, sympy.Eq) or frame is None:
            continue
        expr = guard.expr.xreplace(shape_env.replacements)
        if expr.free_symbols - ranges.keys() or bound_sympy(expr, ranges).lower:  # always true where allowed
            continue
        found.setdefault(str(expr), Assumption(expr, [frame]))
    return list(found.values())


def _model_frame(guard: Any) -> Frame | None:
    """The model's line a shape guard comes from; None for PyTorch's own checks (consequences of a line of
    the model's)."""
    frame = guard.sloc.framework_loc
    if not isinstance(frame, traceback.FrameSummary) or is_tooling(frame.filename):
        return None
    return Frame(frame.filename, frame.lineno, frame.name, (frame.line or "").strip())


def _implied(condition: sympy.Expr, ranges: dict[sympy.Symbol, ValueRanges]) -> bool:
    """Whether `condition` holds at every size `ranges` allow."""
    return not condition.free_symbols - ranges.keys() and bool(bound_sympy(condition, ranges).lower)


def as_bounds(program: torch.export.ExportedProgram, conditions: list[sympy.Expr]) -> list[sympy.Expr]:
    """`conditions` on the sizes (`assertions`), plain: one that holds for every size of its symbol from
    some k up to the example's and beyond (PyTorch's check that a strided size is not 1, ``(h - 1)//32 != 0``)
    becomes ``h >= k`` (the largest k of a symbol's), and one those bounds imply is dropped."""
    shape_env = _shape_env(program)
    if shape_env is None:
        return conditions
    ranges = dict(program.range_constraints)
    lowest: dict[sympy.Symbol, int] = {}
    for condition in conditions:
        if len(condition.free_symbols) != 1:
            continue
        (symbol,) = condition.free_symbols
        if symbol not in ranges or symbol not in shape_env.var_to_val:
            continue
        upper, example = ranges[symbol].upper, int(shape_env.var_to_val[symbol])
        low, high = int(ranges[symbol].lower), example
        if not _implied(condition, {symbol: ValueRanges(example, upper)}):
            continue
        while low < high:  # the smallest k from which on it holds
            middle = (low + high) // 2
            low, high = (
                (low, middle) if _implied(condition, {symbol: ValueRanges(middle, upper)}) else (middle + 1, high)
            )
        lowest[symbol] = max(lowest.get(symbol, low), low)
    bounded = ranges | {symbol: ValueRanges(k, ranges[symbol].upper) for symbol, k in lowest.items()}
    kept = [c for c in conditions if not _implied(c, bounded)]
    return [sympy.Ge(symbol, k) for symbol, k in lowest.items() if k > ranges[symbol].lower] + kept


def bounds_only(conditions: list[sympy.Expr], relations: bool = False) -> bool:
    """Whether `conditions` (`assertions` spelled by `as_bounds`) leave the sizes ranges: bounds and sizes ruled
    out (``h >= 33``, ``seq != 1``); with `relations`, equalities between several dimensions too (a KV cache's
    sizes kept symbolic at 0/1: BLOOM's ``total == past + new``, GPT-Neo's arithmetic of its window). An
    equality of one dimension (LongT5's ``Mod(length, 5) == 0``), or any without `relations` (LeViT's
    ``patches == 196`` of height and width), keeps the sizes to a set: the graph would be right at those only."""
    return all(
        isinstance(c, (sympy.Ne, sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt))
        or not c.free_symbols
        or (relations and len(c.free_symbols) > 1)
        for c in conditions
    )


@dataclasses.dataclass(frozen=True)
class Narrowing:
    """A dynamic input dimension whose sizes the capture narrowed (``if x.shape[1] > 100:``), and where."""

    dim: InputDim  # the first input dimension of the symbol
    symbol: sympy.Symbol
    range: ValueRanges
    by_model: bool  # a comparison in the model's code did it, not PyTorch's own checks
    stack: list[Frame]  # that line (TorchDynamo's capture does not say where)


def narrowed(program: torch.export.ExportedProgram, dims: list[InputDim]) -> list[Narrowing]:
    """The requested dimensions whose range torch.export narrowed below the one asked for (a named `Dim`'s;
    otherwise from 2, without bound): the graph is right only in that range, which it does not check.
    With the model's line whose comparison did it, if one did."""
    shape_env = _shape_env(program)
    if shape_env is None:
        return []
    inputs = user_inputs(program)
    found: dict[sympy.Symbol, Narrowing] = {}
    for d in dims:
        symbol = inputs[d.index][1].shape[d.dim]
        symbol = symbol.node.expr if is_symbolic(symbol) else None
        if not isinstance(symbol, sympy.Symbol) or symbol in found or isinstance(d.spec, _DerivedDim):
            continue
        asked = ValueRanges(max(d.spec.min, 2), d.spec.max) if isinstance(d.spec, _Dim) else ValueRanges(2, int_oo)
        bounds = program.range_constraints[symbol]
        if bounds.lower <= asked.lower and bounds.upper >= asked.upper:
            continue
        guards = [
            guard
            for guard in shape_env.guards
            if isinstance(guard.expr, sympy.core.relational.Relational)
            and not isinstance(guard.expr, (sympy.Eq, sympy.Ne))
            and symbol in guard.expr.free_symbols
        ]
        frame = next((f for f in map(_model_frame, guards) if f is not None), None)
        by_model = frame is not None or any(guard.sloc.maybe_user_loc for guard in guards)
        found[symbol] = Narrowing(d, symbol, bounds, by_model, [frame] if frame else [])
    return list(found.values())


def assertions(program: torch.export.ExportedProgram) -> list[sympy.Expr]:
    """What the program's runtime assertions (``_assert_scalar``) state of its sizes, in order."""
    found = []
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target == torch.ops.aten._assert_scalar.default:
            val = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
            if isinstance(val, torch.SymBool):
                found.append(val.node.expr)
    return found


_SQUEEZES = (torch.ops.aten.squeeze.default, torch.ops.aten.squeeze.dim, torch.ops.aten.squeeze.dims)


def squeezed_at_one(program: torch.export.ExportedProgram) -> list[Specialization]:
    """Input dimensions of example size 1 that a ``squeeze`` reads while size-oblivious capture keeps
    them symbolic: it then squeezes nothing (a symbolic size is taken for not 1), though PyTorch
    removes them at the example's size. Captured again as torch.export does, they are static."""
    inputs = [(index, val) for index, (_, val) in enumerate(user_inputs(program))]
    found = []
    for node in program.graph.nodes:
        val = node.args[0].meta.get("val") if node.op == "call_function" and node.target in _SQUEEZES else None
        if not isinstance(val, torch.Tensor) or val.dim() == 0:
            continue
        dims = node.args[1] if len(node.args) > 1 else range(val.dim())
        for d in dims if isinstance(dims, (list, tuple, range)) else [dims]:
            size = val.shape[d % val.dim()]
            if not (is_symbolic(size) and size.node.expr.is_Symbol and size.node.hint == 1):
                continue
            frames = [f for f in stack_of(node) if f.is_user_code]
            found += [
                Specialization(f"L['flat_args'][{index}].size()[{i}]", 1, frames)
                for index, input_val in inputs
                for i, s in enumerate(input_val.shape)
                if is_symbolic(s) and s.node.expr == size.node.expr
            ]
    return found


def is_symbolic(size: Any) -> bool:
    """A size that is not a constant (torch.export may leave a SymInt whose value is fixed)."""
    return isinstance(size, torch.SymInt) and not size.node.expr.is_number


def dim_names(program: torch.export.ExportedProgram, dims: list[InputDim]) -> dict[str, str]:
    """Names of the symbols of the inputs' dynamic dimensions: a named `Dim`'s name (the root's for a
    derived dim such as ``2 * seq``), else ``<input>_dim_<i>`` of the first input that has it."""
    names: dict[str, str] = {}
    inputs = user_inputs(program)
    for d in dims:
        size = inputs[d.index][1].shape[d.dim]
        if isinstance(d.spec, _Dim) and is_symbolic(size):
            root = d.spec.root if isinstance(d.spec, _DerivedDim) else d.spec
            for symbol in size.node.expr.free_symbols:
                names[str(symbol)] = root.__name__
    for name, val in inputs:
        for i, size in enumerate(val.shape):
            if is_symbolic(size) and (expr := size.node.expr).is_Symbol:
                names.setdefault(str(expr), f"{name}_dim_{i}")
    return names


def readable(size: Any, names: dict[str, str]) -> str:
    """A symbolic size or a condition on sizes spelled with `names` (``2*seq``, ``seq != 1``)."""
    expr = size.node.expr if isinstance(size, torch.SymInt) else size
    expr = expr.xreplace({s: sympy.Symbol(names[str(s)]) for s in expr.free_symbols if str(s) in names})
    if isinstance(expr, (sympy.Eq, sympy.Ne)):  # sympy spells these Eq(a, b), Ne(a, b)
        return f"{expr.lhs} {'==' if isinstance(expr, sympy.Eq) else '!='} {expr.rhs}"
    return str(expr)


def user_inputs(program: torch.export.ExportedProgram) -> list[tuple[str, torch.Tensor]]:
    """(graph input name, example value) of every user input tensor, in order."""
    user = {
        spec.arg.name
        for spec in program.graph_signature.input_specs
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT
    }
    return [
        (n.name, n.meta["val"])
        for n in program.graph.nodes
        if n.op == "placeholder" and n.name in user and isinstance(n.meta.get("val"), torch.Tensor)
    ]


def per_dim(spec: Any) -> list[tuple[int, Any]]:
    """(dimension, its spec) of one input's spec: a dict by dimension, or a list/tuple in order."""
    if isinstance(spec, dict):
        return list(spec.items())
    return list(enumerate(spec)) if isinstance(spec, (list, tuple)) else []


def arguments(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, int | str]:
    """Where the example gives each top-level tensor input, by its name: a position in `args`, or
    the `kwargs` key."""
    forward = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        parameters = list(inspect.signature(forward).parameters.values())
    except (TypeError, ValueError):
        return {}
    positional = [p.name for p in parameters[: len(args)] if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    found: dict[str, int | str] = {name: i for i, name in enumerate(positional) if isinstance(args[i], torch.Tensor)}
    return found | {key: key for key, value in kwargs.items() if isinstance(value, torch.Tensor)}


def captured_shapes(model: Any) -> dict[str, tuple[Any, ...]]:
    """The input shapes a graph captured before (``torch.export.export(...).module()``, a PT2E-quantized model)
    was captured with, by input name: where they are numbers, the graph only takes those sizes. Empty for
    other models."""
    if not isinstance(model, torch.fx.GraphModule):
        return {}
    return {
        node.name: tuple(node.meta["val"].shape)
        for node in model.graph.find_nodes(op="placeholder")
        if isinstance(node.meta.get("val"), torch.Tensor)
    }


def as_settings(option: Any) -> Any:
    """A spec as the JSON of the settings (a named `Dim` as its name, hints as "auto", "dynamic",
    "static"), or None where JSON cannot say it (a derived dim, a range)."""
    if option is None or isinstance(option, (bool, int, str)):
        return option
    if isinstance(option, _DimHint):
        return option.type.name.lower() if option.min is None and option.max is None else None
    if isinstance(option, _Dim):
        plain = not isinstance(option, _DerivedDim) and option.min <= 2 and option.max == int_oo
        return option.__name__ if plain else None
    if not isinstance(option, (dict, list, tuple)):
        return None
    pairs = list(option.items() if isinstance(option, dict) else enumerate(option))
    converted = [(str(k), as_settings(v)) for k, v in pairs]
    if any(c is None and v is not None for (_, c), (_, v) in zip(converted, pairs)):
        return None
    return dict(converted) if isinstance(option, dict) else [c for _, c in converted]


def requested_spec(option: Any) -> Any:
    """The option as a torch.export spec (strings as dims), or None for True/False/None."""
    return None if option in (None, True, False) else _with_dims(option)


def _with_dims(spec: Any) -> Any:
    """A spec with its strings (from JSON-like settings) as torch.export's: "auto", "dynamic",
    "static" as those hints, any other string as a named `Dim`; dimension keys as integers."""
    hints = {"auto": torch.export.Dim.AUTO, "dynamic": torch.export.Dim.DYNAMIC, "static": torch.export.Dim.STATIC}
    if isinstance(spec, str):
        return hints.get(spec.lower()) or torch.export.Dim(spec)
    if isinstance(spec, dict):
        return {int(k) if isinstance(k, str) and k.isdigit() else k: _with_dims(v) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(_with_dims(v) for v in spec)
    return spec


def _is_dynamic(spec: Any) -> bool:
    if isinstance(spec, _DimHint):
        return spec != torch.export.Dim.STATIC
    return isinstance(spec, _Dim)


def _model_stack() -> list[Frame]:
    """The model's frames now, innermost first: TorchDynamo's (strict capture), or Python's up to the
    exporter's own frames (the code that called the export is not the model's), less torch's."""
    traced = TracingContext.extract_stack()
    stack = list(reversed(traced or traceback.extract_stack()))
    if not traced:  # skip this module's frames, stop at the exporter's frame that started the capture
        inner = next((i for i, f in enumerate(stack) if not f.filename.startswith(_EXPORTER)), len(stack))
        outer = next((i for i, f in enumerate(stack) if i >= inner and f.filename.startswith(_EXPORTER)), len(stack))
        stack = stack[inner:outer]
    return [Frame(f.filename, f.lineno, f.name, (f.line or "").strip()) for f in stack if not is_tooling(f.filename)]
