"""Batch norm in every mode PyTorch has, run in onnxruntime against eager PyTorch.

torch.export keeps ``aten::batch_norm`` whole (translated by `exporter.translate.ops.composites`); a model
that also updates its ``num_batches_tracked`` buffer goes through whole-program decomposition and
reaches ``aten::_native_batch_norm_legit_functional`` (corrected in `exporter.translate.ops.corrections`).
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import assert_matches_eager

import exporter

NORMS = {1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm2d, 3: torch.nn.BatchNorm3d}


def _norm(dims: int, track: bool, affine: bool) -> torch.nn.Module:
    torch.manual_seed(dims)
    norm = NORMS[dims](4, track_running_stats=track, affine=affine)
    with torch.no_grad():
        if track:  # far from the batch's statistics, so normalizing with the wrong ones shows
            norm.running_mean.uniform_(1, 2)
            norm.running_var.uniform_(2, 4)
        if affine:
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-1, 1)
    return norm


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
@pytest.mark.parametrize("track", [True, False], ids=["running", "no-running"])
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_batch_norm_normalizes_as_eager(dims, training, track, affine):
    model = _norm(dims, track, affine).train(training)
    x = torch.randn(3, 4, *[5] * dims) * 2 + 0.5
    export_output = exporter.dynamo_export(copy.deepcopy(model), x)
    assert_matches_eager(export_output, copy.deepcopy(model), (x,))  # a copy: training updates its statistics


class FunctionalTraining(torch.nn.Module):
    """All five results of the functional training batch norm: output, saved mean and inverse
    standard deviation, and the updated running mean and variance."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.register_buffer("running_mean", torch.rand(4) + 1)
        self.register_buffer("running_var", torch.rand(4) + 2)
        self.weight = torch.nn.Parameter(torch.rand(4) + 0.5)
        self.bias = torch.nn.Parameter(torch.rand(4))

    def forward(self, x):
        return torch.ops.aten._native_batch_norm_legit_functional(
            x, self.weight, self.bias, self.running_mean, self.running_var, True, 0.3, 1e-5
        )


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_functional_training_batch_norm_updates_the_running_statistics(dynamic):
    model, x = FunctionalTraining(), torch.randn(3, 4, 5, 6)
    export_output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(dynamic_shapes=dynamic))
    assert_matches_eager(export_output, model, (x,))
    if dynamic:  # the unbiased variance's count comes from the input's shape
        assert_matches_eager(export_output, model, (x,), run_args=(torch.randn(5, 4, 2, 3),))


class TrainingWithStatistics(torch.nn.Module):
    """`F.batch_norm` in training with running statistics and no `num_batches_tracked` update."""

    def __init__(self):
        super().__init__()
        self.register_buffer("running_mean", torch.full((4,), 3.0))
        self.register_buffer("running_var", torch.full((4,), 5.0))

    def forward(self, x):
        return torch.nn.functional.batch_norm(x, self.running_mean, self.running_var, training=True, momentum=0.2)


def test_training_batch_norm_without_a_counter_normalizes_with_the_batch():
    x = torch.randn(6, 4, 3) - 2
    export_output = exporter.dynamo_export(TrainingWithStatistics(), x)
    assert_matches_eager(export_output, TrainingWithStatistics(), (x,))
