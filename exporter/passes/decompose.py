"""Decomposition of the operators the registry cannot translate, node by node.

torch.export's `run_decompositions` re-traces the whole program (and functionalizes it) as soon as
one operator needs decomposing: most of an export's time for one ``hardshrink`` or ``x.add_(y)``.
Here only the nodes that need it change (common composites such as ``batch_norm`` and ``x.to(dtype)``
need none: `exporter.translate.ops.composites` translates them):

- an in-place op on a tensor nothing else aliases becomes its functional op (``add_`` → ``add``),
  and the later uses of the tensor read the new value; one on a slice of such a tensor
  (``mask[a:b] = v``) is scattered back into it (``slice_scatter``);
- every other untranslatable node is replaced by its decomposition, traced on the node's own fake
  inputs (symbolic shapes included) and spliced into the graph, each new node keeping the original's
  ``stack_trace`` and ``nn_module_stack`` so diagnostics still point at the user's line, and the
  original operator as ``original_aten`` so they name what the user called. Nodes with
  the same operator and arguments (input dtypes, shapes and strides, the same constants) share one
  trace.

A program whose mutations cannot be rewritten locally (in-place ops on inputs, buffers or other views),
that decomposes ops on complex tensors (whose real representation the spliced shape arithmetic
would not know), with a node whose decomposition cannot be traced on its own inputs, or with a region
that turns autocast on or a ``torch.vmap`` (which only a re-trace lowers), still goes through
`run_decompositions` as a whole.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from exporter.translate.fx_to_onnx import STRUCTURAL_TARGETS
from exporter.translate.opname import OpName
from exporter.translate.registry import OnnxRegistry

_KEPT_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "from_node")


def onnx_friendly_decomposition_table(
    registry: OnnxRegistry, unsupported: set[torch._ops.OperatorBase] = frozenset()
) -> dict[torch._ops.OperatorBase, Callable]:
    """PyTorch's decompositions, minus those of operators the registry translates directly
    (except the `unsupported` ones, e.g. ops called on complex tensors that only have real functions)."""
    supported = registry.supported_targets() - unsupported
    return {op: fn for op, fn in _all_decompositions().items() if op not in supported}


@functools.cache
def _all_decompositions() -> dict[torch._ops.OperatorBase, Callable]:
    """torch.export's default decompositions, then the rest of PyTorch's (collected once: ~0.3 s)."""
    table: dict[torch._ops.OperatorBase, Callable] = {}
    for op, fn in itertools.chain(
        torch.export.default_decompositions().items(),
        torch._decomp.decomposition_table.items(),
    ):
        if op not in table and hasattr(op, "_schema"):
            table[op] = fn
    return table


def untranslatable_targets(program: torch.export.ExportedProgram, registry: OnnxRegistry) -> set[torch._ops.OpOverload]:
    """Operators in the graph the registry cannot translate as called (or that mutate inputs)."""
    return {node.target for node in _untranslatable_nodes(program, registry)}


def decompose(program: torch.export.ExportedProgram, registry: OnnxRegistry) -> torch.export.ExportedProgram:
    """Decompose (and functionalize) what `program` needs, node by node where that is safe.

    Returns `program` itself when every operator already has a direct translation.
    """
    nodes = _untranslatable_nodes(program, registry)
    if _only_a_retrace_lowers(program):
        return program.run_decompositions(onnx_friendly_decomposition_table(registry, {n.target for n in nodes}))
    if not nodes:
        return program
    for node in nodes:  # in graph order: a rewrite makes the next in-place op on the tensor rewritable
        if node.target._schema.is_mutable and _functionalizable(node, registry):
            _functionalize(node)
    nodes = _untranslatable_nodes(program, registry)
    if any(node.target._schema.is_mutable or _has_complex_input(node) for node in nodes):
        return program.run_decompositions(onnx_friendly_decomposition_table(registry, {n.target for n in nodes}))
    table = onnx_friendly_decomposition_table(registry, {n.target for n in nodes}) if nodes else {}
    traces: dict[tuple, torch.fx.GraphModule] = {}
    try:
        for module in _graph_modules(program):
            for node in [
                n for n in module.graph.nodes if n.op == "call_function" and _needs_decomposition(n, registry)
            ]:
                _splice_decomposition(node, table, traces)
            module.graph.eliminate_dead_code()
            module.recompile()
    except Exception:  # a node whose inputs' symbols a trace of its own cannot take (XLNet): the whole program
        for module in _graph_modules(program):  # the splices done so far are complete and kept
            module.recompile()
        return program.run_decompositions(table)
    return program


def _only_a_retrace_lowers(program: torch.export.ExportedProgram) -> bool:
    """Whether `program` has what only torch's re-trace lowers to ATen ops: a region that runs in autocast's lower
    precision (``with torch.autocast("cpu", dtype=torch.float16):``, whose casts it makes nodes; regions that turn
    it off are inlined before, `inline_grad_regions`), or a ``torch.vmap`` (whose batching it applies)."""
    return any(
        node.target is torch.ops.higher_order.wrap_with_autocast
        or getattr(node.target, "__module__", None) == "torch._functorch.predispatch"
        for module in _graph_modules(program)
        for node in module.graph.nodes
    )


def _graph_modules(program: torch.export.ExportedProgram) -> list[torch.fx.GraphModule]:
    """The program's graph and the graphs nested in it (torch.cond branches)."""
    return [m for m in program.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]


