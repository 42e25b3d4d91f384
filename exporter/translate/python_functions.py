"""ONNX functions generated from a custom operator's Python implementation (offered with FXE0011).

An operator defined with `torch.library.custom_op` carries the Python function that implements it.
When no ONNX function is registered for it, that function is called in a tiny module on inputs like
the node's and exported with torchlib's translations: float, int and bool arguments go in as 0-d
tensors, so that they become ONNX attributes; if the implementation needs them as Python values,
they keep this call's values (the function's docstring says so). onnxscript's own converter writes
the ONNX graph as onnxscript source. The source is then imported, registered in a fresh registry,
and a model calling the operator is exported and run in onnxruntime against PyTorch, at the call's
shapes and at larger ones when the operator takes them: only a function that matches is offered.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import pathlib
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import onnxscript
import torch
from torch.fx.experimental.symbolic_shapes import optimization_hint

from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.options import ExportOptions
from exporter.output.program import ExportOutput
from exporter.translate.opname import OpName
from exporter.translate.registry import OnnxRegistry
from exporter.verify.op_debug import TOLERANCES, random_like

Export = Callable[[torch.nn.Module, tuple[Any, ...], ExportOptions], ExportOutput]
"""Exports a module (without generating functions for operators it lacks itself)."""

BUDGET_SECONDS = 30.0  # per export: generation stops for the operators after that
_ANNOTATIONS = {"float": "float", "int": "int", "SymInt": "int", "bool": "bool", "str": "str"}


@dataclasses.dataclass(frozen=True)
class _AttributeForm:
    """How a scalar argument is traced (a 0-d tensor) and read back from its ONNX attribute."""

    dtype: torch.dtype
    constant: str  # the Constant attribute that holds it
    type: ir.AttributeType


_ATTRIBUTE_FORMS = {
    "float": _AttributeForm(torch.float32, "value_float", ir.AttributeType.FLOAT),
    "int": _AttributeForm(torch.int64, "value_int", ir.AttributeType.INT),
    "SymInt": _AttributeForm(torch.int64, "value_int", ir.AttributeType.INT),
    "bool": _AttributeForm(torch.bool, "value_int", ir.AttributeType.INT),
}


class NotGenerated(Exception):
    """No verified function: the message says why."""


@dataclasses.dataclass(frozen=True, eq=False)
class Argument:
    """One argument of the operator's schema at this call."""

    name: str
    type: str  # the schema's: Tensor, float, int, SymInt, bool, str
    value: Any  # a random tensor like the node's for a Tensor, else the call's value
    kwarg_only: bool = False

    @property
    def is_tensor(self) -> bool:
        return self.type == "Tensor"


@dataclasses.dataclass(frozen=True)
class GeneratedFunction:
    """Verified onnxscript source for an operator: its imports, its code and the function's name."""

    function: str
    imports: list[str]
    code: str
    attributes: list[str]  # scalar arguments that are ONNX attributes
    specialized: dict[str, Any]  # scalar arguments fixed to the call's values
    checked_shapes: list[list[list[int]]]  # the tensor inputs' shapes of each comparison
    max_abs_error: float

    def applies_to(self, arguments: Sequence[Argument]) -> bool:
        """Whether it computes the call with `arguments` (its specialized values are the call's)."""
        return all(a.value == self.specialized[a.name] for a in arguments if a.name in self.specialized)

    def properties(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "imports": self.imports,
            "code": self.code,
            "attributes": self.attributes,
            "specialized": self.specialized,
            "checkedShapes": self.checked_shapes,
            "maxAbsError": self.max_abs_error,
        }


