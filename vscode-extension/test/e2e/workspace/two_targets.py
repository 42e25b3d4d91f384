"""Two small targets in one file (e2e: Export All Targets in File)."""

import torch

import exporter


@exporter.export_target
def linear():
    return torch.nn.Linear(4, 2), (torch.randn(3, 4),)


@exporter.export_target
def relu_stack():
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1)), (torch.randn(2, 4),)
