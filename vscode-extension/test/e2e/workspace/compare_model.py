"""A small model the e2e suite edits between two exports (Compare with Previous Export)."""

import torch

import exporter


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))  # MARK: activation
        return self.fc2(h)


@exporter.export_target
def net():
    return Net().eval(), (torch.randn(2, 8),)
