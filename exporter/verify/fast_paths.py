"""PyTorch's inference fast paths, which torch.export does not capture.

In inference (no grad, eval mode) nn.MultiheadAttention and nn.TransformerEncoder(Layer) run fused kernels
and, for an encoder built with ``enable_nested_tensor=True`` (the default) given a ``src_key_padding_mask``,
nested tensors, which leave 0 at the padded positions. Under capture their tensors have torch functions, so
the regular path is what the graph computes. References for checks are computed on that path
(`regular_paths`); where the encoder's nested tensors change what eager PyTorch gives, verification says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


@contextlib.contextmanager
def regular_paths() -> Iterator[None]:
    """Eager PyTorch with the fast paths off (``torch.backends.mha``), as the exported graph computes."""
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)


def nested_tensor_encoders(model: Any) -> list[str]:
    """The names of the model's nn.TransformerEncoder modules that run on nested tensors in inference."""
    if not isinstance(model, torch.nn.Module):
        return []
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.TransformerEncoder) and getattr(module, "use_nested_tensor", False)
    ]


def module_node(program: torch.export.ExportedProgram, name: str) -> torch.fx.Node | None:
    """The first node the module `name` ("" the model itself) computes in the captured graph."""
    for node in program.graph.nodes:
        paths = [path for path, _ in (node.meta.get("nn_module_stack") or {}).values()]
        if name == "" and paths or name in paths:
            return node
    return None
