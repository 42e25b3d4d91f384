"""Imported once by the worker fork server, so every export starts warm.

torch, onnxscript's torchlib and the exporter's default registry are loaded here, with every
torchlib function built (a cold export builds only those it uses, when it uses them), and one tiny
model is exported so that torch.export's lazy initialization is done too (it costs about a second
on the first export of every process). Its hard shrink (no torchlib translation) needs decomposing,
which collects PyTorch's decomposition table and warms `make_fx` (~0.08 s off the first decomposition
of each export, e.g. a transposed convolution's).
Each export is then a fork of this process, which picks up the user's current code and dies with it.
"""

import torch

import exporter
import exporter.diagnostics.sarif  # noqa: F401  (every job writes SARIF; exporter imports it only then)
from exporter.translate import torchlib_lazy
from exporter.translate.registry import default_registry

default_registry().supported_targets()  # builds torchlib's table and its operator lookup
torchlib_lazy.build_all()  # compiled once here rather than in every forked export
exporter.dynamo_export(
    torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Hardshrink(), torch.nn.ReLU()), torch.zeros(1, 2)
)