class Generator:
    """Generates functions for the custom operators of one export: once per operator and input dtypes
    (again for a call whose values a specialized function does not compute), within `BUDGET_SECONDS`.
    Why there is none is an FXE0011 note, once per operator, unlocated: the error is the problem."""

    def __init__(self, opset_version: int, export: Export, ctx: DiagnosticContext) -> None:
        self._opset_version = opset_version
        self._export = export
        self._ctx = ctx
        self._deadline = time.perf_counter() + BUDGET_SECONDS
        self._found: dict[tuple[Any, ...], GeneratedFunction | NotGenerated] = {}
        self._noted: set[Any] = set()  # operators whose note is reported

    def __call__(self, node: torch.fx.Node) -> GeneratedFunction | None:
        """A verified function for `node`'s operator, if it is a custom op and one can be generated."""
        implementation = python_implementation(node.target)
        if implementation is None:
            return None
        try:
            with torch.random.fork_rng(devices=[]):  # the user's random state stays as it was
                return self._find(node, implementation)
        except NotGenerated as e:
            if node.target not in self._noted:
                self._noted.add(node.target)
                message = f"No ONNX function could be generated for {node.target} from its Python implementation: {str(e).rstrip('.')}."
                self._ctx.report(rules.NO_SYMBOLIC_FUNCTION, Level.NOTE, message, node=node, stack=[])
            return None

    def _find(self, node: torch.fx.Node, implementation: Callable[..., Any]) -> GeneratedFunction:
        arguments = call_arguments(node)
        key = (node.target, *(str(a.value.dtype) for a in arguments if a.is_tensor))
        found = self._found.get(key)
        if found is None or (isinstance(found, GeneratedFunction) and not found.applies_to(arguments)):
            if time.perf_counter() > self._deadline:
                raise NotGenerated(f"the {BUDGET_SECONDS:g} s an export may spend on generating functions are used up")
            try:
                found = _generate(node, implementation, arguments, self._opset_version, self._export)
            except NotGenerated as e:
                found = e
            except Exception as e:  # a generation failure must not fail the export
                found = NotGenerated(f"{type(e).__name__}: {_first_line(e)}")
            self._found[key] = found
        if isinstance(found, NotGenerated):
            raise found
        return found


def python_implementation(target: Any) -> Callable[..., Any] | None:
    """The Python function a `torch.library.custom_op` runs on CPU, if `target` is one (torch has no
    public accessor: it is the op definition's kernel for "cpu", or for every device)."""
    if not isinstance(target, torch._ops.OpOverload):
        return None
    opdef = torch._library.custom_ops._maybe_get_opdef(target)
    if opdef is None:
        return None
    return opdef._backend_fns.get("cpu") or opdef._backend_fns.get(None)


def call_arguments(node: torch.fx.Node) -> list[Argument]:
    """The schema's arguments at this call: tensors (random, like the node's) and scalars."""
    schema = node.target._schema
    arguments = []
    for i, arg in enumerate(schema.arguments):
        type_ = str(arg.type)
        if i < len(node.args):
            value = node.args[i]
        elif arg.name in node.kwargs:
            value = node.kwargs[arg.name]
        else:
            value = arg.default_value
        if type_ == "Tensor" and isinstance(value, torch.fx.Node) and isinstance(value.meta.get("val"), torch.Tensor):
            value = _random_tensor_like(value.meta["val"])
        elif type_ not in _ANNOTATIONS or not isinstance(value, (bool, int, float, str)):
            raise NotGenerated(f"argument {arg.name} ({type_}) is not a tensor, number or string at this call")
        arguments.append(Argument(arg.name, type_, value, arg.kwarg_only))
    return arguments


def _generate(
    node: torch.fx.Node,
    implementation: Callable[..., Any],
    arguments: list[Argument],
    opset_version: int,
    export: Export,
) -> GeneratedFunction:
    """Scalars as attributes, else as the call's values; raises `NotGenerated` with the last attempt's reason."""
    scalars = [a for a in arguments if a.type in _ATTRIBUTE_FORMS]
    for attributes in [scalars, []] if scalars else [[]]:
        try:
            return _generate_with(node, implementation, arguments, attributes, opset_version, export)
        except NotGenerated as e:
            error = e
    raise error


def _generate_with(
    node: torch.fx.Node,
    implementation: Callable[..., Any],
    arguments: list[Argument],
    attributes: list[Argument],
    opset_version: int,
    export: Export,
) -> GeneratedFunction:
    """One attempt: trace `implementation` with `attributes` as inputs, write the function, verify it."""
    name = OpName.from_target(node.target)
    function_name = f"{name.namespace}_{name.op_name}" + ("" if name.overload == "default" else f"_{name.overload}")
    traced = [a for a in arguments if a.is_tensor or a in attributes]
    module = _Call(implementation, arguments, traced)
    options = ExportOptions(
        dynamic_shapes=True, opset_version=opset_version, onnx_registry=OnnxRegistry(opset_version), modularize=False
    )
    try:
        model = export(module, tuple(_traced_value(a) for a in traced), options).model
    except Exception as e:
        raise NotGenerated(f"it does not export: {_first_line(e)}") from e
    function = _to_function(model, traced, attributes, f"custom.{name.namespace}", function_name)
    imports, code = _render(function, arguments)
    checked_shapes, error = _verify(node, _load(imports, code, function_name), arguments, name, opset_version, export)
    specialized = {a.name: a.value for a in arguments if not a.is_tensor and a not in attributes}
    _, code = _render(function, arguments, _docstring(name, arguments, specialized, checked_shapes, error))
    return GeneratedFunction(
        function_name, imports, code, [a.name for a in attributes], specialized, checked_shapes, error
    )


