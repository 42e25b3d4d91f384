"""Quick fixes for a dimension that was asked to be dynamic and came out static (FXE0020), as edits of
the export target that produced it:

- the example's size 0 or 1 there, a literal in a tensor factory call (``torch.randn(1, 8)``), becomes 2;
- torch.export's suggested fix for a named `Dim` the code fixed (``width = 6``, ``width = Dim("width",
  max=8)``) goes into the target's ``dynamic_shapes``: where the spec names the dim (inline, or the
  module-level variable it is bound to, as torch suggests), or as a new ``dynamic_shapes=`` argument of
  the decorator when the spec came from the settings.

The analysis is static: the target's code never runs here. It parses the source, so the server calls
it in its parser process (`targets.Discoveries.run`), never on its event loop.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from lsprotocol import types

from onnxlens_server.targets import discover

_FACTORIES = {"randn", "rand", "zeros", "ones", "empty", "full", "randint", "randperm", "arange", "tensor"}
_SIZED = {"randn", "rand", "zeros", "ones", "empty", "full", "randint"}  # take a size: ints, or a tuple


def example_size_range(source: str, target: str, argument: int | str, dim: int, size: int) -> types.Range | None:
    """The range of the literal `size` that is dimension `dim` of the example for `argument` (a position
    in the target's args, or a kwargs key) in the function `target` of `source`; None if not literal."""
    function, _ = _target(source, target)
    example = _example(function, argument) if function else None
    call = _factory_call(function, example) if example is not None else None
    dims = _size_literals(call) if call is not None else None
    if not dims or dim >= len(dims):
        return None
    literal = dims[dim]
    if not (isinstance(literal, ast.Constant) and type(literal.value) is int and literal.value == size):
        return None
    return _range(source, literal)


def fixes(source: str, target: str, properties: dict[str, Any]) -> list[tuple[str, list[types.TextEdit]]]:
    """(title, edits) of each fix for the FXE0020 result with `properties` (`change_example_size`,
    `apply_suggested_fix`): parses `source`, so the server runs it in its parser process."""
    made = [fix(source, target, properties) for fix in (change_example_size, apply_suggested_fix)]
    return [fix for fix in made if fix is not None]


def change_example_size(
    source: str, target: str, properties: dict[str, Any]
) -> tuple[str, list[types.TextEdit]] | None:
    """(title, edits) making the example's literal size 0/1 of a fixed dimension 2."""
    argument, dim, size = properties.get("argument"), properties.get("dim"), properties.get("size")
    if not isinstance(argument, (int, str)) or not isinstance(dim, int) or size not in (0, 1):
        return None
    where = example_size_range(source, target, argument, dim, size)
    if where is None:
        return None
    title = f"Give the example of '{properties.get('input')}' size 2 in dimension {dim} (it is {size}, which the code fixes)"
    return title, [types.TextEdit(where, "2")]


def apply_suggested_fix(
    source: str, target: str, properties: dict[str, Any]
) -> tuple[str, list[types.TextEdit]] | None:
    """(title, edits) applying torch.export's suggested fix for the named dim of a constraint violation
    to the target's ``dynamic_shapes``."""
    name = properties.get("dimName")
    fix = next(
        (rhs for line in properties.get("suggestedFixes") or [] if (rhs := _suggestion(line, name)) is not None), None
    )
    function, decorator = _target(source, target)
    if fix is None or function is None:
        return None
    spec = (
        next((k.value for k in decorator.keywords if k.arg == "dynamic_shapes"), None)
        if isinstance(decorator, ast.Call)
        else None
    )
    edits = _edit_spec(source, spec, name, fix) if spec is not None else _add_spec(source, decorator, properties, fix)
    if not edits:
        return None
    if isinstance(fix, ast.Constant):  # the model then takes this size only: the title says so
        return f"Apply torch.export's suggested fix: makes {name} static ({fix.value})", edits
    return f"Apply torch.export's suggested fix: {name} = {ast.unparse(fix)}", edits


def _suggestion(line: str, name: Any) -> ast.expr | None:
    """The right-hand side of torch's ``name = <int or Dim(...)>`` suggestion for `name`."""
    try:
        statement = ast.parse(line.strip()).body[0]
    except (SyntaxError, IndexError):
        return None
    if not (
        isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)
    ):
        return None
    if statement.targets[0].id != name:
        return None
    value = statement.value
    if isinstance(value, ast.Constant) and type(value.value) is int or _dim_call(value) == name:
        return value
    return None  # e.g. a derived dim (``2*_width``) that needs a new root: left to the user