def _untranslatable_nodes(program: torch.export.ExportedProgram, registry: OnnxRegistry) -> list[torch.fx.Node]:
    return [
        node
        for module in _graph_modules(program)
        for node in module.graph.nodes
        if node.op == "call_function"
        and isinstance(node.target, torch._ops.OpOverload)
        and _needs_decomposition(node, registry)
    ]


def _needs_decomposition(node: torch.fx.Node, registry: OnnxRegistry) -> bool:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target in STRUCTURAL_TARGETS:
        return False
    if target not in registry.supported_targets() or target._schema.is_mutable:
        return True
    if target in _TORCHLIB_GAPS and _TORCHLIB_GAPS[target](node):
        return True
    return _has_complex_input(node) and not _has_complex_function(target, registry)


def _lstm_with_projections(node: torch.fx.Node) -> bool:
    """An LSTM with ``proj_size``: ONNX's LSTM (torchlib's translation) has no projection. Its hidden
    and cell states then differ in size."""
    hidden, cell = (a.meta.get("val") for a in node.args[1])
    return hidden.shape[-1] != cell.shape[-1]


# Operators torchlib translates, except when called as these predicates say.
_TORCHLIB_GAPS: dict[torch._ops.OpOverload, Callable[[torch.fx.Node], bool]] = {
    torch.ops.aten.lstm.input: _lstm_with_projections
}


# -- in-place ops on private tensors ---------------------------------------------------------------