class _Call(torch.nn.Module):
    """Calls `fn` with the operator's arguments: the inputs given for `traced`, the call's values for the rest."""

    def __init__(self, fn: Callable[..., Any], arguments: list[Argument], traced: list[Argument]) -> None:
        super().__init__()
        self.fn, self.arguments, self.traced = fn, arguments, traced

    def forward(self, *inputs: torch.Tensor) -> Any:
        given = {a.name: x for a, x in zip(self.traced, inputs)}
        args = [given.get(a.name, a.value) for a in self.arguments if not a.kwarg_only]
        return self.fn(*args, **{a.name: given.get(a.name, a.value) for a in self.arguments if a.kwarg_only})


def _traced_value(argument: Argument) -> torch.Tensor:
    if argument.is_tensor:
        return argument.value
    return torch.tensor(argument.value, dtype=_ATTRIBUTE_FORMS[argument.type].dtype)


def _to_function(
    model: ir.Model, traced: list[Argument], attributes: list[Argument], domain: str, name: str
) -> ir.Function:
    """The exported graph as a function: traced scalars read from attributes, initializers as Constants."""
    graph = model.graph
    if model.functions or any(n.domain not in ("", "ai.onnx") for n in ir.traversal.RecursiveGraphIterator(graph)):
        raise NotGenerated("its ONNX graph uses ops outside the ONNX standard")
    if len(graph.inputs) != len(traced):
        raise NotGenerated("its ONNX graph does not take every input")
    for value, argument in zip(list(graph.inputs), traced):
        value.name = argument.name
        if argument in attributes:
            graph.inputs.remove(value)
            _read_from_attribute(graph, value, argument)
    for value in list(graph.initializers.values()):
        graph.initializers.pop(value.name)
        constant = ir.node("Constant", [], attributes={"value": value.const_value})
        _prepend(graph, [constant])
        ir.convenience.replace_all_uses_with(value, constant.outputs[0], replace_graph_outputs=True)
        constant.outputs[0].name = value.name
    forms = [ir.Attr(a.name, _ATTRIBUTE_FORMS[a.type].type, None) for a in attributes]
    return ir.Function(domain, name, graph=graph, attributes=forms)


def _read_from_attribute(graph: ir.Graph, value: ir.Value, argument: Argument) -> None:
    """Replace the graph input `value` by a Constant of `argument`'s attribute."""
    form = _ATTRIBUTE_FORMS[argument.type]
    nodes = [ir.node("Constant", [], attributes={form.constant: ir.RefAttr(form.constant, argument.name, form.type)})]
    if argument.type == "bool":
        nodes[0].outputs[0].name = f"{argument.name}_int"
        nodes.append(ir.node("Cast", nodes[0].outputs, attributes={"to": ir.DataType.BOOL}))
    _prepend(graph, nodes)
    ir.convenience.replace_all_uses_with(value, nodes[-1].outputs[0], replace_graph_outputs=True)
    nodes[-1].outputs[0].name = f"{argument.name}_value"


def _prepend(graph: ir.Graph, nodes: list[ir.Node]) -> None:
    if len(graph):
        graph.insert_before(graph[0], nodes)
    else:
        graph.extend(nodes)


def _docstring(
    name: OpName, arguments: list[Argument], specialized: dict[str, Any], shapes: list[list[list[int]]], error: float
) -> str:
    """What the function is and how it was checked (and, if so, the values it is specialized to)."""
    tensors = [a for a in arguments if a.is_tensor]
    dtypes = ", ".join(sorted({str(a.value.dtype).removeprefix("torch.") for a in tensors}))
    checks = " and ".join(
        ", ".join(f"{a.name}={'×'.join(map(str, s)) or 'scalar'}" for a, s in zip(tensors, check)) for check in shapes
    )
    text = (
        f"ONNX translation of {name.qualified_name()} for {dtypes} inputs, generated by onnxlens from its "
        f"Python implementation and checked against PyTorch in onnxruntime on inputs of shape {checks} "
        f"(max abs error {error:.3g})."
    )
    if specialized:
        values = ", ".join(f"{k}={v!r}" for k, v in specialized.items())
        text += f" Specialized to this call's {values}: other values of {', '.join(specialized)} are not computed."
    return textwrap.fill(text, 96, subsequent_indent="    ") + "\n    "


