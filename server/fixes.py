"""Quick fixes: an ONNX function for an unsupported operator (the exporter's generated one, or a stub),
an export target for a module."""

from __future__ import annotations

import re
from typing import Any

from lsprotocol import types

from onnxlens_server.targets import Discovery, ModuleClass

_SCHEMA = re.compile(r"^(?P<ns>\w+)::(?P<op>\w+)(?:\.(?P<overload>\w+))?\((?P<args>.*)\)\s*->\s*(?P<returns>.*)$")
_ATTRIBUTE_TYPES = {"float": "float", "int": "int", "bool": "bool", "str": "str", "SymInt": "int"}


def register_stub(schema: str, discovery: Discovery, end_line: int) -> list[types.TextEdit] | None:
    """Edits that add an onnxscript stub for the operator `schema` and register it.

    The stub is complete and importable: it returns its first input unchanged until filled in.
    """
    match = _SCHEMA.match(schema.strip())
    if match is None:
        return None
    ns, op_name, overload = match["ns"], match["op"], match["overload"] or "default"
    params, inputs = [], []
    defaulted = False
    for arg in _split_args(match["args"]):
        if arg == "*":
            continue
        type_, _, rest = arg.partition(" ")
        name, _, default = rest.partition("=")
        if (
            defaulted and not default
        ):  # keyword-only after a defaulted one: onnxscript has no `*`, Python needs a default
            default = "None"
        defaulted = defaulted or bool(default)
        attribute = _ATTRIBUTE_TYPES.get(type_)
        if attribute:
            params.append(f"{name}: {attribute}" + (f" = {default}" if default else ""))
        else:
            params.append(name if not default else f"{name}=None")
            inputs.append(name)
    outputs = max(1, match["returns"].count("Tensor"))
    function = f"{ns}_{op_name}" + ("" if overload == "default" else f"_{overload}")
    result = ", ".join(["op.Identity(" + inputs[0] + ")"] * outputs) if inputs else "op.Constant(value_float=0.0)"
    stub = (
        f'\n\n_{ns}_opset = onnxscript.values.Opset("custom.{ns}", 1)\n\n\n'
        f"@onnxscript.script(_{ns}_opset)\n"
        f"def {function}({', '.join(params)}):\n"
        f'    """ONNX translation of {ns}::{op_name}.{overload} (a stub: fill in the ONNX ops)."""\n'
        f"    return {result}  # TODO: compute {ns}::{op_name} with ONNX ops (onnxscript.opset18)\n\n\n"
        f'exporter.default_registry().register_op({function}, "{ns}", "{op_name}", "{overload}")\n'
    )
    imports = [
        line
        for line, present in (
            ("import onnxscript", False),
            ("from onnxscript import opset18 as op", False),
            ("import exporter", discovery.imports_exporter),
        )
        if not present
    ]
    return _edit_with_imports(discovery, imports, end_line, stub)


def register_generated(
    schema: str, generated: Any, source: str, discovery: Discovery, end_line: int
) -> list[types.TextEdit] | None:
    """Edits that add the function the exporter generated and verified for the operator `schema` (an
    FXE0011 result's ``generatedFunction``) and register it; None if `generated` is not one."""
    match = _SCHEMA.match(schema.strip())
    if match is None or not _is_generated_function(generated):
        return None
    ns, op_name, overload = match["ns"], match["op"], match["overload"] or "default"
    code = (
        f"\n\n{generated['code'].rstrip()}\n\n\n"
        f'exporter.default_registry().register_op({generated["function"]}, "{ns}", "{op_name}", "{overload}")\n'
    )
    present = set(source.splitlines())
    imports = [line for line in generated["imports"] if line not in present]
    if not discovery.imports_exporter:
        imports.append("import exporter")
    return _edit_with_imports(discovery, imports, end_line, code)


def _is_generated_function(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("code"), str)
        and isinstance(value.get("function"), str)
        and value["function"].isidentifier()
        and isinstance(value.get("imports"), list)
        and all(isinstance(line, str) for line in value["imports"])
    )


def export_target_for(module: ModuleClass, discovery: Discovery) -> list[types.TextEdit]:
    """Edits that add an ``@exporter.export_target`` function right after `module`'s class."""
    name = "export_" + re.sub(r"(?<!^)(?=[A-Z])", "_", module.name).lower()
    code = (
        f"\n\n@exporter.export_target\n"
        f"def {name}():\n"
        f'    """Build {module.name} with example inputs for onnxlens (check the input shape)."""\n'
        f"    return {module.name}().eval(), ({module.example_input},)\n"
    )
    imports = [
        line
        for line, present in (
            ("import torch", discovery.imports_torch),
            ("import exporter", discovery.imports_exporter),
        )
        if not present
    ]
    return _edit_with_imports(discovery, imports, module.end_line + 1, code)


def _edit_with_imports(discovery: Discovery, imports: list[str], line: int, code: str) -> list[types.TextEdit]:
    edits = [
        types.TextEdit(
            types.Range(types.Position(line, 0), types.Position(line, 0)), code.lstrip("\n") if line == 0 else code
        )
    ]
    if imports:
        at = types.Position(discovery.last_import_line + 1, 0)
        edits.insert(0, types.TextEdit(types.Range(at, at), "".join(f"{i}\n" for i in imports)))
    return edits


def _split_args(args: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in args:
        depth += char in "(["
        depth -= char in ")]"
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return parts
