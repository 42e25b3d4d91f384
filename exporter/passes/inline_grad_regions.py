"""Inline the grad-mode regions of a program (``with torch.no_grad():`` inside ``forward``), and the
regions that turn autocast off (``with torch.autocast("cuda", enabled=False):``, EfficientViT's
attention kept in float32).

torch.export keeps such a region as ``wrap_with_set_grad_enabled(enabled, submodule, *operands)`` or
``wrap_with_autocast(device, dtype, enabled, cache_enabled, submodule, *operands)``: a higher-order
operator around a graph of its own. An inference graph has no gradients, and it is captured without
autocast, so the region's nodes move into the graph that calls it, keeping their source lines. A
region that turns autocast on (lower precision than the captured graph) is left to `decompose`, whose
re-trace of the program applies autocast: its casts to the lower precision become nodes of the graph.
"""

from __future__ import annotations

import torch

_GRAD_MODE = torch.ops.higher_order.wrap_with_set_grad_enabled
_AUTOCAST = torch.ops.higher_order.wrap_with_autocast


def inline_grad_regions(program: torch.export.ExportedProgram) -> int:
    """Inline every grad-mode region and autocast-off region (nested ones too); returns how many
    there were."""
    inlined = 0
    for module in [m for m in program.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]:
        count = 0
        while regions := [n for n in module.graph.nodes if n.op == "call_function" and _body_and_operands(n)]:
            for node in regions:
                _inline(module, node)
            count += len(regions)
        for node in [n for n in module.graph.nodes if n.target is _AUTOCAST and not n.meta.get("stack_trace")]:
            _locate(module, node)  # a region left alone is reported at its body's line
        if count:
            module.graph.eliminate_dead_code()
            module.delete_all_unused_submodules()
            module.recompile()
        inlined += count
    return inlined


def _body_and_operands(node: torch.fx.Node) -> tuple[torch.fx.Node, tuple] | None:
    """The body and operands of a region to inline (None for any other node)."""
    if node.target is _GRAD_MODE:
        return node.args[1], node.args[2:]
    if node.target is _AUTOCAST and not node.args[2]:  # enabled=False
        return node.args[4], node.args[5:]
    return None


def _inline(module: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    """Copy the region's body before `node`; its results replace the ``getitem``s of `node`."""
    body_node, operands = _body_and_operands(node)
    body: torch.fx.GraphModule = getattr(module, body_node.target)
    placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
    env: dict[torch.fx.Node, torch.fx.Node] = dict(zip(placeholders, operands))
    graph = module.graph
    with graph.inserting_before(node):
        for sub in body.graph.nodes:
            if sub.op == "placeholder":
                continue
            if sub.op == "output":
                results = sub.args[0]
                break
            new = graph.node_copy(sub, lambda n: env[n])
            if sub.op == "get_attr":  # a nested region's body: moved to this module under a fresh name
                new.target = _fresh_name(module, sub.target)
                setattr(module, new.target, getattr(body, sub.target))
            env[sub] = new
    for user in list(node.users):
        user.replace_all_uses_with(env[results[user.args[1]]])
        graph.erase_node(user)
    graph.erase_node(node)


def _locate(module: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    """Give a region node the source line of its body's first located node (torch.export gives it none)."""
    body: torch.fx.GraphModule = getattr(module, node.args[4].target)
    stacks = (n.meta.get("stack_trace") for n in body.graph.nodes if n.op == "call_function")
    node.meta["stack_trace"] = next((s for s in stacks if s), None)


def _fresh_name(module: torch.nn.Module, name: str) -> str:
    candidate, i = name, 0
    while hasattr(module, candidate):
        i += 1
        candidate = f"{name}_{i}"
    return candidate
