"""Op-level debugging (FXE0013): each translated FX node's ONNX nodes vs the PyTorch op.

The example inputs are run through the FX graph to get every node's **real** input and output
values; each node's ONNX nodes are cut out of the model (with the Constants they use) and run in
onnxruntime on those inputs. Index ops therefore see valid indices. The numbers go into the
results' properties, per node and aggregated per source line (what an editor shows inline).

`check_custom_translations` does the same for the nodes translated by functions the user
registered, on every export: a stub or a wrong custom function cannot pass silently.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx_ir as ir
import torch
from torch.export import graph_signature as gs

from exporter.capture.adapters import FlattenInputStep
from exporter.constants import SOURCE_LINE, Prop, ir_version
from exporter.diagnostics import Level, rules
from exporter.diagnostics.context import io_properties
from exporter.diagnostics.locations import Frame, stack_of
from exporter.verify import numerics, seeded, ties

if TYPE_CHECKING:
    from exporter.diagnostics import DiagnosticContext
    from exporter.translate.fx_to_onnx import GraphTranslator

# (atol, rtol) by dtype of the PyTorch output. float32: a translation off by 1e-3 relative is a bug to
# report; over the 51-model test corpus, correct ops differ by at most 2e-6 (conv2d).
TOLERANCES = {
    torch.float64: (1e-7, 1e-6),
    torch.float32: (1e-5, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
}


@dataclasses.dataclass
class OpCheck:
    """The comparison of one FX node."""

    node: torch.fx.Node
    onnx_op_types: list[str]
    ok: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    atol: float | None = None
    rtol: float | None = None
    skipped: str | None = None

    def problem(self) -> str:
        if self.max_abs_error is None:
            return self.skipped or "not compared"
        return f"ONNX differs from PyTorch, max abs error {self.max_abs_error:.3g} (atol {self.atol:g}, rtol {self.rtol:g})"

    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = {
            "fxNode": self.node.name,
            "fxTarget": str(self.node.target),
            "onnxOpTypes": self.onnx_op_types,
            "ok": self.ok,
            "maxAbsError": self.max_abs_error,
            "maxRelError": self.max_rel_error,
            "atol": self.atol,
            "rtol": self.rtol,
            "skipped": self.skipped,
            **io_properties(self.node),
        }
        return {k: v for k, v in props.items() if v is not None}


def validate_ops(
    program: torch.export.ExportedProgram,
    translator: GraphTranslator,
    model: ir.Model,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    ctx: DiagnosticContext,
    *,
    fake: bool = False,
) -> list[OpCheck]:
    """Compare every node `translator` translated into `model` with PyTorch on the values of
    `program` run on `args`/`kwargs` (random valid values when `fake`), reporting FXE0013 to `ctx`."""
    initializers = {**program.state_dict, **program.constants}
    if fake:
        # No real values under fake mode: random inputs and weights that are valid for index ops
        # (integer inputs in [0, 2), so any index into a dimension of size >= 2 is in range).
        args, kwargs = torch.utils._pytree.tree_map(random_like, (args, kwargs))
        initializers = {name: random_like(t) for name, t in initializers.items()}
        ctx.report(
            rules.OP_LEVEL_DEBUGGING,
            Level.NOTE,
            "Fake mode: op-level debug compared the ops on random inputs and weights (integer inputs in [0, 2)).",
        )
    checks = _check_nodes(program, translator, model, args, kwargs, initializers, translator.onnx_nodes)
    for check in checks:
        if not check.ok:
            ctx.report(
                rules.OP_LEVEL_DEBUGGING,
                Level.WARNING,
                f"{check.node.target} ({check.node.name}) → {'/'.join(check.onnx_op_types)}: {check.problem()}.",
                node=check.node,
                **check.properties(),
            )
    _report_per_line(ctx, checks)
    return checks


def check_custom_translations(
    program: torch.export.ExportedProgram,
    translator: GraphTranslator,
    model: ir.Model,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    ctx: DiagnosticContext,
) -> list[OpCheck]:
    """Compare the nodes translated by user-registered functions with PyTorch on the example inputs;
    a mismatch is an FXE0013 warning at the node's source line."""
    nodes = {node: translator.onnx_nodes[node] for node in translator.custom_nodes}
    if not nodes:
        return []
    try:
        checks = _check_nodes(
            program, translator, model, args, kwargs, {**program.state_dict, **program.constants}, nodes
        )
    except Exception as e:  # e.g. a custom op without a CPU implementation: nothing to compare with
        ctx.report(
            rules.OP_LEVEL_DEBUGGING,
            Level.NOTE,
            f"Custom translations were not checked: the model did not run eagerly ({type(e).__name__}: {e}).",
        )
        return []
    for check in checks:
        if not check.ok:
            ctx.report(
                rules.OP_LEVEL_DEBUGGING,
                Level.WARNING,
                f"The ONNX function you registered for {check.node.target} ({'/'.join(check.onnx_op_types) or 'no ONNX ops'}) "
                f"does not compute what PyTorch does on this export's inputs: {check.problem()}. The exported model is wrong here.",
                node=check.node,
                custom=True,
                **check.properties(),
            )
    return checks


