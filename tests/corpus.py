"""Model corpus for the onnxlens exporter tests.

Pure model definitions: this module never imports ``exporter``. Each :class:`Case`
has a ``build()`` that returns ``(model, args, kwargs)``: a small, deterministic model
(``torch.manual_seed(0)`` is set before building) in ``eval()`` mode, plus example
inputs. Tests export ``model(*args, **kwargs)`` and compare onnxruntime against eager.
A builder's keyword parameters are its input sizes: ``build(**case.second_shape)`` gives the
same model's inputs at another size of every dimension that stays dynamic under
``dynamic_shapes=True`` (``case.dynamic_dims`` lists, per graph input, which ones those are).

The corpus covers what real users export: CNNs, RNNs, attention and transformer
blocks, index ops, control flow (``torch.cond``), data-dependent shapes, complex
numbers/FFT, fp16/bf16, in-place buffer mutation, type promotion, kwargs/None and
nested inputs/outputs, and tiny Hugging Face ``transformers`` models with random
weights (no downloads).

Notes for users of the corpus:

* Cases tagged ``"mutation"`` update buffers in ``forward``: running them changes
  their state, so build a fresh model for every reference run. Some builders draw their
  inputs before the model: take the model from ``build()`` (the export sizes).
* Cases tagged ``"hf"`` return a Hugging Face ``ModelOutput``; decoder cases
  (tag ``"cache"``) hold a ``transformers`` cache object (``DynamicCache`` /
  ``EncoderDecoderCache``), which ``torch.export`` can only trace once the cache
  classes are registered as pytree nodes (see :func:`register_hf_pytrees`).
* Cases tagged ``"complex"`` compute with complex tensors; ``"complex_io"`` ones
  also take or return complex tensors (ONNX sees their real view, ``[..., 2]``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Model = nn.Module | Callable[..., Any]
Built = tuple[Model, tuple, dict]


Dims = dict[str, tuple[int | str, ...]]


@dataclass(frozen=True)
class Case:
    """One corpus entry: a named model builder with its comparison tolerances.

    ``build(**sizes)`` takes the builder's size parameters (batch, sequence, ...): without them it
    gives the export inputs, with ``second_shape`` it gives inputs where every dimension that stays
    dynamic under ``dynamic_shapes=True`` has another size. ``dynamic_dims`` is the shape of each
    ONNX graph input (by name) under ``dynamic_shapes=True``: ``dim_param`` names for symbolic dims,
    sizes for the dims the model fixes.
    """

    name: str  # unique, snake_case
    build: Callable[..., Built]  # (**sizes) -> (model, args, kwargs), seeded, eval() mode
    dynamic_dims: Dims
    second_shape: dict[str, int] | None  # build(**second_shape) changes every dynamic dim
    no_second_shape: str | None = None  # why there is no second shape (then second_shape is None)
    atol: float = 1e-4
    rtol: float = 1e-3
    ort_note: str | None = None  # set when onnxruntime (CPU) cannot run the model's dtype
    tags: frozenset[str] = frozenset()


CASES: list[Case] = []


def get(name: str) -> Case:
    """Return the case called ``name`` (``KeyError`` if there is none)."""
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(f"no corpus case named {name!r}")


def case(
    name: str,
    *,
    dims: Dims,
    second: dict[str, int] | None = None,
    no_second_shape: str | None = None,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    ort_note: str | None = None,
    tags: tuple[str, ...] = (),
) -> Callable[[Callable[..., Built]], Callable[..., Built]]:
    """Register a builder as a corpus case; the builder is seeded and put in eval mode."""
    if (second is None) == (no_second_shape is None):
        raise ValueError(f"corpus case {name!r}: give either a second shape or the reason it has none")

    def register(builder: Callable[..., Built]) -> Callable[..., Built]:
        @functools.wraps(builder)
        def build(**sizes: int) -> Built:
            torch.manual_seed(0)
            model, args, kwargs = builder(**sizes)
            if isinstance(model, nn.Module):
                model.eval()
            return model, args, kwargs

        if any(c.name == name for c in CASES):
            raise ValueError(f"duplicate corpus case {name!r}")
        CASES.append(Case(name, build, dims, second, no_second_shape, atol, rtol, ort_note, frozenset(tags)))
        return build

    return register


def _randomize_batchnorm_stats(model: nn.Module) -> None:
    """Give every batch norm non-trivial running stats (fresh ones are mean 0, var 1)."""
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)


# --------------------------------------------------------------------------------------
# Seed examples (PyTorch 2.1 "TorchDynamo-based ONNX Exporter" page)
# --------------------------------------------------------------------------------------


class MLPModel(nn.Module):
    """The seed's MLP: Linear 8->8->4->2->2 with sigmoids."""

    def __init__(self) -> None:
        super().__init__()
        self.fc0 = nn.Linear(8, 8, bias=True)
        self.fc1 = nn.Linear(8, 4, bias=True)
        self.fc2 = nn.Linear(4, 2, bias=True)
        self.fc3 = nn.Linear(2, 2, bias=True)

    def forward(self, tensor_x: torch.Tensor) -> torch.Tensor:
        tensor_x = self.fc0(tensor_x)
        tensor_x = torch.sigmoid(tensor_x)
        tensor_x = self.fc1(tensor_x)
        tensor_x = torch.sigmoid(tensor_x)
        tensor_x = self.fc2(tensor_x)
        tensor_x = torch.sigmoid(tensor_x)
        output = self.fc3(tensor_x)
        return output


@case("mlp", dims={"tensor_x": ("tensor_x_dim_0", 8)}, second={"batch": 98}, tags=("seed",))
def build_mlp(batch: int = 97) -> Built:
    return MLPModel(), (torch.rand((batch, 8), dtype=torch.float32),), {}


class SeedKwargsModel(nn.Module):
    """The seed's 'simplest export' model: a python-float ``bias`` passed as a kwarg."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor, bias: float | torch.Tensor | None = None) -> torch.Tensor:
        out = self.linear(x)
        out = out + bias
        return out


@case(
    "seed_kwargs_bias", dims={"x": ("x_dim_0", "x_dim_1", 2)}, second={"batch": 3, "rows": 5}, tags=("seed", "kwargs")
)
def build_seed_kwargs_bias(batch: int = 2, rows: int = 2) -> Built:
    return SeedKwargsModel(), (torch.randn(batch, rows, 2),), {"bias": 3.0}


def func_with_nested_input_structure(
    x_dict: dict[str, torch.Tensor],
    y_tuple: tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]],
) -> torch.Tensor:
    """The seed's plain function taking a dict and a nested tuple."""
    if "a" in x_dict:
        x = x_dict["a"]
    elif "b" in x_dict:
        x = x_dict["b"]
    else:
        x = torch.randn(3)
    y1, (y2, y3) = y_tuple
    return x + y1 + y2 + y3


