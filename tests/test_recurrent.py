"""``nn.LSTM`` and ``nn.GRU`` over plain sequences with dynamic shapes (`exporter.capture.recurrent`): the
sequence length stays symbolic (PyTorch's own size computation unrolls the time steps and fixed it), and the
graph matches eager PyTorch in onnxruntime at the example's sizes and at others."""

from __future__ import annotations

import pytest
import torch
from helpers import assert_matches_eager

import exporter


class WithStates(torch.nn.Module):
    """An RNN called with initial states, its outputs and final states returned."""

    def __init__(self, rnn: torch.nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x, h0, c0):
        return self.rnn(x, (h0, c0) if isinstance(self.rnn, torch.nn.LSTM) else h0)


def _dims(export_output) -> list[list]:
    return [
        [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
        for i in export_output.model_proto.graph.input
    ]


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
@pytest.mark.parametrize(
    "batch_first, shape, other",
    [
        (True, (1, 7, 8), (3, 11, 8)),  # one sequence, as an example often is
        (False, (7, 2, 8), (4, 3, 8)),
        (False, (7, 8), (12, 8)),  # unbatched
    ],
    ids=["batch-first-1", "time-first-2", "unbatched"],
)
@pytest.mark.parametrize("layers, bidirectional", [(1, False), (2, True)], ids=["1-layer", "2-layer-bidirectional"])
def test_the_sequence_length_stays_dynamic(cls, batch_first, shape, other, layers, bidirectional):
    torch.manual_seed(0)
    rnn = cls(8, 6, num_layers=layers, batch_first=batch_first, bidirectional=bidirectional, dropout=0.3).eval()
    x = torch.randn(shape)
    export_output = exporter.dynamo_export(rnn, x, export_options=exporter.ExportOptions(dynamic_shapes=True))
    (dims,) = _dims(export_output)
    assert [isinstance(d, str) for d in dims] == [True] * (len(shape) - 1) + [False]  # only the features fixed
    assert_matches_eager(export_output, rnn, (x,), atol=1e-5)
    assert_matches_eager(export_output, rnn, (x,), atol=1e-5, run_args=(torch.randn(other),))


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
def test_initial_states_and_a_second_size(cls):
    torch.manual_seed(0)
    model = WithStates(cls(8, 6, num_layers=2, batch_first=True).eval())

    def example(batch: int, steps: int) -> tuple:
        return torch.randn(batch, steps, 8), torch.randn(2, batch, 6), torch.randn(2, batch, 6)

    args = example(2, 5)
    export_output = exporter.dynamo_export(model, *args, export_options=exporter.ExportOptions(dynamic_shapes=True))
    assert _dims(export_output)[0][:2] == ["x_dim_0", "x_dim_1"]
    assert_matches_eager(export_output, model, args)
    assert_matches_eager(export_output, model, args, run_args=example(3, 9))


def test_what_keeps_pytorchs_own_call_still_exports():
    """A projected LSTM (torchlib's LSTM has no projection) and a training-mode one with dropout between its
    layers (random) keep PyTorch's call, decomposed as before: they export, at the example's sequence length."""
    torch.manual_seed(0)
    x = torch.randn(5, 2, 8)
    projected = torch.nn.LSTM(8, 6, proj_size=3).eval()
    assert_matches_eager(exporter.dynamo_export(projected, x), projected, (x,))
    training = torch.nn.LSTM(8, 6, num_layers=2, dropout=0.5).train()
    export_output = exporter.dynamo_export(training, x, export_options=exporter.ExportOptions(dynamic_shapes=True))
    assert _dims(export_output)[0][0] == 5  # the length fixed by PyTorch's unrolled decomposition, as before