def _check_nodes(program, translator, model, args, kwargs, initializers, nodes) -> list[OpCheck]:
    values = intermediate_values(program, args, kwargs, initializers)
    functions = dict(model.functions)
    return [
        _check_node(node, onnx_nodes, translator, values, initializers, model.graph, functions)
        for node, onnx_nodes in nodes.items()
    ]


def intermediate_values(
    program: torch.export.ExportedProgram, args: tuple, kwargs: dict, weights: dict[str, torch.Tensor]
) -> dict[torch.fx.Node, Any]:
    """Every node's value when the example inputs run through the (decomposed) FX graph."""
    recorder = _Recorder(program.graph_module)
    with torch.no_grad():
        recorder.run(*placeholder_feeds(program, args, kwargs, weights))
    return recorder.values


def placeholder_feeds(
    program: torch.export.ExportedProgram, args: tuple, kwargs: dict, weights: dict[str, torch.Tensor]
) -> list[Any]:
    """The values of the FX graph's placeholders, in order: the flattened inputs and the weights."""
    user_inputs, _ = FlattenInputStep(program.call_spec.in_spec).apply(args, kwargs)
    user_inputs = iter(user_inputs)
    specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs if hasattr(spec.arg, "name")}
    feeds = []
    for node in program.graph.nodes:
        if node.op != "placeholder":
            continue
        spec = specs.get(node.name)
        feeds.append(
            next(user_inputs) if spec is None or spec.kind == gs.InputKind.USER_INPUT else weights[spec.target]
        )
    return feeds


class _Recorder(torch.fx.Interpreter):
    def __init__(self, module: torch.fx.GraphModule) -> None:
        super().__init__(module)
        self.values: dict[torch.fx.Node, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        self.values[n] = result = super().run_node(n)
        return result


def _check_node(node, onnx_nodes, translator, values, initializers, graph, functions) -> OpCheck:
    op_types = [n.op_type for n in onnx_nodes]
    check = OpCheck(node, op_types, ok=True)
    if not onnx_nodes or node.target is operator.getitem:
        check.skipped = "no ONNX nodes of its own"
        return check
    if seeded.draws(node):
        check.skipped = "draws random numbers: onnxruntime's are not PyTorch's"
        return check
    if any(
        attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
        for n in onnx_nodes
        for attr in n.attributes.values()
    ):
        check.skipped = "control flow (subgraphs) is checked through its branches"
        return check
    produced = {v for n in onnx_nodes for v in n.outputs}
    pairs = [
        (i, v, numerics.to_numpy(t))
        for i, (v, t) in enumerate(zip(_flat(translator.values.get(node)), _flat(values.get(node))))
        if i in _used_outputs(node)
        and isinstance(v, ir.Value)
        and v in produced
        and isinstance(t, (torch.Tensor, int, float, bool))
    ]
    if not pairs:
        check.skipped = "outputs could not be matched to PyTorch's"
        return check
    positions, outputs, expected = [i for i, _, _ in pairs], [v for _, v, _ in pairs], [t for _, _, t in pairs]
    sources = _value_sources(translator.values)
    feeds: dict[str, np.ndarray] = {}
    inputs: list[ir.Value] = []
    for value in _external_inputs(onnx_nodes):
        producer = value.producer()
        if producer is not None and producer.op_type == "Constant" and not producer.inputs:
            continue  # extracted along with the node
        if value.name in initializers:
            feeds[value.name] = numerics.to_numpy(initializers[value.name])
        elif value in sources:
            fx_node, index = sources[value]
            feeds[value.name] = numerics.to_numpy(_flat(values[fx_node])[index])
        else:
            check.skipped = f"input {value.name} has no PyTorch value"
            return check
        inputs.append(value)
    try:
        actual = _run(graph, inputs, outputs, feeds, functions)
    except Exception as e:  # a node that cannot run alone is reported, not fatal
        check.ok = False
        check.skipped = f"ONNX nodes failed to run: {type(e).__name__}: {str(e).splitlines()[0]}"
        return check
    if node.target in ties.INDEXED and isinstance(values.get(node.args[0]), torch.Tensor):  # indices among ties
        source, dim = values[node.args[0]], ties.dim_of(node)
        actual = [
            e if i == 1 and ties.same_values(source, dim, torch.from_numpy(e), torch.from_numpy(a)) else a
            for i, a, e in zip(positions, actual, expected)
        ]
    dtype = next((v.dtype for v in _flat(values.get(node)) if isinstance(v, torch.Tensor)), torch.float32)
    check.atol, check.rtol = TOLERANCES.get(dtype, (0.0, 0.0))
    abs_err = rel_err = 0.0
    for a, e in zip(actual, expected):
        if a.shape != e.shape:
            check.ok = False
            check.skipped = f"shape {a.shape} vs PyTorch {e.shape}"
            return check
        a64, e64 = a.astype(np.float64), e.astype(np.float64)
        diff = np.abs(a64 - e64)
        finite = np.isfinite(e64) & np.isfinite(a64)
        if diff.size:
            same_nonfinite = np.array_equal(np.isnan(a64), np.isnan(e64)) and np.array_equal(
                a64[np.isinf(e64)], e64[np.isinf(e64)]
            )
            if not same_nonfinite:
                check.ok = False
            d = diff[finite]
            if d.size:
                abs_err = max(abs_err, float(d.max()))
                rel_err = max(rel_err, float((d / np.maximum(np.abs(e64[finite]), 1e-12)).max()))
                if not np.all(d <= check.atol + check.rtol * np.abs(e64[finite])):
                    check.ok = False
    check.max_abs_error, check.max_rel_error = abs_err, rel_err
    return check


def _run(
    graph: ir.Graph, inputs: list[ir.Value], outputs: list[ir.Value], feeds: dict[str, np.ndarray], functions
) -> list[np.ndarray]:
    import onnxruntime as ort

    sub = ir.convenience.extract(graph, inputs, outputs)
    # Nodes recorded from another opset's function (torchlib's 18) run in that opset, as they were written.
    versions = {n.version for n in ir.traversal.RecursiveGraphIterator(sub) if n.domain == "" and n.version}
    sub.opset_imports[""] = min(versions, default=sub.opset_imports[""])
    model = ir.Model(sub, ir_version=ir_version(sub.opset_imports[""]), functions=list(functions.values()))
    for n in ir.traversal.RecursiveGraphIterator(sub):
        if n.domain:
            sub.opset_imports.setdefault(n.domain, 1)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 3  # the extracted graphs take weights as inputs; ORT warns about it
    session = ort.InferenceSession(
        ir.serde.serialize_model(model).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in names})


