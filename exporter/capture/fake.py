"""Fake mode: export models without allocating their weights (models larger than memory)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv


@dataclasses.dataclass
class ONNXFakeContext:
    """What `enable_fake_mode` yields: its fake tensor mode and the checkpoints loaded under it."""

    fake_mode: FakeTensorMode
    state_dict_paths: tuple[str, ...] = ()


@contextlib.contextmanager
def enable_fake_mode() -> Iterator[ONNXFakeContext]:
    """Create models and inputs as fake tensors inside this block.

    Fake tensors have shapes and dtypes but no data, so a model larger than memory can be built
    and exported. Checkpoints loaded inside (``torch.load``, ``safetensors.torch.load_file``)
    become fake too, and their paths are remembered. Export with
    ``ExportOptions(fake_context=ctx)``, then ``ExportOutput.save(path, model_state_dict=...)``
    to write the real weights beside the model::

        with exporter.enable_fake_mode() as ctx:
            model = MyModel()
            x = torch.randn(2, 2, 2)
        out = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(fake_context=ctx))
        out.save("model.onnx", model_state_dict="model.safetensors")
    """
    fake_mode = FakeTensorMode(
        allow_non_fake_inputs=not torch._guards.detect_fake_mode(),
        shape_env=ShapeEnv(allow_scalar_outputs=False, allow_dynamic_output_shape_ops=False),
    )
    context = ONNXFakeContext(fake_mode)
    paths: list[str] = []
    with fake_mode, _recording_checkpoints(paths, fake_mode):
        yield context
    context.state_dict_paths = tuple(dict.fromkeys(paths))


def is_fake(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, FakeTensor)


def check_fake_consistency(model: Any, args: tuple, kwargs: dict, fake_context: ONNXFakeContext | None) -> None:
    """Fake mode needs every weight and input fake; without it, none may be. Raise a clear error."""
    tensors = list(torch.utils._pytree.tree_leaves((args, kwargs)))
    if isinstance(model, torch.nn.Module):
        tensors += list(model.parameters()) + list(model.buffers())
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    fake = sum(map(is_fake, tensors))
    if fake_context is not None and fake < len(tensors):
        raise ValueError(
            f"{len(tensors) - fake} of the model's weights and inputs are real tensors, but fake mode is enabled: "
            "create the model and its inputs inside `with exporter.enable_fake_mode() as ctx:`, then export with "
            "ExportOptions(fake_context=ctx)."
        )
    if fake_context is None and fake:
        raise ValueError(
            f"{fake} of the model's weights and inputs are fake tensors: export them with "
            "ExportOptions(fake_context=ctx), where ctx comes from `with exporter.enable_fake_mode() as ctx:`."
        )


@contextlib.contextmanager
def _recording_checkpoints(paths: list[str], fake_mode: FakeTensorMode) -> Iterator[None]:
    """Remember checkpoint paths loaded in the block; safetensors files load as fake tensors."""
    original_load = torch.load

    @functools.wraps(original_load)
    def load(f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)):
            paths.append(os.path.abspath(f))
        return original_load(f, *args, **kwargs)  # fake under an active FakeTensorMode

    patches = [(torch, "load", load)]
    try:
        import safetensors.torch
    except ImportError:
        safetensors = None
    if safetensors is not None:

        def load_file(filename, device="cpu"):
            paths.append(os.path.abspath(filename))
            from exporter.output.external_data import read_safetensors_header

            with fake_mode:
                return {
                    name: torch.empty(entry.shape, dtype=entry.dtype)
                    for name, entry in read_safetensors_header(filename).items()
                }

        patches.append((safetensors.torch, "load_file", load_file))
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, replacement in patches:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
