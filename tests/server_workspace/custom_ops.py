"""A torch.library custom op with no ONNX translation, used by registry and diagnostics tests."""

import torch


@torch.library.custom_op("onnxlens_test::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.tanh(x) * scale


@scaled_tanh.register_fake
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("onnxlens_test::shifted_sigmoid", mutates_args=())
def shifted_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x) - 0.5


@shifted_sigmoid.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)
