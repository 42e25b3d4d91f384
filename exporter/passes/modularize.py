"""Modularization: each nn.Module call becomes an ONNX local function (the "f" boxes in Netron)."""

from __future__ import annotations

import onnx_ir as ir


def modularize(model: ir.Model) -> None:
    """Placeholder until implemented: leaves the graph flat."""
