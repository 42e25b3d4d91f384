"""A torch.library custom op with no ONNX translation registered (e2e: FXE0011)."""

import torch


@torch.library.custom_op("onnxlens_e2e::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.tanh(x) * scale


@scaled_tanh.register_fake
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)
