"""Optional ATen arguments (``dtype=None``, an omitted bias, ``rounding_mode=None``, …) reach torchlib
as the translation expects: every torchlib-registered ATen op with an optional ScalarType or
Tensor argument is exported with and without that argument and compared with eager in onnxruntime.

The expected values, dtypes and shapes come from eager PyTorch; the feeds are the case's tensors in
argument order (each case's graph inputs are exactly those tensors).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F

import exporter
from exporter.translate.opname import OpName
from exporter.translate.registry import _torchlib_table

torch.manual_seed(0)
X = torch.randn(3, 4)
XI = torch.randint(-5, 5, (3, 4), dtype=torch.int32)
POS = torch.rand(3, 4) * 0.8 + 0.1
IMG = torch.randn(2, 3, 8, 8)
SEQ = torch.randn(2, 3, 10)
VOL = torch.randn(1, 2, 4, 4, 4)
Q, K, V = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
MASK = torch.rand(5, 5) > 0.3
IDX = torch.tensor([0, 2, 1, 2, 0, 3])
TARGET = torch.tensor([1, 0, 3])


@dataclasses.dataclass(frozen=True)
class Case:
    op: str  # the ATen overload the case must exercise, as torch.export captures it
    variant: str
    fn: Callable[..., object]
    inputs: tuple[torch.Tensor, ...]
    values: bool = True  # False: random or uninitialized results; compare dtype and shape only


def _cases() -> list[Case]:
    w4, b4 = torch.randn(5, 4), torch.randn(5)
    c = [
        # ScalarType? dtype
        Case("aten::sum.default", "", lambda x: x.sum(), (XI,)),
        Case("aten::sum.default", "dtype", lambda x: x.sum(dtype=torch.float64), (XI,)),
        Case("aten::sum.dim_IntList", "", lambda x: x.sum(1), (X,)),
        Case("aten::sum.dim_IntList", "dtype", lambda x: x.sum(1, dtype=torch.float64), (X,)),
        Case("aten::mean.default", "", lambda x: x.mean(), (X,)),
        Case("aten::mean.default", "dtype", lambda x: x.mean(dtype=torch.float64), (X,)),
        Case("aten::mean.dim", "", lambda x: x.mean(0, keepdim=True), (X,)),
        Case("aten::mean.dim", "dtype", lambda x: x.mean(0, dtype=torch.float64), (X,)),
        Case("aten::softmax.int", "", lambda x: F.softmax(x, -1), (X,)),
        Case("aten::softmax.int", "dtype", lambda x: F.softmax(x, -1, dtype=torch.float64), (X,)),
        Case("aten::log_softmax.int", "", lambda x: F.log_softmax(x, -1), (X,)),
        Case("aten::log_softmax.int", "dtype", lambda x: F.log_softmax(x, -1, dtype=torch.float64), (X,)),
        Case("aten::cumsum.default", "", lambda x: x.cumsum(1), (XI,)),
        Case("aten::cumsum.default", "dtype", lambda x: x.cumsum(1, dtype=torch.float32), (XI,)),
        Case("aten::cumprod.default", "", lambda x: x.cumprod(1), (XI,)),
        Case("aten::cumprod.default", "dtype", lambda x: x.cumprod(1, dtype=torch.float64), (X,)),
        Case("aten::searchsorted.Tensor", "", lambda x: torch.searchsorted(torch.arange(0.0, 4.0), x), (X,)),
        Case(
            "aten::searchsorted.Tensor",
            "side+sorter",
            lambda x: torch.searchsorted(
                torch.tensor([3.0, 0.0, 2.0, 1.0]), x, side="right", sorter=torch.tensor([1, 3, 2, 0])
            ),
            (X,),
        ),
        Case("aten::searchsorted.Scalar", "", lambda x: x + torch.searchsorted(torch.arange(0.0, 4.0), 1.5), (X,)),
        Case(
            "aten::searchsorted.Scalar",
            "out_int32",
            lambda x: x.int() + torch.searchsorted(torch.arange(0.0, 4.0), 1.5, out_int32=True),
            (X,),
        ),
        Case("aten::prod.default", "", lambda x: x.prod(), (POS,)),
        Case("aten::prod.default", "dtype", lambda x: x.prod(dtype=torch.float64), (POS,)),
        Case("aten::prod.dim_int", "", lambda x: x.prod(1), (POS,)),
        Case("aten::prod.dim_int", "dtype", lambda x: x.prod(1, dtype=torch.float64), (POS,)),
        Case("aten::linalg_vector_norm.default", "", lambda x: torch.linalg.vector_norm(x), (X,)),
        Case(
            "aten::linalg_vector_norm.default",
            "dim+dtype",
            lambda x: torch.linalg.vector_norm(x, 3, dim=1, dtype=torch.float64),
            (X,),
        ),
        Case("aten::arange.default", "", lambda x: x + torch.arange(4), (X,)),
        Case("aten::arange.default", "dtype", lambda x: x.double() + torch.arange(4, dtype=torch.float64), (X,)),
        Case("aten::arange.start", "", lambda x: torch.arange(2, 6) * x.shape[0], (X,)),
        Case("aten::arange.start_step", "", lambda x: x + torch.arange(0.0, 2.0, 0.5), (X,)),
        Case("aten::arange.start_step", "dtype", lambda x: torch.arange(1, 9, 2, dtype=torch.int32) + x.int(), (X,)),
        Case("aten::full.default", "", lambda x: x + torch.full((3, 4), 1.5), (X,)),
        Case("aten::full.default", "int fill", lambda x: torch.full((3, 4), 7) + x.long(), (X,)),
        Case("aten::full.default", "dtype", lambda x: torch.full((3, 4), 2, dtype=torch.float16) + x.half(), (X,)),
        Case("aten::zeros.default", "", lambda x: torch.zeros(3, 4) + x, (X,)),
        Case("aten::zeros.default", "dtype", lambda x: torch.zeros(3, 4, dtype=torch.int64) + x.long(), (X,)),
        Case("aten::ones.default", "", lambda x: torch.ones(3, 4) - x, (X,)),
        Case("aten::ones.default", "dtype", lambda x: torch.ones(3, 4, dtype=torch.float64) - x.double(), (X,)),
        Case("aten::empty.memory_format", "", lambda x: torch.empty(3, 4), (X,), values=False),
        Case("aten::empty.memory_format", "dtype", lambda x: torch.empty(2, dtype=torch.int32), (X,), values=False),
        Case("aten::full_like.default", "", lambda x: torch.full_like(x, 3), (XI,)),
        Case("aten::full_like.default", "dtype", lambda x: torch.full_like(x, 3, dtype=torch.float32), (XI,)),
        Case("aten::zeros_like.default", "", lambda x: torch.zeros_like(x) + 1, (XI,)),
        Case("aten::zeros_like.default", "dtype", lambda x: torch.zeros_like(x, dtype=torch.float64), (XI,)),
        Case("aten::ones_like.default", "", lambda x: torch.ones_like(x), (XI,)),
        Case("aten::ones_like.default", "dtype", lambda x: torch.ones_like(x, dtype=torch.bool), (XI,)),
        Case("aten::empty_like.default", "", lambda x: torch.empty_like(x), (X,), values=False),
        Case("aten::empty_like.default", "dtype", lambda x: torch.empty_like(x, dtype=torch.int64), (X,), values=False),
        Case("aten::new_zeros.default", "", lambda x: x.new_zeros(2, 3), (XI,)),
        Case("aten::new_zeros.default", "dtype", lambda x: x.new_zeros(2, 3, dtype=torch.float32), (XI,)),
        Case("aten::new_ones.default", "", lambda x: x.new_ones(2, 3), (XI,)),
        Case("aten::new_ones.default", "dtype", lambda x: x.new_ones(2, 3, dtype=torch.float64), (XI,)),
        Case("aten::new_full.default", "", lambda x: x.new_full((2, 3), 4), (XI,)),
        Case("aten::new_full.default", "dtype", lambda x: x.new_full((2, 3), 4, dtype=torch.float32), (XI,)),
        Case("aten::new_empty.default", "", lambda x: x.new_empty(2, 3), (XI,), values=False),
        Case("aten::new_empty.default", "dtype", lambda x: x.new_empty(2, 3, dtype=torch.float64), (XI,), values=False),
        Case("aten::scalar_tensor.default", "", lambda x: x + torch.scalar_tensor(2.5), (X,)),
        Case(
            "aten::scalar_tensor.default", "dtype", lambda x: x.long() + torch.scalar_tensor(2, dtype=torch.int64), (X,)
        ),
        Case("aten::linspace.default", "", lambda x: x + torch.linspace(0, 1, 4), (X,)),
        Case(
            "aten::linspace.default", "dtype", lambda x: x.double() + torch.linspace(0, 1, 4, dtype=torch.float64), (X,)
        ),
        Case("aten::hann_window.default", "", lambda x: x + torch.hann_window(4), (X,)),
        Case(
            "aten::hann_window.default", "dtype", lambda x: torch.hann_window(4, dtype=torch.float64) + x.double(), (X,)
        ),
        Case("aten::hamming_window.default", "", lambda x: x + torch.hamming_window(4), (X,)),
        Case(
            "aten::hamming_window.default",
            "dtype",
            lambda x: x.double() + torch.hamming_window(4, dtype=torch.float64),
            (X,),
        ),
        Case("aten::blackman_window.default", "", lambda x: x + torch.blackman_window(4), (X,)),
        Case("aten::kaiser_window.default", "", lambda x: x + torch.kaiser_window(4), (X,)),
        Case(
            "aten::kaiser_window.default",
            "dtype",
            lambda x: x.double() + torch.kaiser_window(4, dtype=torch.float64),
            (X,),
        ),
        Case("aten::kaiser_window.periodic", "", lambda x: x + torch.kaiser_window(4, False), (X,)),
        Case("aten::kaiser_window.beta", "", lambda x: x + torch.kaiser_window(4, True, 5.0), (X,)),
        Case(
            "aten::kaiser_window.beta",
            "dtype",
            lambda x: x.double() + torch.kaiser_window(4, False, 5.0, dtype=torch.float64),
            (X,),
        ),
        Case("aten::_to_copy.default", "dtype", lambda x: x.to(torch.float64), (X,)),
        Case("aten::_to_copy.default", "dtype int", lambda x: x.to(dtype=torch.int32), (X,)),
        Case("aten::_to_copy.default", "half", lambda x: x.half(), (X,)),
        Case("aten::clone.default", "", lambda x: x.clone() * 2, (X,)),
        Case(
            "aten::clone.default", "memory_format", lambda x: x.clone(memory_format=torch.contiguous_format) * 2, (X,)
        ),
        Case("aten::rand.default", "", lambda x: torch.rand(3, 4) + x, (X,), values=False),
        Case("aten::rand.default", "dtype", lambda x: torch.rand(3, 4, dtype=torch.float64), (X,), values=False),
        Case("aten::randn.default", "", lambda x: torch.randn(3, 4) + x, (X,), values=False),
        Case("aten::randn.default", "dtype", lambda x: torch.randn(2, dtype=torch.float64), (X,), values=False),
        Case("aten::rand_like.default", "", lambda x: torch.rand_like(x), (X,), values=False),
        Case("aten::rand_like.default", "dtype", lambda x: torch.rand_like(x, dtype=torch.float64), (X,), values=False),
        Case("aten::randn_like.default", "", lambda x: torch.randn_like(x), (X,), values=False),
        Case("aten::randint.low", "", lambda x: torch.randint(0, 5, (3, 4)) + x.long(), (X,), values=False),
        Case("aten::randint.low", "dtype", lambda x: torch.randint(0, 5, (3,), dtype=torch.int32), (X,), values=False),
        Case("aten::randint_like.low_dtype", "", lambda x: torch.randint_like(x, 0, 5), (X,), values=False),
        # Tensor? arguments
        Case("aten::linear.default", "", lambda x, w: F.linear(x, w), (X, w4)),
        Case("aten::linear.default", "bias", lambda x, w, b: F.linear(x, w, b), (X, w4, b4)),
        Case("aten::conv1d.default", "", lambda x, w: F.conv1d(x, w), (SEQ, torch.randn(4, 3, 3))),
        Case(
            "aten::conv1d.default",
            "bias",
            lambda x, w, b: F.conv1d(x, w, b),
            (SEQ, torch.randn(4, 3, 3), torch.randn(4)),
        ),
        Case("aten::conv2d.default", "", lambda x, w: F.conv2d(x, w, padding=1), (IMG, torch.randn(4, 3, 3, 3))),
        Case(
            "aten::conv2d.default",
            "bias",
            lambda x, w, b: F.conv2d(x, w, b),
            (IMG, torch.randn(4, 3, 3, 3), torch.randn(4)),
        ),
        Case("aten::conv3d.default", "", lambda x, w: F.conv3d(x, w), (VOL, torch.randn(3, 2, 2, 2, 2))),
        Case(
            "aten::conv3d.default",
            "bias",
            lambda x, w, b: F.conv3d(x, w, b),
            (VOL, torch.randn(3, 2, 2, 2, 2), torch.randn(3)),
        ),
        Case(
            "aten::convolution.default",
            "",
            lambda x, w: torch.ops.aten.convolution(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
            (IMG, torch.randn(4, 3, 3, 3)),
        ),
        Case(
            "aten::convolution.default",
            "bias",
            lambda x, w, b: torch.ops.aten.convolution(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
            (IMG, torch.randn(4, 3, 3, 3), torch.randn(4)),
        ),
        Case("aten::layer_norm.default", "", lambda x: F.layer_norm(x, (4,)), (X,)),
        Case(
            "aten::layer_norm.default",
            "weight+bias",
            lambda x, w, b: F.layer_norm(x, (4,), w, b),
            (X, torch.randn(4), torch.randn(4)),
        ),
        Case("aten::layer_norm.default", "weight", lambda x, w: F.layer_norm(x, (4,), w), (X, torch.randn(4))),
        Case("aten::group_norm.default", "", lambda x: F.group_norm(x, 1), (IMG,)),
        Case(
            "aten::group_norm.default",
            "weight+bias",
            lambda x, w, b: F.group_norm(x, 3, w, b),
            (IMG, torch.randn(3), torch.randn(3)),
        ),
        Case("aten::instance_norm.default", "", lambda x: F.instance_norm(x), (IMG,)),
        Case(
            "aten::instance_norm.default",
            "weight+bias",
            lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
            (IMG, torch.randn(3), torch.randn(3)),
        ),
        Case(
            "aten::_native_batch_norm_legit_no_training.default",
            "",
            lambda x, m, v: F.batch_norm(x, m, v),
            (IMG, torch.randn(3), torch.rand(3) + 0.5),
        ),
        Case(
            "aten::_native_batch_norm_legit_no_training.default",
            "weight+bias",
            lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b),
            (IMG, torch.randn(3), torch.rand(3) + 0.5, torch.randn(3), torch.randn(3)),
        ),
        Case("aten::clamp.Tensor", "min", lambda x, lo: torch.clamp(x, min=lo), (X, torch.zeros(4))),
        Case("aten::clamp.Tensor", "max", lambda x, hi: torch.clamp(x, max=hi), (X, torch.full((4,), 0.5))),
        Case(
            "aten::clamp.Tensor",
            "min+max",
            lambda x, lo, hi: torch.clamp(x, lo, hi),
            (X, torch.full((4,), -0.5), torch.full((4,), 0.5)),
        ),
        Case("aten::clamp.default", "min", lambda x: x.clamp(min=0.1), (X,)),
        Case("aten::clamp.default", "max", lambda x: x.clamp(max=0.1), (X,)),
        Case(
            "aten::scaled_dot_product_attention.default",
            "",
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
            (Q, K, V),
        ),
        Case(
            "aten::scaled_dot_product_attention.default",
            "mask+scale",
            lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3),
            (Q, K, V, MASK),
        ),
        Case(
            "aten::bilinear.default",
            "",
            lambda a, b, w: F.bilinear(a, b, w),
            (X, torch.randn(3, 2), torch.randn(5, 4, 2)),
        ),
        Case(
            "aten::bilinear.default",
            "bias",
            lambda a, b, w, bias: F.bilinear(a, b, w, bias),
            (X, torch.randn(3, 2), torch.randn(5, 4, 2), torch.randn(5)),
        ),
        Case("aten::nll_loss_nd.default", "", lambda x, t: F.nll_loss(F.log_softmax(x, -1), t), (X, TARGET)),
        Case(
            "aten::nll_loss_nd.default",
            "weight",
            lambda x, t, w: F.nll_loss(F.log_softmax(x, -1), t, w),
            (X, TARGET, torch.rand(4)),
        ),
        Case(
            "aten::embedding_bag.padding_idx",
            "",
            lambda w, i, o: F.embedding_bag(i, w, o),
            (torch.randn(5, 3), IDX, torch.tensor([0, 2])),
        ),
        Case(
            "aten::embedding_bag.padding_idx",
            "per_sample_weights",
            lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p),
            (torch.randn(5, 3), IDX, torch.tensor([0, 2]), torch.rand(6)),
        ),
        # other optional arguments
        Case("aten::div.Tensor_mode", "floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), (X, POS)),
        Case("aten::div.Tensor_mode", "trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), (X, POS)),
        Case("aten::argmax.default", "", lambda x: x.argmax(), (X,)),
        Case("aten::argmax.default", "dim", lambda x: x.argmax(1), (X,)),
        Case("aten::argmin.default", "", lambda x: x.argmin(), (X,)),
        Case("aten::logit.default", "", lambda x: torch.logit(x), (POS,)),
        Case("aten::logit.default", "eps", lambda x: torch.logit(x, eps=0.2), (POS,)),
        Case("aten::pad.default", "", lambda x: F.pad(x, (1, 2)), (X,)),
        Case("aten::pad.default", "value", lambda x: F.pad(x, (1, 2), value=-3.0), (X,)),
        Case("aten::slice.Tensor", "start", lambda x: x[:, 1:], (X,)),
        Case("aten::slice.Tensor", "end", lambda x: x[:, :2], (X,)),
        Case("aten::repeat_interleave.self_int", "", lambda x: x.repeat_interleave(2), (X,)),
        Case("aten::repeat_interleave.self_int", "dim", lambda x: x.repeat_interleave(2, dim=1), (X,)),
        Case("aten::cross.default", "", lambda a, b: torch.cross(a, b, dim=1), (torch.randn(2, 3), torch.randn(2, 3))),
        Case("aten::avg_pool2d.default", "", lambda x: F.avg_pool2d(x, 2), (IMG,)),
        Case("aten::avg_pool2d.default", "divisor_override", lambda x: F.avg_pool2d(x, 2, divisor_override=3), (IMG,)),
        Case(
            "aten::avg_pool2d.default",
            "divisor_override+padding",
            lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=5),
            (IMG,),
        ),
        Case("aten::avg_pool3d.default", "", lambda x: F.avg_pool3d(x, 2), (VOL,)),
        Case("aten::avg_pool3d.default", "divisor_override", lambda x: F.avg_pool3d(x, 2, divisor_override=3), (VOL,)),
        Case("aten::upsample_nearest2d.vec", "scale", lambda x: F.interpolate(x, scale_factor=2), (IMG,)),
        Case("aten::upsample_nearest2d.vec", "size", lambda x: F.interpolate(x, size=(5, 6)), (IMG,)),
        Case(
            "aten::upsample_bilinear2d.vec",
            "scale",
            lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
            (IMG,),
        ),
        Case(
            "aten::upsample_bilinear2d.vec",
            "size",
            lambda x: F.interpolate(x, size=(5, 6), mode="bilinear", align_corners=True),
            (IMG,),
        ),
        Case("aten::all.dims", "", lambda x: torch.ops.aten.all.dims(x > 0), (X,)),
        Case("aten::all.dims", "dims", lambda x: torch.ops.aten.all.dims(x > 0, [1]), (X,)),
        Case("aten::any.dims", "", lambda x: torch.ops.aten.any.dims(x > 0), (X,)),
        Case("aten::any.dims", "dims", lambda x: (x > 0).any(dim=(0, 1)), (X,)),
        Case("aten::einsum.default", "", lambda a, b: torch.einsum("ij,kj->ik", a, b), (X, torch.randn(2, 4))),
    ]
    return c


CASES = _cases()


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., object]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *inputs):
        return self.fn(*inputs)


def _aten_targets(fn: Callable[..., object], inputs: tuple[torch.Tensor, ...]) -> set[str]:
    program = torch.export.export(_Fn(fn), inputs).run_decompositions({})
    return {
        str(OpName.from_target(n.target))
        for n in program.graph.nodes
        if n.op == "call_function" and OpName.from_target(n.target)
    }


def _ops_with_optional_args() -> set[str]:
    """The torchlib-registered ATen overloads that take an optional ScalarType or Tensor argument."""
    found = set()
    for name in _torchlib_table():
        if name.namespace != "aten":
            continue
        overload = getattr(getattr(torch.ops.aten, name.op_name, None), name.overload, None)
        if overload is None:
            continue
        for arg in overload._schema.arguments:
            if isinstance(arg.type, torch.OptionalType) and (
                str(arg.type.getElementType()) == "Tensor" or (arg.name == "dtype")
            ):
                found.add(str(name))
                break
    return found


# Ops the sweep cannot reach through a model, each with why.
NOT_SWEPT = {
    "aten::_embedding_bag.default": "internal overload; F.embedding_bag is captured as embedding_bag.padding_idx",
    "aten::_embedding_bag_forward_only.default": "internal overload, not produced by torch.export",
    "aten::embedding_bag.default": "F.embedding_bag is captured as embedding_bag.padding_idx",
    "aten::_grouped_mm.default": "CUDA-only kernel",
    "aten::_native_batch_norm_legit.default": "training-mode batch norm; eval exports _no_training",
    "aten::_native_batch_norm_legit.no_stats": "training-mode batch norm without running stats",
    "aten::_native_batch_norm_legit_functional.default": "training-mode functionalized batch norm",
    "aten::native_batch_norm.default": "captured as _native_batch_norm_legit_no_training",
    "aten::batch_norm.default": "the inference IR this sweep reads decomposes it; tests/test_batch_norm.py sweeps its modes",
    "aten::to.dtype_layout": "the inference IR this sweep reads makes it _to_copy; tests/test_composites.py exports it",
    "aten::native_group_norm.default": "F.group_norm is captured as group_norm",
    "aten::native_layer_norm.default": "F.layer_norm is captured as layer_norm",
    "aten::_scaled_dot_product_efficient_attention.default": "CUDA kernel",
    "aten::_scaled_dot_product_flash_attention_for_cpu.default": "F.scaled_dot_product_attention is captured undecomposed",
    "aten::cross_entropy_loss.default": "F.cross_entropy is captured as log_softmax + nll_loss_forward",
    "aten::nll_loss.default": "F.nll_loss is captured as nll_loss_nd",
    "aten::nll_loss_forward.default": "reached through nll_loss_nd's decomposition (swept as nll_loss_nd)",
    "aten::bincount.default": "data-dependent output size",
    "aten::stft.default": "complex output; covered by the corpus' stft_log_spectrogram",
    "aten::special_log_softmax.default": "torch.special.log_softmax is captured as log_softmax.int",
    "aten::special_softmax.default": "torch.special.softmax is captured as softmax.int",
    "aten::empty_strided.default": "not produced by torch.export from Python code",
    "aten::new_empty_strided.default": "not produced by torch.export from Python code",
    "aten::normal.float_float": "captured as normal_functional / randn",
    "aten::tensor.bool": "torch.tensor() in forward becomes a lifted constant",
    "aten::tensor.float": "torch.tensor() in forward becomes a lifted constant",
    "aten::tensor.int": "torch.tensor() in forward becomes a lifted constant",
    "aten::randint.default": "torch.randint(high, size) is captured as randint.low",
    "aten::randint_like.default": "torch.randint_like(x, high) is captured as randint_like.low_dtype",
}


def test_every_op_with_an_optional_dtype_or_tensor_argument_is_swept():
    swept = {case.op for case in CASES}
    missing = _ops_with_optional_args() - swept - set(NOT_SWEPT)
    assert not missing, f"add sweep cases (or a NOT_SWEPT reason) for {sorted(missing)}"


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op.removeprefix('aten::')}-{c.variant or 'omitted'}" for c in CASES])
def test_optional_argument(case: Case):
    assert case.op in _aten_targets(case.fn, case.inputs), f"the case does not exercise {case.op}"
    export_output = exporter.dynamo_export(_Fn(case.fn), *case.inputs)
    session = ort.InferenceSession(export_output.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == [f"inputs_{i}" for i in range(len(case.inputs))]
    actual = session.run(None, {f"inputs_{i}": t.numpy() for i, t in enumerate(case.inputs)})
    with torch.no_grad():
        expected = case.fn(*case.inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        e = e.numpy()
        assert a.dtype == e.dtype and a.shape == e.shape, (
            f"ONNX {a.dtype}{list(a.shape)} vs eager {e.dtype}{list(e.shape)}"
        )
        if case.values:
            tolerance = 1e-3 if e.dtype == np.float16 else 1e-5  # one fp16 ulp near 2 is 2e-3 relative … 1e-3
            np.testing.assert_allclose(a, e, rtol=tolerance, atol=tolerance)


class _LSTMTagger(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, batch_first=True)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x):
        hidden, _ = self.lstm(x)
        return F.log_softmax(self.head(hidden), -1)


def test_log_softmax_after_an_lstm():
    """The held-out trial that found the class: ``dtype=None`` reached torchlib's ``dtype=-1`` check."""
    model, x = _LSTMTagger().eval(), torch.randn(2, 7, 8)
    export_output = exporter.dynamo_export(model, x)
    session = ort.InferenceSession(export_output.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (actual,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(actual, model(x).numpy(), rtol=1e-4, atol=1e-5)