def _render(function: ir.Function, arguments: list[Argument], doc: str | None = None) -> tuple[list[str], str]:
    """onnxscript source of `function`, its parameters the schema's arguments in order: (imports, code)."""
    proto = ir.serde.serialize_function(function)
    tree = ast.parse(onnxscript.proto2python(proto, inline_const=True))
    definition = next(s for s in tree.body if isinstance(s, ast.FunctionDef))
    definition.args = ast.arguments(
        posonlyargs=[],
        args=[ast.arg(a.name, None if a.is_tensor else ast.Name(_ANNOTATIONS[a.type])) for a in arguments],
        kwonlyargs=[],
        kw_defaults=[],
        defaults=[],
    )
    if doc:
        definition.body.insert(0, ast.Expr(ast.Constant(doc)))
    statements = [s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
    used = {n.id for s in statements for n in ast.walk(s) if isinstance(n, ast.Name)}
    imports = []
    for statement in tree.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            statement.names = [a for a in statement.names if (a.asname or a.name) in used]
            if statement.names:
                imports.append(ast.unparse(statement))
    return imports, "\n\n\n".join(ast.unparse(ast.fix_missing_locations(s)) for s in statements) + "\n"


def _load(imports: list[str], code: str, name: str) -> Any:
    """Import the generated source (onnxscript reads a function's source and module)."""
    module_name = f"onnxlens_generated_{name}"
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / f"{module_name}.py"
        path.write_text("\n".join(imports) + "\n\n\n" + code)
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = sys.modules[module_name] = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            raise NotGenerated(f"the generated source is not valid onnxscript: {_first_line(e)}") from e
        finally:
            del sys.modules[module_name]
    return getattr(module, name)


def _verify(
    node: torch.fx.Node, function: Any, arguments: list[Argument], name: OpName, opset_version: int, export: Export
) -> tuple[list[list[list[int]]], float]:
    """Export the operator translated by `function` and compare it with PyTorch in onnxruntime, at the
    call's shapes and larger ones (if the operator takes them). Returns the shapes and max abs error."""
    registry = OnnxRegistry(opset_version)
    registry.register_op(function, name.namespace, name.op_name, name.overload)
    tensors = [a for a in arguments if a.is_tensor]
    module = _Call(node.target, arguments, tensors)
    first = tuple(a.value for a in tensors)
    options = ExportOptions(dynamic_shapes=True, opset_version=opset_version, onnx_registry=registry)
    try:
        output = export(module, first, options)
        session = _session(output)
    except Exception as e:
        raise NotGenerated(f"the generated function does not export: {_first_line(e)}") from e
    larger = _larger(first)
    checked, worst = [], 0.0
    for inputs in [first] + ([larger] if larger else []):
        try:
            expected = module(*inputs)
        except Exception as e:
            if inputs is first:
                raise NotGenerated(f"PyTorch fails on inputs like the call's: {_first_line(e)}") from e
            continue  # the operator does not take larger shapes
        feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), output.adapt_torch_inputs_to_onnx(*inputs))}
        try:
            actual = session.run(None, feeds)
        except Exception as e:
            raise NotGenerated(f"the generated function fails in onnxruntime: {_first_line(e)}") from e
        worst = max(worst, _max_abs_error(actual, list(output.adapt_torch_outputs_to_onnx(expected))))
        checked.append([list(x.shape) for x in inputs])
    return checked, worst


def _session(output: ExportOutput) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(output.model_proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _larger(tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...] | None:
    """Inputs with every dimension above 1 grown by one (None if none is)."""
    if not any(d > 1 for t in tensors for d in t.shape):
        return None
    return tuple(random_like(torch.empty([d + 1 if d > 1 else d for d in t.shape], dtype=t.dtype)) for t in tensors)


def _max_abs_error(actual: list[np.ndarray], expected: list[torch.Tensor]) -> float:
    """The largest difference; raises `NotGenerated` on a mismatch beyond op-level debug's tolerances."""
    if len(actual) != len(expected):
        raise NotGenerated(f"the generated function returns {len(actual)} outputs, PyTorch {len(expected)}")
    worst = 0.0
    for a, e in zip(actual, expected):
        atol, rtol = TOLERANCES.get(e.dtype, (0.0, 0.0))
        e = e.detach().numpy()
        if a.dtype != e.dtype or a.shape != e.shape:
            raise NotGenerated(
                f"the generated function gives {a.dtype} {list(a.shape)} where PyTorch gives {e.dtype} {list(e.shape)}"
            )
        a, e = a.astype(np.float64), e.astype(np.float64)  # (bool and integer outputs too: exact with tolerances 0)
        error = float(np.nanmax(np.abs(a - e), initial=0.0))
        if not np.allclose(a, e, atol=atol, rtol=rtol, equal_nan=True):
            raise NotGenerated(
                f"the generated function differs from PyTorch (max abs error {error:.3g}, atol {atol:g}, rtol {rtol:g})"
            )
        worst = max(worst, error)
    return worst


def _random_tensor_like(value: torch.Tensor) -> torch.Tensor:
    return random_like(torch.empty([optimization_hint(d, fallback=2) for d in value.shape], dtype=value.dtype))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
