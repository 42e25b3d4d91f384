"""Models for the language-server tests (the tests look lines up by their MARK comments)."""

import ctypes
import time

import torch
from custom_ops import scaled_tanh

import exporter


def squash(x):
    return scaled_tanh(x, 2.0)  # MARK: custom-op-call


def postprocess(x):
    return squash(x) + 1  # MARK: helper-call


class UsesCustomOp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return postprocess(self.linear(x))  # MARK: forward-call


class MLPModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc0 = torch.nn.Linear(8, 8)
        self.fc1 = torch.nn.Linear(8, 2)

    def forward(self, x):
        h = torch.sigmoid(self.fc0(x))  # MARK: mlp-hidden
        return self.fc1(h)  # MARK: mlp-out


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # MARK: data-dependent-branch
            return x * 2
        return x - 1


class Untargeted(torch.nn.Module):  # MARK: untargeted
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))


@exporter.export_target
def custom_op():
    return UsesCustomOp(), (torch.randn(2, 4),)


@exporter.export_target
def branchy():
    return Branchy(), (torch.randn(3),)


@exporter.export_target
def mlp():
    print("user code printing to stdout")  # must not corrupt the JSON-RPC stream
    return MLPModel(), (torch.randn(3, 8),)


@exporter.export_target
def slow():
    time.sleep(600)
    return MLPModel(), (torch.randn(3, 8),)


@exporter.export_target
def segfault():
    ctypes.string_at(0)  # reads address 0: SIGSEGV
    return MLPModel(), (torch.randn(3, 8),)


@exporter.export_target
def broken():
    return MLPModel()  # MARK: broken-return
