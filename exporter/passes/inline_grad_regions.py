"""Inline the grad-mode regions of a program (``with torch.no_grad():`` inside ``forward``).

torch.export keeps such a region as ``wrap_with_set_grad_enabled(enabled, submodule, *operands)``:
a higher-order operator around a graph of its own. An inference graph has no gradients, so the
region's nodes move into the graph that calls it, keeping their source lines.
"""

from __future__ import annotations

import torch

_WRAPPER = torch.ops.higher_order.wrap_with_set_grad_enabled


def inline_grad_regions(program: torch.export.ExportedProgram) -> int:
    """Inline every grad-mode region (nested ones too); returns how many there were."""
    inlined = 0
    for module in [m for m in program.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]:
        count = 0
        while regions := [n for n in module.graph.nodes if n.op == "call_function" and n.target is _WRAPPER]:
            for node in regions:
                _inline(module, node)
            count += len(regions)
        if count:
            module.graph.eliminate_dead_code()
            module.delete_all_unused_submodules()
            module.recompile()
        inlined += count
    return inlined


def _inline(module: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    """Copy the region's body before `node`; its results replace the ``getitem``s of `node`."""
    _, body_node, *operands = node.args
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


def _fresh_name(module: torch.nn.Module, name: str) -> str:
    candidate, i = name, 0
    while hasattr(module, candidate):
        i += 1
        candidate = f"{name}_{i}"
    return candidate
