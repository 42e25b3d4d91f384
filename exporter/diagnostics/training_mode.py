"""A model exported in training mode (FXE0027): its BatchNorms normalize with each batch's own statistics and its
dropouts drop at random, which is what a forgotten ``model.eval()`` exports. The graph is right (it computes what
the model does in training), so it is a warning, once, at the first such call, naming the modules."""

from __future__ import annotations

import torch

from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.verify.seeded import draws

aten = torch.ops.aten
# batch normalizations and the positions of their `training` and `running_mean` arguments
_BATCH_NORMS = {
    aten.batch_norm.default: (5, 3),
    aten.native_batch_norm.default: (5, 3),
    aten._native_batch_norm_legit.default: (5, 3),
    aten._native_batch_norm_legit_functional.default: (5, 3),
    aten._batch_norm_with_update.default: (None, 3),
    aten._batch_norm_with_update_functional.default: (None, 3),
}
_SHOWN = 3  # modules named in the message


def report(ctx: DiagnosticContext, program: torch.export.ExportedProgram, model: object) -> None:
    """FXE0027 when the graph of `model` normalizes with batch statistics where the model keeps running ones (a
    BatchNorm in training mode; not one built with track_running_stats=False) or drops out at random."""
    calls: dict[str, torch.fx.Node] = {}  # module (or the op, outside modules) → its first such node
    for node in program.graph.nodes:
        if _in_training(node):
            stack = node.meta.get("nn_module_stack") or {}
            path, kind = next(reversed(stack.values()), ("", ""))
            name = f"{kind.rsplit('.', 1)[-1]} '{path}'" if path else f"{type(model).__name__} (the model)"
            calls.setdefault(name, node)
    if not calls:
        return
    names = list(calls)
    shown = ", ".join(names[:_SHOWN]) + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
    ctx.report(
        rules.TRAINING_MODE,
        Level.WARNING,
        f"The model is exported in training mode: {shown} "
        f"{'behaves' if len(names) == 1 else 'behave'} as in training (batch normalization with each batch's own "
        "statistics, dropout at random), so the exported graph gives other outputs than the model in evaluation, "
        "and one sample at a time other outputs than in a batch. Call model.eval() before exporting it for "
        "inference.",
        node=next(iter(calls.values())),
        trainingModules=names,
    )


def _in_training(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target in _BATCH_NORMS:
        training, running_mean = _BATCH_NORMS[node.target]
        keeps_stats = len(node.args) > running_mean and node.args[running_mean] is not None
        return keeps_stats and (training is None or bool(node.args[training]))
    arguments = node.target._schema.arguments if isinstance(node.target, torch._ops.OpOverload) else []
    return any(a.name in ("train", "training") for a in arguments) and draws(node)  # dropout, an RNN's between layers
