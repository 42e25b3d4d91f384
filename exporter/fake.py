"""Fake mode: export models without allocating their weights."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any


@dataclasses.dataclass
class ONNXFakeContext:
    """What `enable_fake_mode` yields: the fake tensor mode and the checkpoints loaded under it."""

    fake_mode: Any
    state_dict_paths: tuple[str, ...] = ()


@contextlib.contextmanager
def enable_fake_mode() -> Iterator[ONNXFakeContext]:
    """Create models and inputs as fake tensors inside this block (models larger than memory)."""
    raise NotImplementedError(
        "enable_fake_mode is not implemented yet in onnxlens (tracked as the fake-mode issue); "
        "export with real tensors for now."
    )
    yield  # pragma: no cover
