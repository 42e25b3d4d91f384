"""Translate an exported FX graph to an ONNX IR model, node by node, through the registry."""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from typing import Any

import onnx_ir as ir
import onnxscript
import torch
from onnx_ir.tensor_adapters import TorchTensor, from_torch_dtype
from torch.export import graph_signature as gs

from exporter.capture.dynamic import readable
from exporter.constants import METADATA_FX_NODE, METADATA_MODULE_STACK, METADATA_STACK, PRODUCER_NAME, ir_version
from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.output.external_data import WEIGHT_META, WEIGHT_NAMES_META
from exporter.translate import dispatch
from exporter.translate.recorder import OpRecorder, SymbolicValue
from exporter.translate.registry import OnnxRegistry

# Nodes that only assert facts about shapes at trace time; they compute nothing.
_ASSERTIONS = {
    torch.ops.aten._assert_scalar.default,
    torch.ops.aten._assert_tensor_metadata.default,
    torch.ops.aten.sym_constrain_range_for_size.default,
    torch.ops.aten.sym_constrain_range.default,
    torch.ops.aten._assert_async.msg,
    torch.ops.aten._linalg_check_errors.default,  # a singular matrix raises in PyTorch: inf/NaN in ONNX
}

# Targets the translator handles itself rather than through the registry.
STRUCTURAL_TARGETS = _ASSERTIONS | {torch.ops.higher_order.cond}

# The nn_module_stack entry torch.export gives the nodes its own passes add (e.g. the sizes its runtime
# assertions read): in no module (torch._export.passes._node_metadata_hook).
_NO_MODULE = "_empty_nn_module_stack_from_metadata_hook"

NodeHook = Callable[[torch.fx.Node, list[ir.Node]], None]


def torch_dtype_to_onnx(dtype: torch.dtype) -> ir.DataType:
    # Complex tensors travel in their real representation (a trailing dimension of 2).
    if dtype == torch.complex64:
        return ir.DataType.FLOAT
    if dtype == torch.complex128:
        return ir.DataType.DOUBLE
    return from_torch_dtype(dtype)


def value_name(node: torch.fx.Node) -> str:
    """The name of the ONNX value that holds `node`'s tensor: the node's own, or ``<node>_<i>`` for output i of
    a node with several, which the FX graph reads through ``getitem``."""
    if node.target is operator.getitem:
        parent, index = node.args
        return f"{parent.name}_{index}"
    return node.name


def _is_const(d: Any) -> bool:
    """A static dim. (No int() on SymInts: that would add a guard and specialize the symbol.)"""
    return isinstance(d, int) or bool(d.node.expr.is_number)


def value_info(val: Any, dim_names: dict[str, str] | None = None) -> tuple[ir.TypeProtocol | None, ir.Shape | None]:
    """ONNX type and shape of an FX `meta["val"]`; symbolic dims are named by `dim_names` (symbol →
    name; an expression is spelled with the names of its symbols, e.g. ``2*seq``)."""
    names = dim_names or {}
    if isinstance(val, torch.Tensor):
        dims = [int(d) if _is_const(d) else ir.SymbolicDim(names.get(str(d)) or readable(d, names)) for d in val.shape]
        if val.is_complex():
            dims.append(2)
        return ir.TensorType(torch_dtype_to_onnx(val.dtype)), ir.Shape(dims)
    if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
        return ir.TensorType(ir.DataType.INT64), ir.Shape([])
    if isinstance(val, (torch.SymFloat, float)):
        return ir.TensorType(ir.DataType.FLOAT), ir.Shape([])
    if isinstance(val, (torch.SymBool, bool)):
        return ir.TensorType(ir.DataType.BOOL), ir.Shape([])
    return None, None


def _set_info(value: ir.Value, val: Any, dim_names: dict[str, str] | None = None) -> None:
    type_, shape = value_info(val, dim_names)
    if type_ is not None:
        value.type = type_
        value.shape = shape


