"""Saving weights as ONNX external data in ``<stem>_initializers/`` beside the model.

Weights come from a state dict or a checkpoint file and are written one tensor per file, tensor
by tensor: a safetensors checkpoint is copied byte range by byte range (never loaded), a
``torch.save`` checkpoint is memory-mapped. Saving a checkpoint larger than RAM therefore works.
The model file is renamed into place only once every weight is written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, Any

import onnx
import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import from_torch_dtype

from exporter.output.files import atomic_path, temporary_prefix, umask

WEIGHT_META = "onnxlens.weight"  # ir.Value.meta key marking graph inputs that stand for weights
WEIGHT_NAMES_META = "onnxlens.weight_names"  # ir.Model.meta key: every parameter/buffer name of the captured model

_SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}


@dataclasses.dataclass(frozen=True)
class SafetensorsEntry:
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int


def read_safetensors_header(path: str | os.PathLike) -> dict[str, SafetensorsEntry]:
    """The tensors of a safetensors file (names, dtypes, shapes, byte ranges) from its header alone."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    base = 8 + size
    return {
        name: SafetensorsEntry(
            _SAFETENSORS_DTYPES[e["dtype"]], tuple(e["shape"]), base + e["data_offsets"][0], base + e["data_offsets"][1]
        )
        for name, e in header.items()
    }