def _edit_spec(source: str, spec: ast.expr, name: str, fix: ast.expr) -> list[types.TextEdit]:
    """Edits replacing each mention of the dim `name` in `spec` (a ``Dim(name)`` call, a string, or a
    module-level variable bound to ``Dim(name)``, whose definition changes) by `fix`."""
    tree = ast.parse(source)
    arguments = {id(a) for n in ast.walk(spec) if isinstance(n, ast.Call) for a in n.args}  # Dim("width")'s "width"
    edits = []
    for node in ast.walk(spec):
        if _dim_call(node) == name:
            edits.append(types.TextEdit(_range(source, node), _spelled(fix, source, node)))
        elif (
            isinstance(node, ast.Constant)
            and node.value == name
            and id(node) not in arguments
            and isinstance(fix, ast.Constant)
        ):
            edits.append(types.TextEdit(_range(source, node), ast.unparse(fix)))
        elif (
            isinstance(node, ast.Name)
            and (bound := _module_binding(tree, node.id)) is not None
            and _dim_call(bound) == name
        ):
            edit = types.TextEdit(_range(source, bound), _spelled(fix, source, bound))
            edits += [] if edit in edits else [edit]
    return edits


def _add_spec(source: str, decorator: ast.expr, properties: dict[str, Any], fix: ast.expr) -> list[types.TextEdit]:
    """An edit adding ``dynamic_shapes=`` with the export's spec (settings JSON) and `fix` to `decorator`."""
    spec, name = properties.get("dynamicShapes"), properties.get("input")
    dims = spec.get(name) if isinstance(spec, dict) else None
    if not isinstance(dims, dict) or not isinstance(fix, ast.Constant):
        return []
    spec = {**spec, name: {**dims, str(properties.get("dim")): fix.value}}
    argument = f"dynamic_shapes={_python(spec)}"
    if isinstance(decorator, ast.Call):
        end = _range(source, decorator).end
        at = types.Position(end.line, end.character - 1)  # before the closing parenthesis
        text = f", {argument}" if decorator.args or decorator.keywords else argument
    else:
        at, text = _range(source, decorator).end, f"({argument})"
    return [types.TextEdit(types.Range(at, at), text)]


def _python(spec: Any, depth: int = 0) -> str:
    """A settings-JSON spec as a Python literal: the dimension keys of an input's dict as integers."""
    if isinstance(spec, dict):
        keys = [k if depth == 1 and k.isdigit() else json.dumps(k) for k in spec]
        return "{" + ", ".join(f"{k}: {_python(v, depth + 1)}" for k, v in zip(keys, spec.values())) + "}"
    if isinstance(spec, list):
        return "[" + ", ".join(_python(v, depth + 1) for v in spec) + "]"
    return json.dumps(spec) if isinstance(spec, str) else repr(spec)


def _spelled(fix: ast.expr, source: str, replaced: ast.expr) -> str:
    """`fix` as source text, a ``Dim(...)`` spelled as the call it replaces is (``torch.export.Dim``)."""
    if isinstance(fix, ast.Call) and isinstance(replaced, ast.Call):
        bounds = "".join(f", {ast.unparse(k)}" for k in fix.keywords)
        return f"{ast.get_source_segment(source, replaced.func)}({ast.get_source_segment(source, replaced.args[0])}{bounds})"
    return ast.unparse(fix)


