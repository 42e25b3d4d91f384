"""A target that takes ten minutes to build (e2e: cancel a running export)."""

import time

import torch

import exporter


@exporter.export_target
def slow():
    time.sleep(600)
    return torch.nn.Linear(4, 2), (torch.randn(1, 4),)
