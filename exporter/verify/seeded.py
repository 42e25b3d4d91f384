"""Values drawn at random (``torch.rand``, ``randn_like``, training-mode dropout, ``bernoulli``, …) and what
depends on them: onnxruntime draws other numbers than PyTorch, so these values cannot be compared.

An op draws when torch tags it ``nondeterministic_seeded``, unless an argument turns the drawing off: ``train``
False (``aten.dropout`` in evaluation is the identity, an LSTM's dropout between layers too), ``p``, ``dropout_p``
or ``dropout`` 0 (``nn.Dropout(0.0)``, ``scaled_dot_product_attention``'s default).
"""

from __future__ import annotations

import torch

from exporter.translate.fx_to_onnx import value_name

# an argument at which it draws nothing (``p``: a dropout's, or a Bernoulli's, probability)
_OFF = {"train": False, "training": False, "p": 0.0, "dropout_p": 0.0, "dropout": 0.0}


def draws(node: torch.fx.Node) -> bool:
    """Whether `node` draws random numbers."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or torch.Tag.nondeterministic_seeded not in target.tags:
        return False
    for index, argument in enumerate(target._schema.arguments):
        if argument.name in _OFF:
            value = (
                node.args[index] if index < len(node.args) else node.kwargs.get(argument.name, argument.default_value)
            )
            if value == _OFF[argument.name]:
                return False
    return True


def random_sources(program: torch.export.ExportedProgram) -> dict[torch.fx.Node, torch.fx.Node]:
    """Each node whose value depends on random numbers → the first node (in graph order) that drew them."""
    sources: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in program.graph.nodes:
        if draws(node):
            sources[node] = node
            continue
        source = next((sources[i] for i in node.all_input_nodes if i in sources), None)
        if source is not None:
            sources[node] = source
    return sources


def random_outputs(program: torch.export.ExportedProgram, names: list[str]) -> dict[int, torch.fx.Node]:
    """Index of each output that depends on random numbers (of the ONNX model whose output values are `names`,
    named after FX nodes: `value_name`) → the node that drew them."""
    sources = {value_name(node): source for node, source in random_sources(program).items()}
    return {i: sources[name] for i, name in enumerate(names) if name in sources}