def _target(source: str, name: str) -> tuple[ast.FunctionDef | None, ast.expr | None]:
    """The export target `name` of `source` and its ``export_target`` decorator ((None, None) if the
    source has no such target, or does not parse)."""
    target = next((t for t in discover(source).targets if t.name == name), None)
    if target is None:
        return None, None
    function = next(
        n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.lineno - 1 == target.line
    )
    return function, next(d for d in function.decorator_list if d.lineno - 1 == target.decorator_line)


def _example(function: ast.FunctionDef, argument: int | str) -> ast.expr | None:
    """The expression the target's ``return model, args[, kwargs]`` gives for `argument`."""
    for node in _own_nodes(function):
        if not (isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) in (2, 3)):
            continue
        args, *kwargs = node.value.elts[1:]
        if isinstance(argument, int):
            args = _resolve(function, args, node)
            elements = args.elts if isinstance(args, (ast.Tuple, ast.List)) else [args]
            return elements[argument] if argument < len(elements) else None
        kwargs = _resolve(function, kwargs[0], node) if kwargs else None
        if isinstance(kwargs, ast.Dict):
            return next(
                (v for k, v in zip(kwargs.keys, kwargs.values) if isinstance(k, ast.Constant) and k.value == argument),
                None,
            )
        if isinstance(kwargs, ast.Call) and isinstance(kwargs.func, ast.Name) and kwargs.func.id == "dict":
            return next((k.value for k in kwargs.keywords if k.arg == argument), None)
    return None


def _factory_call(function: ast.FunctionDef, example: ast.expr) -> ast.Call | None:
    """The tensor factory call that makes `example` (through a local variable, and through method calls
    on its result such as ``.to(...)``)."""
    example = _resolve(function, example, None)
    while isinstance(example, ast.Call) and isinstance(example.func, ast.Attribute):
        if example.func.attr in _FACTORIES:
            return example if example.func.attr in _SIZED else None
        example = example.func.value
    return None


def _size_literals(call: ast.Call) -> list[ast.expr] | None:
    """The size of a factory call: its ``size=`` tuple, its first tuple argument, or its integer arguments."""
    size = next((k.value for k in call.keywords if k.arg == "size"), None)
    size = size or next((a for a in call.args if isinstance(a, (ast.Tuple, ast.List))), None)
    if isinstance(size, (ast.Tuple, ast.List)):
        return list(size.elts)
    return list(call.args) if call.func.attr != "randint" and call.args else None


def _resolve(function: ast.FunctionDef, node: ast.expr, before: ast.stmt | None) -> ast.expr:
    """`node`, or for a local name, the value last assigned to it in `function` (before `before`)."""
    if not isinstance(node, ast.Name):
        return node
    assigned = [
        n.value
        for n in _own_nodes(function)
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets)
        and (before is None or n.lineno < before.lineno)
    ]
    return assigned[-1] if assigned else node


def _own_nodes(function: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of `function`'s body, in order, not those of functions or classes defined in it."""
    found, pending = [], list(reversed(function.body))
    while pending:
        node = pending.pop()
        found.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            pending += reversed(list(ast.iter_child_nodes(node)))
    return found


def _module_binding(tree: ast.Module, name: str) -> ast.expr | None:
    """The value of the module-level ``name = ...`` (the last one)."""
    values = [
        n.value
        for n in tree.body
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
    ]
    return values[-1] if values else None


def _dim_call(node: ast.AST) -> str | None:
    """The name of a ``Dim("name", ...)`` call (any spelling of ``Dim``)."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return None
    func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
    return node.args[0].value if func == "Dim" and isinstance(node.args[0].value, str) else None


def _range(source: str, node: ast.AST) -> types.Range:
    """The LSP range of `node` (ast columns are UTF-8 byte offsets)."""
    lines = source.splitlines()

    def position(line: int, byte: int) -> types.Position:
        text = lines[line - 1].encode()[:byte].decode(errors="ignore")
        return types.Position(line - 1, len(text.encode("utf-16-le")) // 2)

    return types.Range(
        position(node.lineno, node.col_offset), position(node.end_lineno or node.lineno, node.end_col_offset or 0)
    )