def _functional_variant(target: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    name = target._schema.name.split("::")[1]
    if not name.endswith("_") or name.endswith("__"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    return getattr(packet, target._overloadname, None) if packet is not None else None


def _functionalizable(node: torch.fx.Node, registry: OnnxRegistry) -> bool:
    """Whether `node` mutates only its first argument, and has a translatable functional variant whose
    result has the mutated tensor's dtype and shape. The mutated tensor is a fresh one, or a chain of
    slices/selects of one (``mask[a:b, c:d] = v``) each used only by the next; no other view of the
    fresh tensor may come before `node` (it would see the mutation)."""
    functional = _functional_variant(node.target)
    if functional is None or functional not in registry.supported_targets():
        return False
    mutated = [a for a in node.target._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    target = node.args[0] if node.args else None
    if (
        len(mutated) != 1
        or mutated[0].name != node.target._schema.arguments[0].name
        or not isinstance(target, torch.fx.Node)
    ):
        return False
    chain = _view_chain(target)
    base = chain[0].args[0] if chain else target
    if base.op != "call_function" or not isinstance(base.target, torch._ops.OpOverload) or _returns_alias(base.target):
        return False
    if any(len(view.users) != 1 for view in chain):
        return False
    head = chain[0] if chain else node
    if any(user is not head and _returns_alias(user.target) and (not chain or user < node) for user in base.users):
        return False
    val = target.meta.get("val")
    return isinstance(val, torch.Tensor) and _same_type(val, _functional_result(node, functional))


# Views whose writes functionalize into a scatter into the viewed tensor (``slice_scatter(base, src, dim, …)``).
_SCATTERS = {
    torch.ops.aten.slice.Tensor: torch.ops.aten.slice_scatter.default,
    torch.ops.aten.select.int: torch.ops.aten.select_scatter.default,
}


def _view_chain(tensor: torch.fx.Node) -> list[torch.fx.Node]:
    """The slices and selects `tensor` is a view through (outermost first; empty if it is none)."""
    chain = []
    while isinstance(tensor, torch.fx.Node) and tensor.target in _SCATTERS:
        chain.insert(0, tensor)
        tensor = tensor.args[0]
    return chain


def _functional_result(node: torch.fx.Node, functional: torch._ops.OpOverload) -> object:
    """What the functional variant returns on the node's fake inputs."""
    args, kwargs = torch.fx.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    try:
        return functional(*args, **kwargs)
    except Exception:  # no fake kernel, or arguments it rejects: not rewritable
        return None


def _same_type(a: torch.Tensor, b: object) -> bool:
    return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape


def _returns_alias(target: object) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is not None and any(r.alias_info is not None for r in schema.returns)


def _functionalize(node: torch.fx.Node) -> None:
    """``y = x.op_(…)`` → ``y = op(x, …)``; uses of ``x`` after the node read ``y``. Where ``x`` is a
    view chain of a fresh tensor, ``y`` is scattered back through it, and uses of that tensor after
    the node read the result."""
    chain = _view_chain(node.args[0])
    mutated = chain[0].args[0] if chain else node.args[0]
    graph = node.graph
    with graph.inserting_before(node):
        replacement = graph.call_function(_functional_variant(node.target), node.args, node.kwargs)
        replacement.meta.update(node.meta)
        replacement.meta["val"] = _functional_result(node, replacement.target)
        updated = replacement
        for view in reversed(chain):
            scatter = _SCATTERS[view.target]
            updated = graph.call_function(scatter, (view.args[0], updated, *view.args[1:]), view.kwargs)
            updated.meta.update({k: v for k, v in node.meta.items() if k in ("stack_trace", "nn_module_stack")})
            updated.meta["val"] = scatter(*torch.fx.map_arg(updated.args, lambda n: n.meta["val"]), **updated.kwargs)
    for user in list(mutated.users):
        if user > node:  # the new nodes come before it
            user.replace_input_with(mutated, updated)
    node.replace_all_uses_with(replacement)
    graph.erase_node(node)


# -- decompositions spliced in place ---------------------------------------------------------------


def _splice_decomposition(
    node: torch.fx.Node, table: dict[torch._ops.OperatorBase, Callable], traces: dict[tuple, torch.fx.GraphModule]
) -> None:
    """Replace `node` by the graph of its decomposition traced on its own fake inputs (or the trace of
    an earlier node with the same signature, from `traces`)."""
    flat_args, spec = torch.utils._pytree.tree_flatten((node.args, node.kwargs))
    is_input = [isinstance(a, torch.fx.Node) for a in flat_args]
    target = node.target
    key = (
        target,
        spec,
        *(_signature(a.meta["val"]) if i else ("constant", type(a), repr(a)) for a, i in zip(flat_args, is_input)),
    )
    traced = traces.get(key)
    if traced is None:

        def call(*inputs):
            values = iter(inputs)
            args, kwargs = torch.utils._pytree.tree_unflatten(
                [next(values) if i else a for a, i in zip(flat_args, is_input)], spec
            )
            return target(*args, **kwargs)

        inputs = [a.meta["val"] for a, i in zip(flat_args, is_input) if i]
        traced = make_fx(call, decomposition_table=table, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*inputs)
        if any(isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable for n in traced.graph.nodes):
            # the decomposition mutates its own temporaries (cosine_similarity's clamp_min_): replayed functionally
            functional = torch.func.functionalize(traced, remove="mutations")
            traced = make_fx(functional, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*inputs)
        traces[key] = traced
    graph = node.graph
    env = dict(
        zip([n for n in traced.graph.nodes if n.op == "placeholder"], [a for a, i in zip(flat_args, is_input) if i])
    )
    with graph.inserting_before(node):
        for sub in traced.graph.nodes:
            if sub.op == "placeholder":
                continue
            if sub.op == "output":
                output = torch.fx.map_arg(sub.args[0], lambda n: env[n])
                break
            if sub.op == "get_attr":
                raise NotImplementedError(f"the decomposition of {target} creates constants")
            new = graph.node_copy(sub, lambda n: env[n])
            new.meta.update({k: node.meta[k] for k in _KEPT_META if k in node.meta})
            new.meta["original_aten"] = node.meta.get("original_aten", target)  # what the user called, for messages
            env[sub] = new
    _replace_results(node, output)
    graph.erase_node(node)


def _replace_results(node: torch.fx.Node, output: object) -> None:
    if isinstance(output, torch.fx.Node):
        node.replace_all_uses_with(output)
        return
    for user in list(node.users):  # multiple results are read through getitem
        assert user.target is operator.getitem, user
        user.replace_all_uses_with(output[user.args[1]])
        user.graph.erase_node(user)


def _signature(value: object) -> tuple:
    """What a decomposition's trace depends on in one input: a tensor's type, shape and strides (as
    expressions when symbolic), any other value itself."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, value.device, tuple(map(str, value.shape)), tuple(map(str, value.stride())))
    return ("value", type(value), str(value))


def _has_complex_input(node: torch.fx.Node) -> bool:
    return any(isinstance(a.meta.get("val"), torch.Tensor) and a.meta["val"].is_complex() for a in node.all_input_nodes)


def _has_complex_function(target: torch._ops.OpOverload, registry: OnnxRegistry) -> bool:
    functions, _ = registry.lookup(OpName.from_target(target))
    return any(f.is_complex for f in functions)
