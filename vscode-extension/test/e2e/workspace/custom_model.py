"""A model calling a custom op (no ONNX translation) from a helper function (e2e: FXE0011 + quick fix).

The e2e test finds lines by their MARK comments.
"""

import torch

import exporter
from custom_ops import scaled_tanh


def squash(x):
    return scaled_tanh(x, 2.0)  # MARK: custom-op-call


class UsesCustomOp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return squash(self.linear(x)) + 1  # MARK: forward-call


@exporter.export_target
def custom_op():
    return UsesCustomOp(), (torch.randn(2, 4),)
