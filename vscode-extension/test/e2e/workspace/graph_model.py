"""A model with nested modules (e2e: the graph view; its groups are block, block.fc, block.norm, head)."""

import torch
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
