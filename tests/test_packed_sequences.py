"""pack_padded_sequence → LSTM/GRU → pad_packed_sequence exports (ONNX's LSTM/GRU with sequence_lens)
and matches eager PyTorch in onnxruntime, for unsorted lengths, static and dynamic batch and time."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.inliner
import onnxruntime as ort
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import exporter


class Packed(torch.nn.Module):
    def __init__(self, rnn: torch.nn.Module, enforce_sorted: bool = False) -> None:
        super().__init__()
        self.rnn, self.enforce_sorted = rnn, enforce_sorted

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=self.enforce_sorted)
        out, state = self.rnn(packed)
        padded, _ = pad_packed_sequence(out, batch_first=True)
        return padded, state[0] if isinstance(state, tuple) else state


RNNS = {
    "lstm": lambda: torch.nn.LSTM(4, 5, batch_first=True),
    "gru": lambda: torch.nn.GRU(4, 5, batch_first=True),
    "lstm-2-layers-bidirectional": lambda: torch.nn.LSTM(4, 5, num_layers=2, bidirectional=True, batch_first=True),
    "gru-bidirectional-no-bias": lambda: torch.nn.GRU(4, 5, bidirectional=True, bias=False, batch_first=True),
}


def run(export_output: exporter.ExportOutput, x: torch.Tensor, lengths: torch.Tensor) -> list[np.ndarray]:
    session = ort.InferenceSession(export_output.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    inputs = export_output.adapt_torch_inputs_to_onnx(x, lengths)
    return session.run(None, {i.name: v.numpy() for i, v in zip(session.get_inputs(), inputs)})


def assert_matches_eager(export_output, model, x, lengths):
    with torch.no_grad():
        expected = [t.numpy() for t in model(x, lengths)]
    actual = run(export_output, x, lengths)
    assert [a.shape for a in actual] == [e.shape for e in expected]
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(RNNS))
def test_unsorted_lengths_match_eager(name):
    torch.manual_seed(0)
    model = Packed(RNNS[name]()).eval()
    x, lengths = torch.randn(3, 6, 4), torch.tensor([4, 5, 2])  # the longest (5) is shorter than the padding (6)
    export_output = exporter.dynamo_export(model, x, lengths)
    graph = onnx.inliner.inline_local_functions(export_output.model_proto).graph
    assert ("GRU" if name.startswith("gru") else "LSTM") in {n.op_type for n in graph.node}  # with sequence_lens
    assert_matches_eager(export_output, model, x, lengths)
    assert_matches_eager(export_output, model, torch.randn(3, 6, 4), torch.tensor([1, 6, 3]))  # other lengths


def test_dynamic_batch_and_time_match_eager_at_other_sizes():
    torch.manual_seed(0)
    model = Packed(RNNS["lstm"]()).eval()
    x, lengths = torch.randn(3, 6, 4), torch.tensor([4, 6, 2])
    export_output = exporter.dynamo_export(
        model,
        x,
        lengths,
        export_options=exporter.ExportOptions(dynamic_shapes={"x": {0: "batch", 1: "time"}, "lengths": {0: "batch"}}),
    )
    assert_matches_eager(export_output, model, torch.randn(5, 9, 4), torch.tensor([9, 1, 4, 7, 3]))
    assert_matches_eager(export_output, model, torch.randn(2, 3, 4), torch.tensor([2, 3]))


def test_sorted_lengths_with_enforce_sorted():
    torch.manual_seed(0)
    model = Packed(RNNS["gru"](), enforce_sorted=True).eval()
    x, lengths = torch.randn(3, 6, 4), torch.tensor([6, 4, 2])
    assert_matches_eager(exporter.dynamo_export(model, x, lengths), model, x, lengths)


class PackedRnnTanh(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.RNN(4, 5, batch_first=True)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)  # MARK: rnn
        return pad_packed_sequence(out, batch_first=True)[0]


def test_a_packed_plain_rnn_is_refused_at_the_users_line():
    with pytest.raises(exporter.OnnxExporterError, match="RNN over a packed sequence cannot be exported") as info:
        exporter.dynamo_export(PackedRnnTanh().eval(), torch.randn(2, 3, 4), torch.tensor([3, 2]))
    errors = info.value.export_output.diagnostic_context.errors()
    line = next(n for n, text in enumerate(open(__file__), 1) if text.rstrip().endswith("# MARK: rnn"))
    assert any(e.location is not None and e.location.line == line for e in errors), [
        (e.message, e.location) for e in errors
    ]