class GraphTranslator:
    """Translates an FX graph (and its nested graphs, for torch.cond) to ONNX IR."""

    def __init__(
        self, registry: OnnxRegistry, ctx: DiagnosticContext, opset_version: int, on_node: NodeHook | None = None
    ) -> None:
        self.registry = registry
        self.ctx = ctx
        # The requested opset (`ExportOptions.target_opset`): torchlib's functions are recorded node by node
        # in it, and the user's registered functions, written for it, inline into the model.
        self.opset = onnxscript.values.Opset("", opset_version)
        self.recorder = OpRecorder(self.opset)
        self.on_node = on_node
        self.translated_nodes = 0
        self.dim_names: dict[str, str] = {}
        # What each top-level FX node became (used by op-level debug).
        self.values: dict[torch.fx.Node, Any] = {}
        self.onnx_nodes: dict[torch.fx.Node, list[ir.Node]] = {}
        self.custom_nodes: list[torch.fx.Node] = []  # translated by a function the user registered

    # -- top level ------------------------------------------------------------------------

    def translate_program(self, program: torch.export.ExportedProgram, *, dim_names: dict[str, str]) -> ir.Model:
        """The ONNX model of `program`: user inputs become graph inputs, weights initializers."""
        self.dim_names = dim_names
        graph = ir.Graph([], [], nodes=[], opset_imports={"": self.opset.version}, name="main_graph")
        env = self.values
        specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs if hasattr(spec.arg, "name")}
        weights = {**program.state_dict, **program.constants}
        weight_inputs: list[ir.Value] = []
        for node in program.graph.nodes:
            if node.op != "placeholder":
                continue
            spec = specs.get(node.name)
            val = node.meta.get("val")
            if spec is not None and spec.kind != gs.InputKind.USER_INPUT:
                value = ir.Value(name=spec.target)
                _set_info(value, val, self.dim_names)
                tensor = weights.get(spec.target)
                if tensor is None or _is_fake(tensor):
                    # No data (fake mode): the weight is a graph input until saved with a state dict.
                    value.meta[WEIGHT_META] = True
                    weight_inputs.append(value)
                else:
                    value.const_value = _weight_tensor(tensor, spec.target)
                    graph.register_initializer(value)
                env[node] = value
            elif isinstance(val, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)):
                value = SymbolicValue(self.opset, name=node.name)
                _set_info(value, val, self.dim_names)
                graph.inputs.append(value)
                env[node] = value
            else:
                env[node] = val  # a Python constant baked into the graph
        graph.inputs.extend(weight_inputs)
        user_outputs = [
            i for i, spec in enumerate(program.graph_signature.output_specs) if spec.kind == gs.OutputKind.USER_OUTPUT
        ]
        outputs = self._translate_nodes(program.graph_module, env, graph)
        for i in user_outputs:
            if isinstance(outputs[i], ir.Value):  # Python constants in the outputs are not graph outputs
                graph.outputs.append(self._as_output(outputs[i], graph))
        if self.ctx.wants(Level.NONE):
            self.ctx.report(
                rules.FX_GRAPH_TO_ONNX,
                Level.NONE,
                f"Translated FX graph with {self.translated_nodes} call_function nodes to {len(graph)} ONNX nodes.",
                fxNodes=self.translated_nodes,
                onnxNodes=len(graph),
                fxGraph=program.graph_module.print_readable(
                    print_output=False, include_stride=False, include_device=False
                ),
            )
        model = ir.Model(graph, ir_version=ir_version(self.opset.version), producer_name=PRODUCER_NAME)
        model.meta[WEIGHT_NAMES_META] = sorted(weights)
        for function in self.recorder.functions.values():
            model.functions[function.identifier()] = function
            graph.opset_imports.setdefault(function.domain, 1)
        for domain, version in self._used_opsets(graph).items():
            graph.opset_imports.setdefault(domain, version)
        return model

    # -- graphs and nodes ------------------------------------------------------------------

    def _translate_nodes(
        self, module: torch.fx.GraphModule, env: dict[torch.fx.Node, Any], graph: ir.Graph
    ) -> list[Any]:
        for node in module.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                return [self._lookup(a, env) for a in node.args[0]]
            if node.op == "get_attr":
                env[node] = getattr(module, node.target)
                continue
            if node.op != "call_function":
                raise dispatch.UnsupportedOperatorError(node, f"Unsupported FX node kind {node.op!r}")
            if node.target in _ASSERTIONS:
                continue
            start = len(self.recorder.nodes)
            env[node] = self._translate_call(node, env)
            new_nodes = self.recorder.nodes[start:]
            self.recorder.nodes[start:] = []
            self._annotate(node, env[node], new_nodes)
            graph.extend(new_nodes)
            self.onnx_nodes[node] = new_nodes
            if self.on_node is not None:
                self.on_node(node, new_nodes)
        raise AssertionError("FX graph has no output node")

    def _translate_call(self, node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> Any:
        if node.target is operator.getitem:
            source, index = node.args
            container = self._lookup(source, env)
            if isinstance(container, (list, tuple)):
                return container[index]
        if node.target is torch.ops.higher_order.cond:
            return self._translate_cond(node, env)
        self.translated_nodes += 1
        candidates = dispatch.find_functions(node, self.registry, self.ctx)
        args = [self._convert_arg(a, env) for a in node.args]
        kwargs = {k: self._convert_arg(v, env) for k, v in _with_schema_defaults(node).items()}
        function = dispatch.select_function(node, candidates, args, kwargs, self.ctx)
        if function.is_custom:
            self.custom_nodes.append(node)
        args, kwargs = _none_means_default(function.onnx_function, args, kwargs)
        try:
            return self.recorder.call(function.onnx_function, args, kwargs)
        except Exception as e:
            raise TranslationError(node, function.name, e) from e

    def _translate_cond(self, node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> Any:
        """torch.cond → ONNX If; each branch graph reads the operands from the outer scope."""
        pred, true_fn, false_fn, operands = node.args
        branches = []
        for branch in (true_fn, false_fn):
            module = self._lookup(branch, env)
            sub_env = dict(
                zip([n for n in module.graph.nodes if n.op == "placeholder"], [self._lookup(o, env) for o in operands])
            )
            subgraph = ir.Graph([], [], nodes=[], name=f"{node.name}_{branch.name}")
            outputs = self._translate_nodes(module, sub_env, subgraph)
            subgraph.outputs.extend(self._as_output(o, subgraph) for o in outputs)
            branches.append(subgraph)
        self.translated_nodes += 1
        with self.recorder.recording():
            results = self.opset.If(
                self._lookup(pred, env),
                then_branch=branches[0],
                else_branch=branches[1],
                _outputs=len(branches[0].outputs),
            )
        return results if isinstance(results, (list, tuple)) else [results]

    def _as_output(self, value: Any, graph: ir.Graph) -> ir.Value:
        """A graph output: values not produced inside `graph` go through an Identity."""
        if not isinstance(value, ir.Value):
            raise TypeError(f"graph output {value!r} is not a tensor")
        if value.producer() is not None and value.producer().graph is graph and not value.is_graph_output():
            return value
        node = ir.Node("", "Identity", [value], num_outputs=1)
        node.outputs[0].type = value.type
        node.outputs[0].shape = value.shape
        graph.append(node)
        return node.outputs[0]

    def _annotate(self, node: torch.fx.Node, result: Any, new_nodes: list[ir.Node]) -> None:
        """Name the node's outputs after it, set their types and link ONNX nodes to the FX node."""
        values = result if isinstance(result, (list, tuple)) else [result]
        vals = node.meta.get("val")
        vals = vals if isinstance(vals, (list, tuple)) else [vals]
        for i, (value, val) in enumerate(zip(values, vals)):
            if isinstance(value, ir.Value) and value.producer() in new_nodes:
                value.name = node.name if len(values) == 1 else f"{node.name}_{i}"
                _set_info(value, val, self.dim_names)
        stack = node.meta.get("stack_trace")
        module_stack = node.meta.get("nn_module_stack")
        for onnx_node in new_nodes:
            onnx_node.metadata_props[METADATA_FX_NODE] = f"{node.name}: {node.target}"
            if stack:
                onnx_node.metadata_props[METADATA_STACK] = stack
            if module_stack:
                onnx_node.metadata_props[METADATA_MODULE_STACK] = json.dumps(
                    [
                        [key, path, cls if isinstance(cls, str) else cls.__qualname__]
                        for key, (path, cls) in module_stack.items()
                        if key != _NO_MODULE  # torch's placeholder for nodes its own passes add
                    ]
                )
        if self.ctx.wants(Level.NONE):
            self.ctx.report(
                rules.FX_NODE_TO_ONNX,
                Level.NONE,
                f"FX node {node.name} ({node.target}) → {len(new_nodes)} ONNX nodes.",
                node=node,
                onnxOpTypes=sorted({n.op_type for n in new_nodes}),
            )

    # -- arguments ------------------------------------------------------------------------

    def _lookup(self, arg: Any, env: dict[torch.fx.Node, Any]) -> Any:
        if isinstance(arg, torch.fx.Node):
            return env[arg]
        if isinstance(arg, (list, tuple)):
            return type(arg)(self._lookup(a, env) for a in arg)
        return arg

    def _convert_arg(self, arg: Any, env: dict[torch.fx.Node, Any]) -> Any:
        if isinstance(arg, torch.fx.Node):
            return env[arg]
        if isinstance(arg, (list, tuple)):
            return [self._convert_arg(a, env) for a in arg]
        if isinstance(arg, torch.dtype):
            return int(torch_dtype_to_onnx(arg))
        if isinstance(arg, (torch.device, torch.memory_format, torch.layout)):
            return str(arg)
        return arg

    @staticmethod
    def _used_opsets(graph: ir.Graph) -> dict[str, int]:
        used: dict[str, int] = {}
        for node in ir.traversal.RecursiveGraphIterator(graph):
            if node.domain and node.domain not in used:
                used[node.domain] = node.version or 1
        return used


class TranslationError(RuntimeError):
    """An ONNX function raised while translating an FX node."""

    def __init__(self, node: torch.fx.Node, function_name: str, cause: BaseException) -> None:
        super().__init__(f"{function_name} failed to translate {node.name} ({node.target}): {cause}")
        self.node = node
        self.function_name = function_name


def _with_schema_defaults(node: torch.fx.Node) -> dict[str, Any]:
    """The node's kwargs plus the ATen schema defaults of arguments it leaves out.

    torchlib functions do not always repeat ATen's defaults (``amax(x)`` means ``dim=[]``).
    """
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return dict(node.kwargs)
    kwargs = dict(node.kwargs)
    for arg in schema.arguments[len(node.args) :]:
        if arg.name not in kwargs and arg.has_default_value() and not arg.kwarg_only:
            kwargs[arg.name] = arg.default_value
    return kwargs


def _none_means_default(function: Any, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Map ATen's "None = use the default" onto the ONNX function's own defaults.

    An optional ATen argument that is None (given, or filled in from the ATen schema) means "the
    default"; torchlib spells many defaults differently (``dtype: int = -1``, ``layout: str = ""``)
    and its traced bodies test for that value, not for None. So a None attribute takes the
    function's default, and is left out where the function has none, or no such parameter (an
    argument newer than torchlib's function, like ``stft``'s ``align_to_window``).
    """
    signature = getattr(function, "op_signature", None)
    if signature is None:
        return args, kwargs
    args, kwargs = list(args), dict(kwargs)
    for i, param in enumerate(signature.params):
        if not param.is_attribute():
            if getattr(param, "variadic", False):
                break  # positions after a variadic input no longer line up
            continue
        default = param.default.value if isinstance(param.default, ir.Attr) else param.default
        if i < len(args):
            if args[i] is None and param.has_default():
                args[i] = default
        elif param.name in kwargs and kwargs[param.name] is None:
            if param.has_default():
                kwargs[param.name] = default
            else:
                del kwargs[param.name]
    names = {param.name for param in signature.params}
    return args, {name: value for name, value in kwargs.items() if name in names or value is not None}


def _is_fake(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, torch._subclasses.fake_tensor.FakeTensor) or tensor.device.type == "meta"


def _weight_tensor(tensor: torch.Tensor, name: str) -> ir.TensorProtocol:
    tensor = tensor.detach()
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    return TorchTensor(tensor, name=name)
