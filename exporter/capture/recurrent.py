"""``nn.LSTM`` and ``nn.GRU`` over a plain (padded) sequence, captured with its length symbolic.

PyTorch computes the output size of ``aten.lstm``/``aten.gru`` by running their decomposition, a Python
loop over the time steps, which fixes the sequence length to the example's: a dynamic sequence came out
static. While capturing (`capturing`), the RNN modules' call of ``torch._VF.lstm``/``gru`` runs
``onnxlens::lstm``/``onnxlens::gru`` instead: the same schema, PyTorch's own kernel, and a fake
implementation that states the output sizes. Both translate as ``aten.lstm``/``aten.gru`` do (torchlib's
ONNX LSTM/GRU). A training-mode RNN with dropout between layers (random), or an LSTM with projections,
keeps PyTorch's call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@torch.library.custom_op("onnxlens::lstm", mutates_args=())
def lstm(
    input: torch.Tensor,
    hx: list[torch.Tensor],
    params: list[torch.Tensor],
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aten.lstm.input``."""
    out, h, c = torch.ops.aten.lstm.input(
        input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
    )
    return out, h, c


@lstm.register_fake
def _(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _output(input, hx[0], bidirectional), torch.empty_like(hx[0]), torch.empty_like(hx[1])


@torch.library.custom_op("onnxlens::gru", mutates_args=())
def gru(
    input: torch.Tensor,
    hx: torch.Tensor,
    params: list[torch.Tensor],
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``aten.gru.input``."""
    out, h = torch.ops.aten.gru.input(
        input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
    )
    return out, h


@gru.register_fake
def _(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _output(input, hx, bidirectional), torch.empty_like(hx)


def _output(input: torch.Tensor, h0: torch.Tensor, bidirectional: bool) -> torch.Tensor:
    """The output of an RNN over `input` (time and batch as its first two axes, either order)."""
    return input.new_empty((*input.shape[:2], (2 if bidirectional else 1) * h0.shape[2]))


def _plain(original, custom, packed_at: int):
    """`original` (``_VF.lstm``/``gru``), calling `custom` for a deterministic RNN over a plain sequence without
    projections; its packed overload (a tensor of batch sizes at `packed_at`) is left to `original`."""

    def call(*args):
        if len(args) != 9 or isinstance(args[packed_at], torch.Tensor):
            return original(*args)
        input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first = args
        weights = num_layers * (2 if bidirectional else 1) * (4 if has_biases else 2)  # per layer and direction
        if (train and dropout > 0 and num_layers > 1) or len(params) != weights:  # random, or projections
            return original(*args)
        return custom(input, list(hx) if custom is lstm else hx, list(params), *args[3:])

    return call


@contextlib.contextmanager
def capturing() -> Iterator[None]:
    """The RNN modules' plain sequences as `lstm`/`gru` while a model is captured."""
    vf = torch._VF
    originals = {"lstm": vf.lstm, "gru": vf.gru}
    vf.lstm = _plain(originals["lstm"], lstm, 1)  # lstm(data, batch_sizes, hx, params, …)
    vf.gru = _plain(originals["gru"], gru, 2)  # gru(data, batch_sizes, hx, params, …)
    try:
        yield
    finally:
        for name in originals:
            delattr(vf, name)
