"""Packed sequences (``pack_padded_sequence`` → LSTM/GRU → ``pad_packed_sequence``) as one operator
with lengths, which ONNX's LSTM/GRU take as ``sequence_lens``.

PyTorch's packed data has a size that depends on the lengths' values (their sum), and its RNNs size
their initial state with a tensor (``batch_sizes[0]``), which capture cannot trace. While capturing
(`capturing`), a `PackedSequence` instead holds the padded input, time first, in the caller's batch
order, and the lengths in place of ``batch_sizes``; ``nn.LSTM``/``nn.GRU`` run it as
``onnxlens::packed_lstm``/``packed_gru`` (whose CPU implementation is PyTorch's packed RNN, so the
captured graph computes what eager does), and ``pad_packed_sequence`` cuts the output to the longest
length. The two functions are swapped by code, so the names a model imported keep working.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.nn.utils import rnn


def _sorted(lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lengths sorted longest first, the order, and its inverse."""
    lengths, order = torch.sort(lengths.to(torch.int64).cpu(), descending=True)
    return lengths, order, torch.argsort(order)


@torch.library.custom_op("onnxlens::packed_lstm", mutates_args=())
def packed_lstm(
    input: torch.Tensor,
    lengths: torch.Tensor,
    h0: torch.Tensor,
    c0: torch.Tensor,
    params: list[torch.Tensor],
    has_biases: bool,
    num_layers: int,
    bidirectional: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An LSTM over the padded, time-first `input` whose sequence b has `lengths[b]` steps: the output
    (zero past each length) and the final states, as PyTorch's packed LSTM gives them."""
    lengths, order, inverse = _sorted(lengths)
    data, batch_sizes = torch._VF._pack_padded_sequence(input.index_select(1, order), lengths, False)
    hx = (h0.index_select(1, order), c0.index_select(1, order))
    out, h, c = torch._VF.lstm(data, batch_sizes, hx, params, has_biases, num_layers, 0.0, False, bidirectional)
    padded, _ = torch._VF._pad_packed_sequence(out, batch_sizes, False, 0.0, input.shape[0])
    return padded.index_select(1, inverse), h.index_select(1, inverse), c.index_select(1, inverse)


@packed_lstm.register_fake
def _(input, lengths, h0, c0, params, has_biases, num_layers, bidirectional):
    directions = 2 if bidirectional else 1
    return input.new_empty((*input.shape[:2], directions * h0.shape[2])), torch.empty_like(h0), torch.empty_like(c0)


@torch.library.custom_op("onnxlens::packed_gru", mutates_args=())
def packed_gru(
    input: torch.Tensor,
    lengths: torch.Tensor,
    h0: torch.Tensor,
    params: list[torch.Tensor],
    has_biases: bool,
    num_layers: int,
    bidirectional: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`packed_lstm` for a GRU."""
    lengths, order, inverse = _sorted(lengths)
    data, batch_sizes = torch._VF._pack_padded_sequence(input.index_select(1, order), lengths, False)
    h0 = h0.index_select(1, order)
    out, h = torch._VF.gru(data, batch_sizes, h0, params, has_biases, num_layers, 0.0, False, bidirectional)
    padded, _ = torch._VF._pad_packed_sequence(out, batch_sizes, False, 0.0, input.shape[0])
    return padded.index_select(1, inverse), h.index_select(1, inverse)


@packed_gru.register_fake
def _(input, lengths, h0, params, has_biases, num_layers, bidirectional):
    directions = 2 if bidirectional else 1
    return input.new_empty((*input.shape[:2], directions * h0.shape[2])), torch.empty_like(h0)


def _pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """While capturing: the padded input, time first, with its lengths (see the module's docstring)."""
    import torch as _torch
    from torch.nn.utils.rnn import PackedSequence as _Packed

    lengths = _torch.as_tensor(lengths, dtype=_torch.int64)
    return _Packed(input.transpose(0, 1) if batch_first else input, lengths, None, None)


def _pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """While capturing: the RNN's padded output cut (or padded) to the longest length, or `total_length`."""
    import torch as _torch

    data, lengths = sequence.data, sequence.batch_sizes
    steps = data.shape[0]
    if total_length is None:  # the longest length, known from the data only
        total_length = lengths.max().item()
        _torch._check(total_length >= 0)
        _torch._check(total_length <= steps)
        data = data[:total_length]
    elif total_length > steps:
        data = _torch.nn.functional.pad(data, (0, 0, 0, 0, 0, total_length - steps))
    if padding_value != 0.0:
        inside = _torch.arange(total_length).unsqueeze(1) < lengths.unsqueeze(0)
        data = _torch.where(inside.unsqueeze(2), data, _torch.full_like(data, padding_value))
    return (data.transpose(0, 1) if batch_first else data), lengths


def _rnn_forward(original):
    def forward(self, input, hx=None):
        if not isinstance(input, rnn.PackedSequence):
            return original(self, input, hx)
        if self.proj_size if isinstance(self, torch.nn.LSTM) else False:
            raise NotImplementedError("An LSTM with proj_size over a packed sequence cannot be exported.")
        data, lengths = input.data, input.batch_sizes
        directions = 2 if self.bidirectional else 1
        if hx is None:
            zeros = data.new_zeros(self.num_layers * directions, data.shape[1], self.hidden_size)
            hx = (zeros, zeros) if isinstance(self, torch.nn.LSTM) else zeros
        weights = [getattr(self, name) for name in self._flat_weights_names]
        if isinstance(self, torch.nn.LSTM):
            h0, c0 = hx
            out, h, c = packed_lstm(data, lengths, h0, c0, weights, self.bias, self.num_layers, self.bidirectional)
            return rnn.PackedSequence(out, lengths, None, None), (h, c)
        out, h = packed_gru(data, lengths, hx, weights, self.bias, self.num_layers, self.bidirectional)
        return rnn.PackedSequence(out, lengths, None, None), h

    return forward


def _refuse_packed(original):
    def forward(self, input, hx=None):
        if isinstance(input, rnn.PackedSequence):
            raise NotImplementedError(
                f"{type(self).__name__} over a packed sequence cannot be exported: only nn.LSTM and nn.GRU take "
                "packed sequences (ONNX's LSTM and GRU have sequence lengths; its RNN has them too, but onnxlens "
                "does not translate it)."
            )
        return original(self, input, hx)

    return forward


@contextlib.contextmanager
def capturing() -> Iterator[None]:
    """Packed sequences as `packed_lstm`/`packed_gru` with lengths while a model is captured."""
    swaps = [(rnn.pack_padded_sequence, _pack_padded_sequence), (rnn.pad_packed_sequence, _pad_packed_sequence)]
    codes = [(f, f.__code__) for f, _ in swaps]
    forwards = {cls: cls.forward for cls in (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN)}
    try:
        for f, stand_in in swaps:
            f.__code__ = stand_in.__code__
        torch.nn.LSTM.forward = _rnn_forward(forwards[torch.nn.LSTM])
        torch.nn.GRU.forward = _rnn_forward(forwards[torch.nn.GRU])
        torch.nn.RNN.forward = _refuse_packed(forwards[torch.nn.RNN])
        yield
    finally:
        for f, code in codes:
            f.__code__ = code
        for cls, forward in forwards.items():
            cls.forward = forward
