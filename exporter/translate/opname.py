"""`OpName`: a PyTorch operator's ``namespace::op_name.overload``, the key of the ONNX registry."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class OpName:
    """A PyTorch operator name: ``namespace::op_name.overload``."""

    namespace: str
    op_name: str
    overload: str = "default"

    @classmethod
    def from_name_parts(cls, namespace: str, op_name: str, overload: str | None = None) -> OpName:
        return cls(namespace, op_name, overload or "default")

    @classmethod
    def from_qualified_name(cls, qualified_name: str) -> OpName:
        namespace, rest = qualified_name.split("::", 1)
        op_name, _, overload = rest.partition(".")
        return cls.from_name_parts(namespace, op_name, overload)

    @classmethod
    def from_target(cls, target: Any) -> OpName | None:
        """The name of an FX ``call_function`` target, or None if it has no operator name."""
        if isinstance(target, torch._ops.OpOverload):
            return cls.from_qualified_name(target.name())
        if isinstance(target, torch._ops.HigherOrderOperator):
            return cls("higher_order", target.name())
        module, name = getattr(target, "__module__", None), getattr(target, "__name__", "")
        if callable(target) and (module in ("_operator", "math") or (module == "torch" and name.startswith("sym_"))):
            return cls(module, name)  # Python's operators on symbolic sizes, and torch.sym_min & co.
        return None

    def qualified_name(self) -> str:
        return f"{self.namespace}::{self.op_name}.{self.overload}"

    def __str__(self) -> str:
        return self.qualified_name()
