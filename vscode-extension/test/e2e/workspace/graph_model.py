"""Models for the graph view (e2e): nested modules (groups block, block.fc, block.norm, head), and a custom op
with a wrong ONNX translation, which op-level debug finds (FXE0013)."""

import onnxscript
import torch
from onnxscript import opset18 as op
from torch import nn

import exporter


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        h = self.fc(x)  # MARK: block-fc
        return self.norm(torch.relu(h)) * x  # MARK: block-out


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.block(x))  # MARK: net-head


@exporter.export_target
def net():
    return Net(), (torch.randn(2, 8),)


@torch.library.custom_op("onnxlens_graph::double", mutates_args=())
def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@double.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@onnxscript.script()
def wrong_double(x):
    return op.Mul(x, x)  # a wrong translation: x * x, not x * 2


exporter.default_registry().register_op(wrong_double, "onnxlens_graph", "double")


class Doubles(nn.Module):
    def forward(self, x):
        return double(torch.relu(x)) + 1  # MARK: wrong-double


@exporter.export_target(op_level_debug=True)
def doubles():
    return Doubles(), (torch.rand(2, 8) + 1,)
