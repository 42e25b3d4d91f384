"""ONNX LSTM/GRU with ``sequence_lens`` for `exporter.capture.packed_sequences`' operators (torchlib's
``aten_lstm``/``aten_gru`` take no lengths). One ONNX node per layer, both directions in it."""

from __future__ import annotations

from collections.abc import Sequence

from onnxscript import opset18 as op
from onnxscript import values

from exporter.constants import DOMAIN_COMPOSITES
from exporter.translate.opname import OpName

# PyTorch's gate blocks in ONNX's order: LSTM i,f,g,o → i,o,f,c; GRU r,z,n → z,r,h.
_LSTM_GATES = (0, 3, 1, 2)
_GRU_GATES = (1, 0, 2)


def _traced(fn):
    return values.TracedOnnxFunction(values.Opset(DOMAIN_COMPOSITES, 1), fn)


def _gates(weight, order: Sequence[int]):
    """`weight`'s gate blocks (along axis 0) in ONNX's `order`."""
    blocks = op.Split(weight, num_outputs=len(order), axis=0)
    return op.Concat(*[blocks[i] for i in order], axis=0)


def _layers(
    kind: str,
    input,
    lengths,
    states: Sequence,
    params: Sequence,
    has_biases: bool,
    num_layers: int,
    bidirectional: bool,
):
    """The stacked layers: the output (time, batch, directions * hidden) and each state's final values."""
    order = _LSTM_GATES if kind == "LSTM" else _GRU_GATES
    hidden_size = states[0].shape[2]  # static: the module's hidden_size
    directions = 2 if bidirectional else 1
    per_direction = 4 if has_biases else 2
    lens = op.Cast(lengths, to=6)  # int32
    finals: list[list] = [[] for _ in states]
    x = input
    for layer in range(num_layers):
        w, r, b = [], [], []
        for d in range(directions):
            first = (layer * directions + d) * per_direction
            w.append(op.Unsqueeze(_gates(params[first], order), [0]))
            r.append(op.Unsqueeze(_gates(params[first + 1], order), [0]))
            if has_biases:
                biases = (_gates(params[first + 2], order), _gates(params[first + 3], order))
                b.append(op.Unsqueeze(op.Concat(*biases, axis=0), [0]))
        initial = [op.Slice(s, [layer * directions], [(layer + 1) * directions], [0]) for s in states]
        direction = "bidirectional" if bidirectional else "forward"
        weights = (op.Concat(*w, axis=0), op.Concat(*r, axis=0), op.Concat(*b, axis=0) if has_biases else None)
        if kind == "LSTM":
            y, h, c = op.LSTM(x, *weights, lens, *initial, direction=direction, hidden_size=hidden_size)
            outs = (h, c)
        else:
            y, h = op.GRU(
                x, *weights, lens, *initial, direction=direction, hidden_size=hidden_size, linear_before_reset=1
            )
            outs = (h,)
        for final, value in zip(finals, outs):
            final.append(value)
        # (time, directions, batch, hidden) → (time, batch, directions * hidden)
        x = op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), op.Constant(value_ints=[0, 0, directions * hidden_size]))
    return x, *[op.Concat(*f, axis=0) for f in finals]


@_traced
def packed_lstm(input, lengths, h0, c0, params: Sequence, has_biases: bool, num_layers: int, bidirectional: bool):
    return _layers("LSTM", input, lengths, (h0, c0), params, has_biases, num_layers, bidirectional)


@_traced
def packed_gru(input, lengths, h0, params: Sequence, has_biases: bool, num_layers: int, bidirectional: bool):
    return _layers("GRU", input, lengths, (h0,), params, has_biases, num_layers, bidirectional)


FUNCTIONS = {OpName("onnxlens", "packed_lstm"): packed_lstm, OpName("onnxlens", "packed_gru"): packed_gru}
