"""`OnnxRegistry`: which ONNX (onnxscript) function translates which PyTorch operator.

The defaults come from onnxscript's torchlib (``onnxscript.function_libs.torch_lib``) through its
stable framework API, plus `exporter.translate.ops` for the few complex variants torchlib lacks. Building that table imports and indexes several hundred functions, so it is
done once per process and shared; each `OnnxRegistry` only copies the small lookup lists.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable
from typing import Any

import torch

from exporter.constants import DEFAULT_OPSET_VERSION
from exporter.options import check_opset
from exporter.translate.opname import OpName

# The modules of exporter.translate.ops that translate what torchlib leaves to decomposition or lacks
_GAP_MODULES = (
    "arithmetic",
    "composites",
    "distances",
    "linalg",
    "order_statistics",
    "packed_rnn",
    "quantization",
    "search",
    "special",
    "vision",
    "window_reductions",
)


@dataclasses.dataclass(frozen=True)
class ONNXFunction:
    """An onnxscript function registered for one PyTorch operator."""

    onnx_function: Any  # onnxscript.OnnxFunction | onnxscript.TracedOnnxFunction
    op_full_name: str
    is_custom: bool = False
    is_complex: bool = False

    @property
    def name(self) -> str:
        return getattr(self.onnx_function, "name", repr(self.onnx_function))


@functools.cache
def _torchlib_table() -> dict[OpName, tuple[ONNXFunction, ...]]:
    """torchlib's functions keyed by operator name (built once per process).

    Read from torchlib's registration table itself: its framework API (``get_torchlib_ops``) also
    builds every function's ONNX IR, about 0.6 s of a cold export for functions an export never uses.
    """
    from exporter.translate.torchlib_lazy import lazily_built

    with lazily_built():  # compiling them all would cost ~0.15 s; an export uses a handful
        from onnxscript.function_libs.torch_lib import ops, registration  # importing ops registers them

        from exporter.translate.ops import complex as complex_ops
        from exporter.translate.ops import corrections

        gaps = [importlib.import_module(f"exporter.translate.ops.{name}") for name in _GAP_MODULES]

    del ops
    table: dict[OpName, list[ONNXFunction]] = {}
    for qualified_name, functions in registration.default_registry.items():
        if qualified_name.startswith("internal::"):  # torchlib's own helpers, not PyTorch operators
            continue
        name = OpName.from_qualified_name(qualified_name)
        for function in functions.overloads:
            function = corrections.FUNCTIONS.get(name, function)  # where torchlib computes something else
            table.setdefault(name, []).append(ONNXFunction(function, qualified_name))
        for function in functions.complex:
            table.setdefault(name, []).append(ONNXFunction(function, qualified_name, is_complex=True))
    for module in gaps:
        for name, function in module.FUNCTIONS.items():
            table.setdefault(name, [ONNXFunction(function, name.qualified_name())])
    for name, function in complex_ops.FUNCTIONS.items():  # gaps torchlib leaves for complex inputs
        if not any(f.is_complex for f in table.get(name, [])):
            table.setdefault(name, []).append(ONNXFunction(function, name.qualified_name(), is_complex=True))
    return {name: tuple(fns) for name, fns in table.items()}


class OnnxRegistry:
    """Registry of ONNX functions for PyTorch operators, pre-filled from onnxscript's torchlib.

    Custom functions registered with `register_op` take precedence over the defaults.
    """

    def __init__(self, opset_version: int = DEFAULT_OPSET_VERSION) -> None:
        self._opset_version = check_opset(opset_version)
        self._registry: dict[OpName, list[ONNXFunction]] = {name: list(fns) for name, fns in _torchlib_table().items()}
        self._supported: frozenset[Callable] | None = None

    @property
    def opset_version(self) -> int:
        """The ONNX default-domain opset of an export whose `ExportOptions.opset_version` is None
        (`ExportOptions.target_opset`)."""
        return self._opset_version

    @opset_version.setter
    def opset_version(self, value: int) -> None:
        self._opset_version = check_opset(value)

    def register_op(
        self,
        function: Any,
        namespace: str,
        op_name: str,
        overload: str | None = None,
        is_complex: bool = False,
    ) -> None:
        """Register an onnxscript function for ``namespace::op_name.overload``; it wins over defaults."""
        name = OpName.from_name_parts(namespace, op_name, overload)
        fn = ONNXFunction(function, name.qualified_name(), is_custom=True, is_complex=is_complex)
        self._registry.setdefault(name, []).insert(0, fn)
        self._supported = None

    def get_op_functions(self, namespace: str, op_name: str, overload: str | None = None) -> list[ONNXFunction] | None:
        """The functions registered for exactly this operator, custom first; None if there are none."""
        fns = self._registry.get(OpName.from_name_parts(namespace, op_name, overload))
        return list(fns) if fns else None

    def is_registered_op(self, namespace: str, op_name: str, overload: str | None = None) -> bool:
        return self.get_op_functions(namespace, op_name, overload) is not None

    def lookup(self, name: OpName) -> tuple[list[ONNXFunction], bool]:
        """Functions for `name`, falling back to its default overload.

        Returns the functions and whether the fallback was used.
        """
        fns = self._registry.get(name)
        if fns:
            return list(fns), False
        fallback = self._registry.get(dataclasses.replace(name, overload="default"))
        if fallback and name.overload != "default":
            return list(fallback), True
        return [], False

    def supported_targets(self) -> frozenset[Callable]:
        """The torch operator overloads that have at least one ONNX function."""
        if self._supported is None:
            self._supported = _resolve_targets(frozenset(self._registry))
        return self._supported

    def __repr__(self) -> str:
        return f"OnnxRegistry(opset_version={self._opset_version}, ops={len(self._registry)})"


@functools.lru_cache(maxsize=8)
def _resolve_targets(names: frozenset[OpName]) -> frozenset[Callable]:
    targets: set[Callable] = set()
    for name in names:
        if name.namespace in ("_operator", "math", "torch"):  # functions, not OpOverloads
            continue
        packet = getattr(getattr(torch.ops, name.namespace, None), name.op_name, None)
        overload = getattr(packet, name.overload, None) if packet is not None else None
        if isinstance(overload, torch._ops.OpOverload):
            targets.add(overload)
    return frozenset(targets)


_DEFAULT_REGISTRY: OnnxRegistry | None = None


def default_registry() -> OnnxRegistry:
    """The shared registry used when the options give none (built once per process)."""
    global _DEFAULT_REGISTRY
    if _DEFAULT_REGISTRY is None:
        _DEFAULT_REGISTRY = OnnxRegistry()
    return _DEFAULT_REGISTRY