@dataclasses.dataclass
class WeightSource:
    """One tensor of a state dict or checkpoint, and how to write its bytes."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    write: Callable[[IO[bytes]], int]  # writes the raw little-endian bytes, returns the byte count


def weight_sources(state: Any) -> Iterator[WeightSource]:
    """The tensors of a state dict, a ``.safetensors`` file or a ``torch.save`` checkpoint (or a
    sequence of those, e.g. shards), one by one."""
    if isinstance(state, (list, tuple)):
        for part in state:
            yield from weight_sources(part)
        return
    if isinstance(state, dict):
        for name, tensor in state.items():
            if isinstance(tensor, torch.Tensor):
                yield _tensor_source(name, tensor)
        return
    path = os.fspath(state)
    if path.endswith(".safetensors"):
        for name, entry in read_safetensors_header(path).items():
            yield WeightSource(name, entry.dtype, entry.shape, _byte_range_writer(path, entry.start, entry.end))
        return
    checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    if isinstance(checkpoint, dict) and "state_dict" in checkpoint and isinstance(checkpoint["state_dict"], dict):
        checkpoint = checkpoint["state_dict"]
    yield from weight_sources(checkpoint)


def save_with_state_dict(
    model: ir.Model,
    model_proto: onnx.ModelProto,
    destination: str,
    state: dict[str, Any] | str | os.PathLike,
    *,
    strict: bool = True,
) -> None:
    """Write `model_proto` (the serialized `model`) with `state`'s tensors as external data in
    ``<stem>_initializers/``.

    With `strict`, every weight of the model must come from `state` and every tensor of `state`
    must be a weight of the exported model (as `nn.Module.load_state_dict` checks). Otherwise
    weights missing from `state` keep the model's own values, and unknown tensors are ignored.
    """
    weights = {v.name: v for v in model.graph.inputs if v.meta.get(WEIGHT_META)} | dict(model.graph.initializers)
    known_names = set(model.meta.get(WEIGHT_NAMES_META, ()))  # the captured model's parameters and buffers
    directory, filename = os.path.split(os.path.abspath(destination))
    folder = os.path.splitext(filename)[0] + "_initializers"
    os.makedirs(directory, exist_ok=True)
    _check_folder_is_ours(directory, folder, filename)
    model_proto = _copy(model_proto)
    kept_initializers = {t.name: t for t in model_proto.graph.initializer}
    del model_proto.graph.initializer[:]

    staging = tempfile.mkdtemp(dir=directory, prefix=temporary_prefix(folder))
    try:
        written: dict[str, onnx.TensorProto] = {}
        unknown: list[str] = []
        files: set[str] = set()
        for source in weight_sources(state):
            target = match_name(source.name, weights, written)
            if target is None:
                if match_name(source.name, dict.fromkeys(known_names | set(weights)), {}) is None:
                    unknown.append(source.name)
                continue
            _check_compatible(source, weights[target])
            file_name = _file_name(target, files)
            with open(os.path.join(staging, file_name), "wb") as f:
                length = source.write(f)
            written[target] = _external_tensor(target, source, f"{folder}/{file_name}", length)
        if unknown and strict:
            raise ValueError(
                f"The state dict has {len(unknown)} tensors that are not weights of the exported model: "
                f"{_names(unknown)}. Pass strict=False to ignore them."
            )
        missing = [
            name
            for name in weights
            if name not in written and (name not in kept_initializers or (strict and name in known_names))
        ]
        if missing:
            raise ValueError(
                f"The state dict has no tensor for {len(missing)} weights of the model: {_names(missing)}. "
                "(Non-persistent buffers are not in `model.state_dict()`; pass "
                "`{**model.state_dict(), **dict(model.named_buffers())}`."
                + (" To keep the model's own values for the others, pass strict=False.)" if strict else ")")
            )
        graph = model_proto.graph
        remaining_inputs = [i for i in graph.input if i.name not in written]
        del graph.input[:]
        graph.input.extend(remaining_inputs)
        graph.initializer.extend(t for name, t in kept_initializers.items() if name not in written)
        graph.initializer.extend(written.values())
        with atomic_path(destination) as tmp:
            onnx.save_model(model_proto, tmp)
            final = os.path.join(directory, folder)
            if os.path.exists(final):
                shutil.rmtree(final)
            os.chmod(staging, 0o777 & ~umask())  # as os.makedirs would create it (mkdtemp makes it private)
            os.replace(staging, final)
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging)


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy


def _check_folder_is_ours(directory: str, folder: str, filename: str) -> None:
    """Refuse to replace a weights folder that another model file in `directory` reads from."""
    if not os.path.isdir(os.path.join(directory, folder)):
        return
    for other in sorted(os.listdir(directory)):
        if other == filename or not other.endswith(".onnx"):
            continue
        try:
            proto = onnx.load(os.path.join(directory, other), load_external_data=False)
        except Exception:
            continue  # not a readable model: it cannot reference the folder
        if any(
            entry.key == "location" and entry.value.startswith(folder + "/")
            for tensor in proto.graph.initializer
            for entry in tensor.external_data
        ):
            raise FileExistsError(
                f"{os.path.join(directory, folder)} holds the weights of {other}; saving {filename} there "
                f"would change what {other} computes. Save to another folder or name."
            )


def _names(names: list[str]) -> str:
    return ", ".join(names[:8]) + (" …" if len(names) > 8 else "")


def match_name(name: str, weights: dict[str, Any], taken: dict[str, Any]) -> str | None:
    """The model weight a state-dict name stands for: the same name, or one that differs by a
    module prefix (``transformer.h.0.attn.bias`` ⇄ ``h.0.attn.bias``) when that is unambiguous."""
    if name in weights:
        return name
    candidates = [w for w in weights if w not in taken and (w.endswith("." + name) or name.endswith("." + w))]
    return candidates[0] if len(candidates) == 1 else None


def _tensor_source(name: str, tensor: torch.Tensor) -> WeightSource:
    tensor = tensor.detach()
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)

    def write(f: IO[bytes]) -> int:
        flat = tensor.contiguous().reshape(-1)  # copies a view's elements only, not its storage
        data = flat.view(torch.uint8).numpy() if flat.numel() else b""
        f.write(memoryview(data))
        return flat.numel() * flat.element_size()

    return WeightSource(name, tensor.dtype, tuple(tensor.shape), write)


def _byte_range_writer(path: str, start: int, end: int) -> Callable[[IO[bytes]], int]:
    def write(f: IO[bytes]) -> int:
        with open(path, "rb") as src:
            remaining, offset = end - start, start
            while remaining:
                sent = os.sendfile(f.fileno(), src.fileno(), offset, min(remaining, 1 << 30))
                if sent == 0:
                    raise OSError(f"{path} ended before byte {end}")
                offset += sent
                remaining -= sent
        return end - start

    return write


def _check_compatible(source: WeightSource, value: Any) -> None:
    expected_dtype = value.dtype
    expected_shape = tuple(d if isinstance(d, int) else -1 for d in value.shape) if value.shape is not None else None
    actual_dtype = from_torch_dtype(source.dtype)
    if expected_dtype is not None and actual_dtype != expected_dtype:
        raise ValueError(
            f"{source.name}: the state dict holds {actual_dtype.name}, the model expects {expected_dtype.name}"
        )
    if expected_shape is not None and expected_shape != source.shape:
        raise ValueError(
            f"{source.name}: the state dict holds shape {list(source.shape)}, the model expects {list(expected_shape)}"
        )


def _external_tensor(name: str, source: WeightSource, location: str, length: int) -> onnx.TensorProto:
    tensor = onnx.TensorProto(name=name, data_type=int(from_torch_dtype(source.dtype)), dims=list(source.shape))
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(length))):
        tensor.external_data.add(key=key, value=value)
    return tensor


def _file_name(name: str, taken: set[str]) -> str:
    """A unique file name for a weight: its name with unsafe characters replaced."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", name) or "tensor"
    candidate, n = base, 0
    while candidate in taken:
        n += 1
        candidate = f"{base}_{n}"
    taken.add(candidate)
    return candidate
