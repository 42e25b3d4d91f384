"""A model exported in training mode (FXE0027): a forgotten model.eval() is a warning naming the modules, at the
first call; evaluation mode, and batch norms that never keep running statistics, are not."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest
import torch

import exporter


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.drop = torch.nn.Dropout(0.25)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.bn(self.conv(x)).relu()  # MARK: bn
        return self.head(self.drop(h.mean((2, 3))))


class Noisy(torch.nn.Module):
    """Draws random numbers in any mode: not a training-mode behaviour."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn_like(x)


def training_warnings(model: torch.nn.Module, x: torch.Tensor) -> list:
    output = exporter.dynamo_export(model, x)
    return [d for d in output.diagnostic_context.diagnostics if d.rule.id == "FXE0027"]


def test_a_model_left_in_training_mode_is_a_warning_at_its_first_batch_norm():
    torch.manual_seed(0)
    model, x = ConvNet(), torch.randn(2, 3, 8, 8)
    [warning] = training_warnings(model, x)
    assert warning.level.name == "WARNING"
    assert warning.properties["trainingModules"] == ["BatchNorm2d 'bn'", "Dropout 'drop'"]
    assert "BatchNorm2d 'bn', Dropout 'drop' behave as in training" in warning.message
    assert "model.eval()" in warning.message
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# MARK: bn" in text)
    assert (warning.stack[0].path, warning.stack[0].line) == (os.path.realpath(__file__), line)


def test_what_the_warning_says_the_graph_does():
    """The graph normalizes one sample by its own statistics: other outputs than in evaluation (and than the same
    sample in a batch), as the warning says."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
    x = torch.randn(2, 3, 8, 8)
    proto = exporter.dynamo_export(model, x).model_proto
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        evaluated = model.eval()(x).numpy()
    assert np.abs(got - evaluated).max() > 0.1


def test_an_rnn_dropping_out_between_layers_is_named():
    model = torch.nn.LSTM(4, 8, num_layers=2, dropout=0.3, batch_first=True)
    [warning] = training_warnings(model, torch.randn(2, 5, 4))
    assert warning.properties["trainingModules"] == ["LSTM (the model)"]


@pytest.mark.parametrize(
    "make",
    [
        lambda: ConvNet().eval(),
        lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4, track_running_stats=False)),
        lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.LayerNorm([4, 6, 6]), torch.nn.ReLU()),
        lambda: Noisy(),
        lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Dropout(0.0)),
    ],
    ids=["evaluation", "no-running-statistics", "no-batch-norm", "random-noise", "dropout-of-nothing"],
)
def test_models_that_behave_the_same_in_evaluation_are_not_warned(make):
    assert training_warnings(make(), torch.randn(2, 3, 8, 8)) == []