@case(
    "seed_nested_input",
    dims={"args_0_a": (), "args_1_0": (), "args_1_1_0": (), "args_1_1_1": ()},
    no_second_shape="every input is 0-d",
    tags=("seed", "nested", "callable"),
)
def build_seed_nested_input() -> Built:
    x_dict = {"a": torch.tensor(1.0)}
    y_tuple = (torch.tensor(2.0), (torch.tensor(3.0), torch.tensor(4.0)))
    return func_with_nested_input_structure, (x_dict, y_tuple), {}


def func_returning_tuples(
    x: torch.Tensor, y: torch.Tensor, z: torch.Tensor
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The seed's plain function returning a nested tuple."""
    x = x + y
    y = y + z
    z = x + y
    return (x, (y, z))


@case(
    "seed_tuple_output",
    dims={"args_0": (), "args_1": (), "args_2": ()},
    no_second_shape="every input is 0-d",
    tags=("seed", "nested", "callable"),
)
def build_seed_tuple_output() -> Built:
    return func_returning_tuples, (torch.tensor(1.0), torch.tensor(2.0), torch.tensor(3.0)), {}


# --------------------------------------------------------------------------------------
# Convolutional models
# --------------------------------------------------------------------------------------


class SmallCNN(nn.Module):
    """Image classifier: two Conv-BN-ReLU-MaxPool stages, global pooling, Linear head."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(16 * 4 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


# The head's Linear(16 * 4 * 4) takes any height and width in [16, 19].
@case(
    "cnn_batchnorm",
    dims={"x": ("x_dim_0", 3, "x_dim_2", "x_dim_3")},
    second={"batch": 3, "h": 17, "w": 19},
    tags=("cnn",),
)
def build_cnn_batchnorm(batch: int = 2, h: int = 16, w: int = 16) -> Built:
    model = SmallCNN()
    _randomize_batchnorm_stats(model)
    return model, (torch.randn(batch, 3, h, w),), {}


class DepthwiseSeparableBlock(nn.Module):
    """MobileNet block: depthwise 3x3 conv + BN + ReLU6, then pointwise 1x1 conv + BN."""

    def __init__(self, channels: int = 8, out_channels: int = 16) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.pointwise = nn.Conv2d(channels, out_channels, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu6(self.bn1(self.depthwise(x)))
        return self.bn2(self.pointwise(x))


@case(
    "depthwise_conv",
    dims={"x": ("x_dim_0", 8, "x_dim_2", "x_dim_3")},
    second={"batch": 3, "h": 13, "w": 9},
    tags=("cnn",),
)
def build_depthwise_conv(batch: int = 2, h: int = 12, w: int = 12) -> Built:
    model = DepthwiseSeparableBlock()
    _randomize_batchnorm_stats(model)
    return model, (torch.randn(batch, 8, h, w),), {}


class AudioConv1d(nn.Module):
    """1-D conv feature extractor: strided conv, GELU, dilated conv, mean over time."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(4, 8, kernel_size=5, stride=2, padding=2)
        self.conv2 = nn.Conv1d(8, 8, kernel_size=3, dilation=2, padding=2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.conv2(F.gelu(self.conv1(x)))
        return h, h.mean(dim=-1)


@case("conv1d", dims={"x": ("x_dim_0", 4, "x_dim_2")}, second={"batch": 3, "time": 61}, tags=("cnn",))
def build_conv1d(batch: int = 2, time: int = 64) -> Built:
    return AudioConv1d(), (torch.randn(batch, 4, time),), {}


class VideoConv3d(nn.Module):
    """3-D conv over a short clip: Conv3d + ReLU + MaxPool3d + AvgPool3d."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv3d(3, 4, kernel_size=3, padding=1)
        self.pool = nn.MaxPool3d(kernel_size=(1, 2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.conv(x)))
        return F.avg_pool3d(x, kernel_size=2)


# The batch of 1 stays 1: torch.export specializes dims whose example size is 0 or 1.
@case(
    "conv3d",
    dims={"x": ("x_dim_0", 3, "x_dim_2", "x_dim_3", "x_dim_4")},
    second={"batch": 3, "frames": 6, "h": 12, "w": 10},
    tags=("cnn",),
)
def build_conv3d(batch: int = 1, frames: int = 4, h: int = 8, w: int = 8) -> Built:
    """A batch-1 example: under dynamic_shapes=True the batch stays symbolic (runs at batch 3)."""
    return VideoConv3d(), (torch.randn(batch, 3, frames, h, w),), {}


class ConvTranspose2dDecoder(nn.Module):
    """Autoencoder decoder: two ConvTranspose2d upsamplings to a sigmoid image."""

    def __init__(self) -> None:
        super().__init__()
        self.up1 = nn.ConvTranspose2d(8, 4, kernel_size=4, stride=2, padding=1)
        self.up2 = nn.ConvTranspose2d(4, 1, kernel_size=3, stride=2, padding=1, output_padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.up2(F.relu(self.up1(z))))


@case(
    "conv_transpose2d",
    dims={"z": ("z_dim_0", 8, "z_dim_2", "z_dim_3")},
    second={"batch": 3, "h": 5, "w": 3},
    tags=("cnn",),
)
def build_conv_transpose2d(batch: int = 2, h: int = 4, w: int = 4) -> Built:
    return ConvTranspose2dDecoder(), (torch.randn(batch, 8, h, w),), {}


class ConvTranspose1dUpsampler(nn.Module):
    """Vocoder-style 1-D upsampler: ConvTranspose1d (stride 3) + leaky ReLU + Conv1d."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose1d(6, 4, kernel_size=6, stride=3, padding=2, output_padding=1)
        self.post = nn.Conv1d(4, 1, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.post(F.leaky_relu(self.up(x), 0.1)))


@case("conv_transpose1d", dims={"x": ("x_dim_0", 6, "x_dim_2")}, second={"batch": 3, "time": 13}, tags=("cnn",))
def build_conv_transpose1d(batch: int = 2, time: int = 10) -> Built:
    return ConvTranspose1dUpsampler(), (torch.randn(batch, 6, time),), {}


class Pooling(nn.Module):
    """Average and max pooling with padding, ceil mode and count_include_pad=False."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        avg = F.avg_pool2d(x, kernel_size=3, stride=2, padding=1, count_include_pad=False)
        mx = F.max_pool2d(x, kernel_size=3, stride=2, padding=1)
        ceil = F.max_pool2d(x, kernel_size=2, stride=2, ceil_mode=True)
        return avg, mx, ceil


@case(
    "pooling",
    dims={"x": ("x_dim_0", "x_dim_1", "x_dim_2", "x_dim_3")},
    second={"batch": 3, "channels": 4, "h": 12, "w": 9},
    tags=("cnn",),
)
def build_pooling(batch: int = 2, channels: int = 3, h: int = 11, w: int = 11) -> Built:
    return Pooling(), (torch.randn(batch, channels, h, w),), {}


class AdaptivePoolingHead(nn.Module):
    """Conv backbone stub with adaptive average (to 3x3) and adaptive max (to 1x1) pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.avg = nn.AdaptiveAvgPool2d((3, 3))
        self.max = nn.AdaptiveMaxPool2d(1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.relu(self.conv(x))
        return self.avg(h), self.max(h).flatten(1)


@case(
    "adaptive_pooling",
    dims={"x": ("x_dim_0", 3, "x_dim_2", "x_dim_3")},
    second={"batch": 3, "h": 15, "w": 18},
    tags=("cnn",),
)
def build_adaptive_pooling(batch: int = 2, h: int = 12, w: int = 12) -> Built:
    return AdaptivePoolingHead(), (torch.randn(batch, 3, h, w),), {}


class NearestUpsample(nn.Module):
    """FPN-style top-down merge: nearest 2x upsampling of a coarse map added to a fine one."""

    def __init__(self) -> None:
        super().__init__()
        self.lateral = nn.Conv2d(4, 4, 1)

    def forward(self, coarse: torch.Tensor, fine: torch.Tensor) -> torch.Tensor:
        return self.lateral(fine) + F.interpolate(coarse, scale_factor=2.0, mode="nearest")


@case(
    "interpolate_nearest",
    dims={
        "coarse": ("coarse_dim_0", 4, "coarse_dim_2", "coarse_dim_3"),
        "fine": ("coarse_dim_0", 4, "2*coarse_dim_2", "2*coarse_dim_3"),
    },
    second={"batch": 3, "h": 6, "w": 7},
    tags=("cnn", "resize"),
)
def build_interpolate_nearest(batch: int = 2, h: int = 5, w: int = 6) -> Built:
    return NearestUpsample(), (torch.randn(batch, 4, h, w), torch.randn(batch, 4, 2 * h, 2 * w)), {}


class BilinearResize(nn.Module):
    """Segmentation head: logits resized bilinearly to a fixed size and by a scale factor."""

    def __init__(self) -> None:
        super().__init__()
        self.classifier = nn.Conv2d(4, 3, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.classifier(x)
        to_size = F.interpolate(logits, size=(12, 20), mode="bilinear", align_corners=False)
        scaled = F.interpolate(logits, scale_factor=2.0, mode="bilinear", align_corners=True)
        return to_size, scaled


@case(
    "interpolate_bilinear",
    dims={"x": ("x_dim_0", 4, "x_dim_2", "x_dim_3")},
    second={"batch": 3, "h": 7, "w": 5},
    tags=("cnn", "resize"),
)
def build_interpolate_bilinear(batch: int = 2, h: int = 6, w: int = 8) -> Built:
    return BilinearResize(), (torch.randn(batch, 4, h, w),), {}


# --------------------------------------------------------------------------------------
# Recurrent models
# --------------------------------------------------------------------------------------


class LSTMTagger(nn.Module):
    """Sequence tagger: 2-layer batch-first LSTM + Linear; also returns the final state."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size=8, hidden_size=16, num_layers=2, batch_first=True)
        self.out = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        seq, (h_n, c_n) = self.lstm(x)
        return self.out(seq), (h_n, c_n)


# torch.export alone specializes an RNN's sequence length; onnxlens keeps it dynamic (capture/recurrent.py).
@case("lstm", dims={"x": ("x_dim_0", "x_dim_1", 8)}, second={"batch": 3, "steps": 9}, tags=("rnn", "nested"))
def build_lstm(batch: int = 2, steps: int = 6) -> Built:
    return LSTMTagger(), (torch.randn(batch, steps, 8),), {}


class ProjectedLSTM(nn.Module):
    """A bidirectional 2-layer LSTM with projections (``proj_size``, as in speech models): hidden
    states smaller than the cells, which ONNX's LSTM cannot express."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(
            input_size=8, hidden_size=16, num_layers=2, proj_size=4, bidirectional=True, batch_first=True
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        return self.lstm(x)


@case("lstm_projection", dims={"x": ("x_dim_0", 6, 8)}, second={"batch": 3}, tags=("rnn", "nested"))
def build_lstm_projection(batch: int = 2) -> Built:
    return ProjectedLSTM(), (torch.randn(batch, 6, 8),), {}


class BiGRUEncoder(nn.Module):
    """Bidirectional GRU encoder with an explicit initial hidden state."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(input_size=8, hidden_size=12, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.gru(x, h0)


# torch.export alone specializes an RNN's sequence length; onnxlens keeps it dynamic (capture/recurrent.py).
@case(
    "gru_bidirectional",
    dims={"x": ("x_dim_0", "x_dim_1", 8), "h0": (2, "x_dim_0", 12)},
    second={"batch": 3, "steps": 4},
    tags=("rnn",),
)
def build_gru_bidirectional(batch: int = 2, steps: int = 7) -> Built:
    return BiGRUEncoder(), (torch.randn(batch, steps, 8), torch.zeros(2, batch, 12)), {}


# --------------------------------------------------------------------------------------
# Attention and transformers (torch.nn)
# --------------------------------------------------------------------------------------


class TextEncoder(nn.Module):
    """nn.TransformerEncoder (2 layers, GELU) over token embeddings with a padding mask."""

    def __init__(self, vocab: int = 50, d_model: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, nhead=4, dim_feedforward=64, dropout=0.0, activation="gelu", batch_first=True
        )
        # No nested-tensor fast path: outputs at padded positions stay defined.
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)

    def forward(self, input_ids: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.embed(input_ids), src_key_padding_mask=padding_mask)


@case(
    "transformer_encoder",
    dims={"input_ids": ("input_ids_dim_0", "input_ids_dim_1"), "padding_mask": ("input_ids_dim_0", "input_ids_dim_1")},
    second={"batch": 3, "seq": 10},
    tags=("transformer",),
)
def build_transformer_encoder(batch: int = 2, seq: int = 7) -> Built:
    input_ids = torch.randint(0, 50, (batch, seq))
    padding_mask = torch.zeros(batch, seq, dtype=torch.bool)
    padding_mask[1, 5:] = True
    return TextEncoder(), (input_ids, padding_mask), {}


class Seq2SeqTransformer(nn.Module):
    """nn.Transformer (1 encoder + 1 decoder layer) with a causal target mask built in forward."""

    def __init__(self, d_model: int = 32) -> None:
        super().__init__()
        self.transformer = nn.Transformer(
            d_model,
            nhead=4,
            num_encoder_layers=1,
            num_decoder_layers=1,
            dim_feedforward=64,
            dropout=0.0,
            batch_first=True,
        )
        self.proj = nn.Linear(d_model, 11)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), dtype=tgt.dtype)
        return self.proj(self.transformer(src, tgt, tgt_mask=tgt_mask, tgt_is_causal=True))


@case(
    "transformer_seq2seq",
    dims={"src": ("src_dim_0", "src_dim_1", 32), "tgt": ("src_dim_0", "tgt_dim_1", 32)},
    second={"batch": 3, "src_len": 10, "tgt_len": 8},
    tags=("transformer", "decoder"),
)
def build_transformer_seq2seq(batch: int = 2, src_len: int = 7, tgt_len: int = 5) -> Built:
    return Seq2SeqTransformer(), (torch.randn(batch, src_len, 32), torch.randn(batch, tgt_len, 32)), {}


class CrossAttention(nn.Module):
    """nn.MultiheadAttention cross-attention with a key padding mask; returns weights too."""

    def __init__(self, d_model: int = 32) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, num_heads=4, batch_first=True)

    def forward(
        self, query: torch.Tensor, memory: torch.Tensor, key_padding_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.attn(query, memory, memory, key_padding_mask=key_padding_mask, need_weights=True)


@case(
    "multihead_attention",
    dims={
        "query": ("query_dim_0", "query_dim_1", 32),
        "memory": ("memory_dim_0", "memory_dim_1", 32),
        "key_padding_mask": ("query_dim_0", "memory_dim_1"),
    },
    second={"batch": 3, "q_len": 6, "kv_len": 10},
    tags=("transformer",),
)
def build_multihead_attention(batch: int = 2, q_len: int = 5, kv_len: int = 7) -> Built:
    mask = torch.zeros(batch, kv_len, dtype=torch.bool)
    mask[0, kv_len - 1 :] = True
    return CrossAttention(), (torch.randn(batch, q_len, 32), torch.randn(batch, kv_len, 32), mask), {}


class SDPASelfAttention(nn.Module):
    """Self-attention through F.scaled_dot_product_attention (fused qkv projection)."""

    def __init__(self, d_model: int = 32, heads: int = 4, causal: bool = False) -> None:
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


@case("sdpa", dims={"x": ("x_dim_0", "x_dim_1", 32)}, second={"batch": 3, "seq": 9}, tags=("transformer", "sdpa"))
def build_sdpa(batch: int = 2, seq: int = 6) -> Built:
    return SDPASelfAttention(causal=False), (torch.randn(batch, seq, 32),), {}


@case(
    "sdpa_causal",
    dims={"x": ("x_dim_0", "x_dim_1", 32)},
    second={"batch": 3, "seq": 9},
    tags=("transformer", "sdpa", "decoder"),
)
def build_sdpa_causal(batch: int = 2, seq: int = 6) -> Built:
    return SDPASelfAttention(causal=True), (torch.randn(batch, seq, 32),), {}


class SDPAMasked(nn.Module):
    """F.scaled_dot_product_attention with an explicit boolean attention mask and a scale."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.5)


@case(
    "sdpa_bool_mask",
    dims={
        "q": ("q_dim_0", "q_dim_1", "q_dim_2", "q_dim_3"),
        "k": ("q_dim_0", "q_dim_1", "k_dim_2", "q_dim_3"),
        "v": ("q_dim_0", "q_dim_1", "v_dim_2", "q_dim_3"),
        "mask": ("q_dim_0", 1, "q_dim_2", "k_dim_2"),
    },
    second={"batch": 3, "heads": 3, "q_len": 6, "kv_len": 10, "head_dim": 4},
    tags=("transformer", "sdpa"),
)
def build_sdpa_bool_mask(batch: int = 2, heads: int = 2, q_len: int = 5, kv_len: int = 7, head_dim: int = 8) -> Built:
    q = torch.randn(batch, heads, q_len, head_dim)
    k, v = torch.randn(batch, heads, kv_len, head_dim), torch.randn(batch, heads, kv_len, head_dim)
    mask = torch.rand(batch, 1, q_len, kv_len) > 0.3
    mask[..., 0] = True  # every query attends to at least one key
    return SDPAMasked(), (q, k, v, mask), {}


# --------------------------------------------------------------------------------------
# Embedding, einsum, indexing
# --------------------------------------------------------------------------------------


class BagOfEmbeddings(nn.Module):
    """Text classifier: padded token embeddings, masked mean pooling, Linear head."""

    def __init__(self, vocab: int = 50, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.head = nn.Linear(dim, 3)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mask = (input_ids != 0).unsqueeze(-1).to(torch.float32)
        pooled = (self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(pooled)


@case(
    "embedding",
    dims={"input_ids": ("input_ids_dim_0", "input_ids_dim_1")},
    second={"batch": 4, "seq": 9},
    tags=("index",),
)
def build_embedding(batch: int = 3, seq: int = 6) -> Built:
    input_ids = torch.randint(1, 50, (batch, seq))
    input_ids[0, 4:] = 0
    return BagOfEmbeddings(), (input_ids,), {}


class EinsumBilinear(nn.Module):
    """Bilinear interaction and attention scores written with torch.einsum."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 6, 5) * 0.1)

    def forward(
        self, a: torch.Tensor, b: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        bilinear = torch.einsum("bi,oij,bj->bo", a, self.weight, b)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k).softmax(-1)
        return bilinear, scores


@case(
    "einsum",
    dims={
        "a": ("a_dim_0", 6),
        "b": ("a_dim_0", 5),
        "q": ("q_dim_0", "q_dim_1", "q_dim_2", "q_dim_3"),
        "k": ("q_dim_0", "q_dim_1", "k_dim_2", "q_dim_3"),
    },
    second={"n": 4, "batch": 3, "heads": 3, "q_len": 5, "kv_len": 6, "head_dim": 7},
    tags=("index",),
)
def build_einsum(
    n: int = 3, batch: int = 2, heads: int = 2, q_len: int = 4, kv_len: int = 5, head_dim: int = 8
) -> Built:
    a, b = torch.randn(n, 6), torch.randn(n, 5)
    args = (a, b, torch.randn(batch, heads, q_len, head_dim), torch.randn(batch, heads, kv_len, head_dim))
    return EinsumBilinear(), args, {}


class GatherScatter(nn.Module):
    """Pick per-row entries with torch.gather and pool by segment ids with scatter_add."""

    def forward(
        self, x: torch.Tensor, index: torch.Tensor, segment_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        picked = torch.gather(x, 1, index)
        pooled = torch.zeros(4, x.size(1), dtype=x.dtype).scatter_add(0, segment_ids.unsqueeze(1).expand_as(x), x)
        return picked, pooled


@case(
    "gather_scatter",
    dims={"x": ("x_dim_0", "x_dim_1"), "index": ("index_dim_0", "index_dim_1"), "segment_ids": ("x_dim_0",)},
    second={"rows": 7, "cols": 11, "picked_rows": 5, "picks": 4},
    tags=("index",),
)
def build_gather_scatter(rows: int = 6, cols: int = 10, picked_rows: int = 6, picks: int = 3) -> Built:
    x = torch.randn(rows, cols)
    index = torch.randint(0, cols, (picked_rows, picks))
    segment_ids = torch.tensor([0, 1, 1, 3, 0, 2, 3, 1, 2, 0])[:rows]
    return GatherScatter(), (x, index, segment_ids), {}


class IndexPut(nn.Module):
    """Histogram via index_put_(accumulate=True), slice assignment and index_select."""

    def forward(self, values: torch.Tensor, bins: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hist = torch.zeros(8, dtype=values.dtype)
        hist.index_put_((bins,), values, accumulate=True)
        y = x.clone()
        y[:, 1:3] = 0.0
        y[bins[:2]] = y.index_select(0, bins[2:4]) * 2.0
        return hist, y


@case(
    "index_put",
    dims={"values": ("values_dim_0",), "bins": ("bins_dim_0",), "x": ("x_dim_0", "x_dim_1")},
    second={"n": 13, "rows": 10, "cols": 6},
    tags=("index",),
)
def build_index_put(n: int = 12, rows: int = 8, cols: int = 5) -> Built:
    values = torch.rand(n)
    bins = torch.tensor([0, 3, 3, 7, 1, 0, 2, 5, 5, 5, 6, 4, 7])[:n]  # < 8 (histogram) and < rows
    return IndexPut(), (values, bins, torch.randn(rows, cols)), {}


class TopkArgmaxCumsum(nn.Module):
    """Top-k sampling helpers: topk, argmax, sort and cumulative (nucleus) probabilities."""

    def forward(self, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        values, indices = torch.topk(logits, k=3, dim=-1)
        probs = logits.softmax(-1)
        sorted_probs, _ = torch.sort(probs, dim=-1, descending=True)
        return {
            "topk_values": values,
            "topk_indices": indices,
            "argmax": logits.argmax(dim=-1),
            "cumprobs": sorted_probs.cumsum(dim=-1),
        }


@case(
    "topk_argmax_cumsum",
    dims={"logits": ("logits_dim_0", "logits_dim_1")},
    second={"batch": 5, "vocab": 12},
    tags=("index", "nested"),
)
def build_topk_argmax_cumsum(batch: int = 4, vocab: int = 10) -> Built:
    return TopkArgmaxCumsum(), (torch.randn(batch, vocab),), {}


class MaskedFillWhere(nn.Module):
    """Masked softmax with masked_fill(-inf) and a leaky activation via torch.where."""

    def forward(self, scores: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        attn = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        leaky = torch.where(scores > 0, scores, 0.1 * scores)
        return attn, leaky


@case(
    "masked_fill_where",
    dims={
        "scores": ("scores_dim_0", "scores_dim_1", "scores_dim_2"),
        "mask": ("scores_dim_0", "scores_dim_1", "scores_dim_2"),
    },
    second={"batch": 4, "q_len": 6, "kv_len": 7},
    tags=("index",),
)
def build_masked_fill_where(batch: int = 3, q_len: int = 5, kv_len: int = 5) -> Built:
    mask = torch.rand(batch, q_len, kv_len) > 0.4
    mask[..., 0] = True
    return MaskedFillWhere(), (torch.randn(batch, q_len, kv_len), mask), {}


class Reductions(nn.Module):
    """Feature statistics: global amax, amin/std/logsumexp/norm per dim, any/all."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "amax": x.amax(),  # over all dims
            "amin": x.amin(dim=1),
            "var": x.var(dim=-1, correction=0),
            "std": x.std(dim=0),
            "logsumexp": torch.logsumexp(x, dim=-1),
            "norm": torch.linalg.vector_norm(x, ord=2, dim=-1),
            "any": (x > 1.5).any(dim=-1),
            "all": (x > -3.0).all(),
        }


@case("reductions", dims={"x": ("x_dim_0", "x_dim_1")}, second={"rows": 5, "cols": 7}, tags=("reduction", "nested"))
def build_reductions(rows: int = 4, cols: int = 6) -> Built:
    return Reductions(), (torch.randn(rows, cols),), {}


# --------------------------------------------------------------------------------------
# Control flow and data-dependent shapes
# --------------------------------------------------------------------------------------


class CondBranches(nn.Module):
    """Picks a branch on the sign of the input sum with torch.cond; branches use weights."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Linear(4, 4)
        self.neg = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def true_fn(x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.pos(x))

        def false_fn(x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.neg(x)) - 1.0

        return torch.cond(x.sum() > 0, true_fn, false_fn, (x,))


@case("cond", dims={"x": ("x_dim_0", 4)}, second={"batch": 5}, tags=("control_flow",))
def build_cond(batch: int = 3) -> Built:
    return CondBranches(), (torch.randn(batch, 4).abs(),), {}


class BooleanMaskSelect(nn.Module):
    """Selects the positive entries (x[x > 0]): an output whose length depends on data."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positives = x[x > 0]
        return positives * 2.0, positives.sum()


@case("boolean_mask", dims={"x": ("x_dim_0", "x_dim_1")}, second={"rows": 5, "cols": 7}, tags=("data_dependent",))
def build_boolean_mask(rows: int = 4, cols: int = 5) -> Built:
    return BooleanMaskSelect(), (torch.randn(rows, cols),), {}


class NonzeroDetections(nn.Module):
    """Detection post-processing: indices of scores above a threshold, and their scores."""

    def forward(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keep = torch.nonzero(scores > 0.5)
        return keep, scores[keep[:, 0], keep[:, 1]]


@case(
    "nonzero",
    dims={"scores": ("scores_dim_0", "scores_dim_1")},
    second={"rows": 5, "cols": 7},
    tags=("data_dependent",),
)
def build_nonzero(rows: int = 4, cols: int = 6) -> Built:
    return NonzeroDetections(), (torch.rand(rows, cols),), {}


# --------------------------------------------------------------------------------------
# Complex numbers and FFT
# --------------------------------------------------------------------------------------


class RFFTMagnitude(nn.Module):
    """Log-magnitude spectrum: torch.fft.rfft then .abs()."""

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        return torch.log1p(torch.fft.rfft(signal, dim=-1).abs())


@case(
    "fft_rfft_abs", dims={"signal": ("signal_dim_0", "signal_dim_1")}, second={"batch": 3, "n": 35}, tags=("complex",)
)
def build_fft_rfft_abs(batch: int = 2, n: int = 32) -> Built:
    return RFFTMagnitude(), (torch.randn(batch, n),), {}


class FFTViewAsReal(nn.Module):
    """Full complex FFT returned as its real view (..., 2) via torch.view_as_real."""

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        return torch.view_as_real(torch.fft.fft(signal, dim=-1))


@case(
    "fft_view_as_real",
    dims={"signal": ("signal_dim_0", "signal_dim_1")},
    second={"batch": 3, "n": 21},
    tags=("complex",),
)
def build_fft_view_as_real(batch: int = 2, n: int = 16) -> Built:
    return FFTViewAsReal(), (torch.randn(batch, n),), {}


class FourierMixing(nn.Module):
    """FNet's token mixing: the real part of a 2-D FFT over sequence and hidden axes of a real input
    (which PyTorch makes complex first)."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.fft.fftn(hidden, dim=(1, 2)).real


@case(
    "fft_fourier_mixing",
    dims={"hidden": ("hidden_dim_0", "hidden_dim_1", "hidden_dim_2")},
    second={"batch": 3, "seq": 11, "width": 12},
    tags=("complex",),
)
def build_fft_fourier_mixing(batch: int = 2, seq: int = 8, width: int = 16) -> Built:
    return FourierMixing(), (torch.randn(batch, seq, width),), {}


class LogSpectrogram(nn.Module):
    """An audio front end: short-time Fourier transform with a Hann window, log magnitude."""

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        window = torch.hann_window(16, device=signal.device)
        spectrum = torch.stft(signal, n_fft=16, hop_length=4, window=window, return_complex=True)
        return torch.log1p(spectrum.abs())


@case(
    "stft_log_spectrogram",
    dims={"signal": ("signal_dim_0", "signal_dim_1")},
    second={"batch": 3, "n": 100},
    tags=("complex", "audio"),
)
def build_stft_log_spectrogram(batch: int = 2, n: int = 64) -> Built:
    return LogSpectrogram(), (torch.randn(batch, n),), {}


class SpectralConv1d(nn.Module):
    """Fourier Neural Operator layer: rfft, complex weights on low modes, irfft."""

    def __init__(self, channels: int = 4, modes: int = 5) -> None:
        super().__init__()
        self.modes = modes
        self.weight = nn.Parameter(torch.randn(channels, channels, modes, 2) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_ft = torch.fft.rfft(x, dim=-1)
        w = torch.view_as_complex(self.weight)
        low = torch.einsum("bim,iom->bom", x_ft[..., : self.modes], w)
        out_ft = torch.cat([low, torch.zeros_like(x_ft[..., self.modes :])], dim=-1)
        return torch.fft.irfft(out_ft, n=x.size(-1), dim=-1)


@case("spectral_conv", dims={"x": ("x_dim_0", 4, "x_dim_2")}, second={"batch": 3, "n": 20}, tags=("complex",))
def build_spectral_conv(batch: int = 2, n: int = 16) -> Built:
    return SpectralConv1d(), (torch.randn(batch, 4, n),), {}


class ComplexRotation(nn.Module):
    """Takes and returns complex tensors: rotates a complex signal by learned phases."""

    def __init__(self, n: int = 8) -> None:
        super().__init__()
        self.phase = nn.Parameter(torch.randn(n))

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rotated = z * torch.polar(torch.ones_like(self.phase), self.phase)
        return rotated, rotated.abs()


@case("complex_io", dims={"z": ("z_dim_0", 8, 2)}, second={"batch": 4}, tags=("complex", "complex_io"))
def build_complex_io(batch: int = 3) -> Built:
    return ComplexRotation(), (torch.randn(batch, 8, dtype=torch.complex64),), {}


# --------------------------------------------------------------------------------------
# Reduced precision
# --------------------------------------------------------------------------------------


class MLPBlock(nn.Module):
    """Transformer-style feed-forward block: LayerNorm, Linear, GELU, Linear, residual."""

    def __init__(self, dim: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


@case(
    "bf16_mlp",
    dims={"x": ("x_dim_0", 16)},
    second={"batch": 5},
    atol=5e-2,
    rtol=5e-2,
    ort_note="onnxruntime CPU has no bfloat16 kernel for Div, Erf, Add, Mul, Gemm (nor MatMul)",
    tags=("bf16",),
)
def build_bf16_mlp(batch: int = 4) -> Built:
    return MLPBlock().to(torch.bfloat16), (torch.randn(batch, 16, dtype=torch.bfloat16),), {}


@case("fp16_mlp", dims={"x": ("x_dim_0", 16)}, second={"batch": 5}, atol=1e-2, rtol=1e-2, tags=("fp16",))
def build_fp16_mlp(batch: int = 4) -> Built:
    return MLPBlock().to(torch.float16), (torch.randn(batch, 16, dtype=torch.float16),), {}


@case(
    "fp16_cnn",
    dims={"x": ("x_dim_0", 3, "x_dim_2", "x_dim_3")},
    second={"batch": 3, "h": 17, "w": 19},
    atol=1e-2,
    rtol=1e-2,
    tags=("fp16", "cnn"),
)
def build_fp16_cnn(batch: int = 2, h: int = 16, w: int = 16) -> Built:
    model = SmallCNN()
    _randomize_batchnorm_stats(model)
    return model.to(torch.float16), (torch.randn(batch, 3, h, w, dtype=torch.float16),), {}


# --------------------------------------------------------------------------------------
# In-place buffer mutation
# --------------------------------------------------------------------------------------


class CallCounter(nn.Module):
    """Counts calls in a buffer (self.calls.add_(1)) and scales its output by the count."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return self.linear(x) * self.calls


@case("buffer_add_counter", dims={"x": ("x_dim_0", 4)}, second={"batch": 4}, tags=("mutation",))
def build_buffer_add_counter(batch: int = 3) -> Built:
    return CallCounter(), (torch.randn(batch, 4),), {}


class RunningNormalizer(nn.Module):
    """Online feature normalizer: updates a running mean/var buffer (copy_) on every call."""

    def __init__(self, dim: int = 6, momentum: float = 0.1) -> None:
        super().__init__()
        self.momentum = momentum
        self.register_buffer("running_mean", torch.zeros(dim))
        self.register_buffer("running_var", torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.momentum
        self.running_mean.copy_((1 - m) * self.running_mean + m * x.mean(0))
        self.running_var.copy_((1 - m) * self.running_var + m * x.var(0, unbiased=False))
        return (x - self.running_mean) / torch.sqrt(self.running_var + 1e-5)


@case("buffer_copy_running_stats", dims={"x": ("x_dim_0", 6)}, second={"batch": 6}, tags=("mutation",))
def build_buffer_copy_running_stats(batch: int = 5) -> Built:
    return RunningNormalizer(), (torch.randn(batch, 6),), {}


# --------------------------------------------------------------------------------------
# Type promotion
# --------------------------------------------------------------------------------------


class TypePromotion(nn.Module):
    """Mixes int64/int32/float32/bool tensors and python scalars the way real code does."""

    def forward(
        self, counts: torch.Tensor, small: torch.Tensor, x: torch.Tensor, flags: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        return {
            "int_plus_float": counts + x,  # int64 + float32 -> float32
            "bool_times_float": flags * x,  # bool * float32 -> float32
            "int_floordiv": counts // 3,  # int64 -> int64
            "int_truediv": counts / 2,  # int64 -> float32
            "int32_plus_int64": small + counts,  # -> int64
            "int_times_pyfloat": counts * 1.5,  # -> float32
            "bool_plus_int": (x > 0) + 1,  # -> int64
            "bool_sum": flags.sum(),  # -> int64
            "int_mean": counts.float().mean() + small.max(),  # float32 + int32 -> float32
        }


@case(
    "type_promotion",
    dims={name: ("counts_dim_0", "counts_dim_1") for name in ("counts", "small", "x", "flags")},
    second={"rows": 4, "cols": 5},
    tags=("promotion", "nested"),
)
def build_type_promotion(rows: int = 3, cols: int = 4) -> Built:
    counts = torch.randint(-5, 10, (rows, cols))
    small = torch.randint(0, 4, (rows, cols), dtype=torch.int32)
    flags = torch.rand(rows, cols) > 0.5
    return TypePromotion(), (counts, small, torch.randn(rows, cols), flags), {}


class SizePromotion(nn.Module):
    """Tensors combined with their own sizes, which are symbolic in a dynamic export (int64 in ONNX)."""

    def forward(self, x: torch.Tensor, small: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "mean_by_size": x.sum(-1) / x.shape[-1],  # float32 / size -> float32
            "mean_by_numel": x.sum() / x.numel(),
            "scaled_by_size": x * x.shape[0],
            "int32_plus_size": small + x.shape[1],  # int32 + size -> int32
            "power_of_size": x ** (x.shape[0] - 1),  # sizes as Scalar arguments
            "filled_with_size": x.masked_fill(x > 0, x.shape[1]),
            "clamped_to_size": (x * 10).clamp(max=x.shape[1]),
        }


@case(
    "size_promotion",
    dims={"x": ("x_dim_0", "x_dim_1"), "small": ("small_dim_0", "small_dim_1")},
    second={"rows": 4, "cols": 7},
    tags=("promotion",),
)
def build_size_promotion(rows: int = 3, cols: int = 5) -> Built:
    return SizePromotion(), (torch.randn(rows, cols), torch.randint(0, 4, (rows, cols), dtype=torch.int32)), {}


class IntegerMath(nn.Module):
    """Floating functions of integer and bool tensors, which PyTorch computes in float32 (RAFT scales
    its correlation by ``torch.sqrt(torch.tensor(channels))``)."""

    def forward(self, x: torch.Tensor, counts: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "scaled_by_root": x / torch.sqrt(torch.tensor(x.shape[-1])),
            "root": counts.sqrt(),
            "log1p": torch.log1p(counts),
            "sigmoid": counts.sigmoid(),
            "exp_of_bool": mask.exp(),
            "clamped": counts.clamp(max=2.5),
            "reciprocal": (counts + 1).reciprocal(),
        }


@case(
    "integer_math",
    dims={
        "x": ("x_dim_0", "x_dim_1"),
        "counts": ("counts_dim_0", "counts_dim_1"),
        "mask": ("mask_dim_0", "mask_dim_1"),
    },
    second={"rows": 4, "cols": 7},
    tags=("promotion",),
)
def build_integer_math(rows: int = 3, cols: int = 5) -> Built:
    counts = torch.randint(0, 9, (rows, cols), dtype=torch.int64)
    return IntegerMath(), (torch.randn(rows, cols), counts, counts > 3), {}


# --------------------------------------------------------------------------------------
# Input/output structure: kwargs, None, nested containers
# --------------------------------------------------------------------------------------


class OptionalInputs(nn.Module):
    """Keyword-only tensor bias, a None mask and a python-float scale."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(
        self,
        x: torch.Tensor,
        *,
        bias: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        scale: float = 1.0,
    ) -> torch.Tensor:
        y = self.linear(x) * scale
        if bias is not None:
            y = y + bias
        if mask is not None:
            y = y.masked_fill(~mask, 0.0)
        return y


@case("kwargs_none", dims={"x": ("x_dim_0", 4), "bias": (4,)}, second={"batch": 5}, tags=("kwargs",))
def build_kwargs_none(batch: int = 3) -> Built:
    kwargs = {"bias": torch.randn(4), "mask": None, "scale": 0.5}
    return OptionalInputs(), (torch.randn(batch, 4),), kwargs


class NestedIO(nn.Module):
    """Dict-of-list and tuple inputs; dict output holding a list and a tuple."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(
        self,
        features: dict[str, Any],
        pair: tuple[torch.Tensor, torch.Tensor],
        extras: list[torch.Tensor],
    ) -> dict[str, Any]:
        image, layers = features["image"], features["layers"]
        merged = self.proj(image) + layers[0] * layers[1]
        first, second = pair
        return {
            "merged": merged,
            "stats": [merged.mean(), merged.max()],
            "pair": (first - second, first * second + extras[0].sum()),
        }


@case(
    "nested_io",
    dims={
        "features_image": ("features_image_dim_0", 4),
        "features_layers_0": ("features_image_dim_0", 4),
        "features_layers_1": ("features_image_dim_0", 4),
        "pair_0": ("pair_0_dim_0",),
        "pair_1": ("pair_0_dim_0",),
        "extras_0": ("extras_0_dim_0",),
    },
    second={"batch": 3, "pair_len": 5, "extra_len": 4},
    tags=("nested",),
)
def build_nested_io(batch: int = 2, pair_len: int = 3, extra_len: int = 2) -> Built:
    features = {"image": torch.randn(batch, 4), "layers": [torch.randn(batch, 4), torch.randn(batch, 4)]}
    pair = (torch.randn(pair_len), torch.randn(pair_len))
    return NestedIO(), (features, pair, [torch.randn(extra_len)]), {}


# --------------------------------------------------------------------------------------
# Hugging Face transformers (tiny configs, random weights, no downloads)
# --------------------------------------------------------------------------------------

HF_ATOL = 1e-4  # tiny float32 models: onnxruntime vs eager differ by <= 4e-6
HF_ATTN = "sdpa"  # transformers' default; torch.export captures it (and "eager") for all cases


def register_hf_pytrees(model: nn.Module) -> None:
    """Register transformers' cache classes as pytree nodes so torch.export can trace them.

    transformers 5.x registers ``ModelOutput`` subclasses itself but not ``Cache`` ones;
    its own exporter does it at export time with this helper.
    """
    from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model

    register_cache_pytrees_for_model(model)


def _token_inputs(vocab: int, batch: int = 2, seq: int = 8) -> dict[str, torch.Tensor]:
    input_ids = torch.randint(3, vocab, (batch, seq))
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    attention_mask[1, -2:] = 0  # right padding on the second sequence
    return {"input_ids": input_ids, "attention_mask": attention_mask}


@case(
    "hf_bert",
    dims={
        "input_ids": ("input_ids_dim_0", "input_ids_dim_1"),
        "attention_mask": ("attention_mask_dim_0", "input_ids_dim_1"),
        "token_type_ids": ("input_ids_dim_0", "input_ids_dim_1"),
    },
    second={"batch": 3, "seq": 11},
    atol=HF_ATOL,
    tags=("hf", "transformer"),
)
def build_hf_bert(batch: int = 2, seq: int = 8) -> Built:
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        attn_implementation=HF_ATTN,
    )
    inputs = _token_inputs(100, batch, seq)
    inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
    return BertModel(config), (), inputs


@case(
    "hf_gpt2_lm",
    dims={
        "input_ids": ("input_ids_dim_0", "input_ids_dim_1"),
        "attention_mask": ("input_ids_dim_0", "attention_mask_dim_1"),
    },
    second={"batch": 3, "seq": 11},
    atol=HF_ATOL,
    tags=("hf", "transformer", "decoder", "cache"),
)
def build_hf_gpt2_lm(batch: int = 2, seq: int = 8) -> Built:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=100,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation=HF_ATTN,
    )
    return GPT2LMHeadModel(config), (), _token_inputs(100, batch, seq)


# A tiny decoder with grouped-query attention, as in real Llamas and Mistrals.
_DECODER = dict(
    vocab_size=100,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
    attn_implementation=HF_ATTN,
)
_DECODER_DIMS = {
    "input_ids": ("input_ids_dim_0", "input_ids_dim_1"),
    "attention_mask": ("attention_mask_dim_0", "attention_mask_dim_1"),
}


@case(
    "hf_llama_lm",
    dims=_DECODER_DIMS,
    second={"batch": 3, "seq": 11},
    atol=HF_ATOL,
    tags=("hf", "transformer", "decoder", "cache"),
)
def build_hf_llama_lm(batch: int = 2, seq: int = 8) -> Built:
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(**_DECODER)), (), _token_inputs(100, batch, seq)


@case(
    "hf_mistral_lm",
    dims=_DECODER_DIMS,
    second={"batch": 3, "seq": 11},
    atol=HF_ATOL,
    tags=("hf", "transformer", "decoder", "cache"),
)
def build_hf_mistral_lm(batch: int = 2, seq: int = 8) -> Built:
    """Sliding-window attention (a window shorter than the sequence) and its cache, whose length is
    a Python int when run eagerly but symbolic when captured with a dynamic sequence."""
    from transformers import MistralConfig, MistralForCausalLM

    return MistralForCausalLM(MistralConfig(**_DECODER, sliding_window=6)), (), _token_inputs(100, batch, seq)


@case(
    "hf_t5",
    dims={
        "input_ids": ("input_ids_dim_0", "input_ids_dim_1"),
        "attention_mask": ("attention_mask_dim_0", "input_ids_dim_1"),
        "decoder_input_ids": ("input_ids_dim_0", "decoder_input_ids_dim_1"),
    },
    second={"batch": 3, "seq": 11, "target_len": 6},
    atol=HF_ATOL,
    tags=("hf", "transformer", "decoder", "cache", "seq2seq"),
)
def build_hf_t5(batch: int = 2, seq: int = 8, target_len: int = 4) -> Built:
    # With sdpa, torch.onnx.export (torch 2.13) fails decomposing a view of the sdpa output;
    # kept on purpose: it is what users get by default.
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        vocab_size=100,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        attn_implementation=HF_ATTN,
    )
    inputs = _token_inputs(100, batch, seq)
    inputs["decoder_input_ids"] = torch.randint(3, 100, (batch, target_len))
    return T5ForConditionalGeneration(config), (), inputs


# Whisper fixes the frames (2 * max_source_positions) and the mel bins.
@case(
    "hf_whisper",
    dims={
        "input_features": ("input_features_dim_0", 16, 32),
        "decoder_input_ids": ("input_features_dim_0", "decoder_input_ids_dim_1"),
    },
    second={"batch": 3, "target_len": 6},
    atol=HF_ATOL,
    tags=("hf", "transformer", "decoder", "cache", "seq2seq"),
)
def build_hf_whisper(batch: int = 2, target_len: int = 4) -> Built:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(
        vocab_size=100,
        num_mel_bins=16,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=16,  # input_features has 2 * 16 frames
        max_target_positions=32,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        attn_implementation=HF_ATTN,
    )
    inputs = {
        "input_features": torch.randn(batch, 16, 32),
        "decoder_input_ids": torch.randint(3, 100, (batch, target_len)),
    }
    return WhisperForConditionalGeneration(config), (), inputs


# ViT's position embeddings fix the image size.
@case(
    "hf_vit",
    dims={"pixel_values": ("pixel_values_dim_0", 3, 32, 32)},
    second={"batch": 3},
    atol=HF_ATOL,
    tags=("hf", "transformer", "vision"),
)
def build_hf_vit(batch: int = 2) -> Built:
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(
        image_size=32,
        patch_size=8,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        attn_implementation=HF_ATTN,
    )
    return ViTModel(config), (), {"pixel_values": torch.randn(batch, 3, 32, 32)}


@case(
    "hf_resnet",
    dims={"pixel_values": ("pixel_values_dim_0", 3, "pixel_values_dim_2", "pixel_values_dim_3")},
    second={"batch": 3, "h": 40, "w": 36},
    atol=HF_ATOL,
    tags=("hf", "cnn", "vision"),
)
def build_hf_resnet(batch: int = 2, h: int = 32, w: int = 32) -> Built:
    from transformers import ResNetConfig, ResNetModel

    config = ResNetConfig(
        num_channels=3,
        embedding_size=8,
        hidden_sizes=[8, 16],
        depths=[1, 1],
        layer_type="basic",
    )
    model = ResNetModel(config)
    _randomize_batchnorm_stats(model)
    return model, (), {"pixel_values": torch.randn(batch, 3, h, w)}


@case(
    "hf_distilbert",
    dims={
        "input_ids": ("input_ids_dim_0", "input_ids_dim_1"),
        "attention_mask": ("attention_mask_dim_0", "input_ids_dim_1"),
    },
    second={"batch": 3, "seq": 11},
    atol=HF_ATOL,
    tags=("hf", "transformer"),
)
def build_hf_distilbert(batch: int = 2, seq: int = 8) -> Built:
    from transformers import DistilBertConfig, DistilBertModel

    config = DistilBertConfig(
        vocab_size=100,
        max_position_embeddings=64,
        n_layers=2,
        n_heads=2,
        dim=32,
        hidden_dim=64,
        attn_implementation=HF_ATTN,
    )
    return DistilBertModel(config), (), _token_inputs(100, batch, seq)


# A 1-D conv feature extractor (strides 5 and 2) in front of a transformer encoder, on raw audio.
@case(
    "hf_wav2vec2",
    dims={"input_values": ("input_values_dim_0", "input_values_dim_1")},
    second={"batch": 3, "samples": 500},
    atol=HF_ATOL,
    tags=("hf", "transformer", "audio"),
)
def build_hf_wav2vec2(batch: int = 2, samples: int = 400) -> Built:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        attn_implementation=HF_ATTN,
    )
    return Wav2Vec2Model(config), (), {"input_values": torch.randn(batch, samples)}


@case(
    "hf_convnext",
    dims={"pixel_values": ("pixel_values_dim_0", 3, "pixel_values_dim_2", "pixel_values_dim_3")},
    second={"batch": 3, "h": 40, "w": 36},
    atol=HF_ATOL,
    tags=("hf", "cnn", "vision"),
)
def build_hf_convnext(batch: int = 2, h: int = 32, w: int = 32) -> Built:
    from transformers import ConvNextConfig, ConvNextModel

    config = ConvNextConfig(num_channels=3, patch_size=4, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1])
    return ConvNextModel(config), (), {"pixel_values": torch.randn(batch, 3, h, w)}


@case(
    "hf_clip_text",
    dims={
        "input_ids": ("input_ids_dim_0", "input_ids_dim_1"),
        "attention_mask": ("attention_mask_dim_0", "input_ids_dim_1"),
    },
    second={"batch": 3, "seq": 11},
    atol=HF_ATOL,
    tags=("hf", "transformer"),
)
def build_hf_clip_text(batch: int = 2, seq: int = 8) -> Built:
    from transformers import CLIPTextConfig, CLIPTextModel

    config = CLIPTextConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=64,
        attn_implementation=HF_ATTN,
    )
    return CLIPTextModel(config), (), _token_inputs(100, batch, seq)