def _report_per_line(ctx: DiagnosticContext, checks: list[OpCheck]) -> None:
    """One FXE0013 note per source line: what the line's ops became and their worst error."""
    lines: dict[tuple[str, int] | None, list[tuple[OpCheck, list[Frame]]]] = {}
    for check in checks:
        if check.skipped and check.ok:
            continue
        stack = stack_of(check.node)
        key = (stack[0].path, stack[0].line) if stack and stack[0].is_user_code else None
        lines.setdefault(key, []).append((check, stack))
    for key, entries in lines.items():
        failed = [c for c, _ in entries if not c.ok]
        errors = [c.max_abs_error for c, _ in entries if c.max_abs_error is not None]
        op_types = sorted({t for c, _ in entries for t in c.onnx_op_types})
        worst = max(errors) if errors else 0.0
        message = f"{len(entries)} ops → {', '.join(op_types)}; max abs error {worst:.3g}" + (
            f"; {len(failed)} mismatch{'es' if len(failed) > 1 else ''}" if failed else ""
        )
        ctx.report(
            rules.OP_LEVEL_DEBUGGING,
            Level.NOTE,
            message,
            stack=entries[0][1] if key else [],
            checkedOps=len(entries),
            **{
                Prop.AGGREGATE: SOURCE_LINE,
                Prop.MISMATCHES: len(failed),
                Prop.MAX_ABS_ERROR: worst,
                Prop.ONNX_OP_TYPES: op_types,
                Prop.OPS: [c.properties() for c, _ in entries],
            },
        )


def _used_outputs(node: torch.fx.Node) -> set[int]:
    """Indices of a node's outputs the graph uses (ATen's unused outputs may differ, e.g. batch norm's)."""
    if not isinstance(node.meta.get("val"), (list, tuple)):
        return {0}
    return {user.args[1] for user in node.users if user.target is operator.getitem}


def _external_inputs(nodes: list[ir.Node]) -> Iterator[ir.Value]:
    produced = {v for n in nodes for v in n.outputs}
    seen: set[ir.Value] = set()
    for n in nodes:
        for v in n.inputs:
            if v is not None and v not in produced and v not in seen:
                seen.add(v)
                yield v


def _value_sources(env: dict[torch.fx.Node, Any]) -> dict[ir.Value, tuple[torch.fx.Node, int]]:
    sources = {}
    for fx_node, result in env.items():
        for i, v in enumerate(_flat(result)):
            if isinstance(v, ir.Value):
                sources.setdefault(v, (fx_node, i))
    return sources


def _flat(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def random_like(value: Any) -> Any:
    """A real random tensor with a fake tensor's shape and dtype (other values unchanged)."""
    if not isinstance(value, torch.Tensor):
        return value
    shape = [int(d) for d in value.shape]
    if value.dtype.is_floating_point:
        return torch.randn(shape, dtype=value.dtype) * 0.5
    if value.dtype.is_complex:
        return torch.randn(shape, dtype=value.dtype)
    if value.dtype == torch.bool:
        return torch.rand(shape) > 0.5
    return torch.randint(0, 2, shape, dtype=value.dtype)
