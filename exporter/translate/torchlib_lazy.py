"""Build torchlib's functions when an export first uses them, not when torchlib is imported.

Importing ``onnxscript.function_libs.torch_lib.ops`` compiles every ``@torch_op`` script function
(``onnxscript.script``) and computes every traced function's signature: about 0.15 s of a cold
export, for several hundred functions of which an export uses a handful. While `lazily_built()`
is active, torchlib's ``torch_op`` decorator creates `LazyOnnxFunction` and `LazyTracedOnnxFunction`
objects instead. They are still ``OnnxFunction`` / ``TracedOnnxFunction`` instances with the same
name, opset and function attributes; the expensive parts (``function_ir``, ``source`` and
``op_signature``) are built by onnxscript itself, the normal way, on first access. A script function
compiles against its module's globals at that time (a superset of those at its definition).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import onnxscript
from onnxscript import ir, values
from onnxscript.function_libs.torch_lib import registration

_script = onnxscript.script
_TracedOnnxFunction = values.TracedOnnxFunction
_created: weakref.WeakSet[values.Op] = weakref.WeakSet()  # every lazy function, for `build_all`


class LazyOnnxFunction(values.OnnxFunction):
    """A script function that ``onnxscript.script`` compiles on first use."""

    def __init__(
        self,
        opset: values.Opset,
        function: Callable,
        transform: Callable[[Callable], values.OnnxFunction],
        kwargs: dict[str, Any],
    ) -> None:
        values.Op.__init__(self, opset, function.__name__)
        self.function = function
        self.kwargs = kwargs
        self.traceable = False
        self._transform = transform
        functools.update_wrapper(self, function)
        _created.add(self)

    @functools.cached_property
    def compiled(self) -> values.OnnxFunction:
        """The function as ``onnxscript.script`` builds it (compiled on first access)."""
        return self._transform(self.function)

    @property
    def function_ir(self) -> ir.Function:
        return self.compiled.function_ir

    @property
    def source(self) -> str:
        return self.compiled.source

    @property
    def op_signature(self) -> ir.schemas.OpSignature | None:
        if self._signature is None:
            self._signature = self.compiled.op_signature
        return self._signature

    @op_signature.setter
    def op_signature(self, value: ir.schemas.OpSignature) -> None:
        self._signature = value


class LazyTracedOnnxFunction(values.TracedOnnxFunction):
    """A trace-only function whose signature is computed on first use."""

    def __init__(self, opset: values.Opset, func: Callable) -> None:
        values.Op.__init__(self, opset, func.__name__)
        self.func = func
        functools.update_wrapper(self, func)
        _created.add(self)

    @property
    def op_signature(self) -> ir.schemas.OpSignature | None:
        if self._signature is None:
            self._signature = _TracedOnnxFunction(self.opset, self.func).op_signature
        return self._signature

    @op_signature.setter
    def op_signature(self, value: ir.schemas.OpSignature) -> None:
        self._signature = value


def _lazy_script(
    opset: values.Opset | None = None, default_opset: values.Opset | None = None, **kwargs: Any
) -> Callable[[Callable], LazyOnnxFunction]:
    """``onnxscript.script`` that defers the compilation to first use."""
    transform = _script(opset, default_opset, **kwargs)  # checks the arguments now
    return lambda function: LazyOnnxFunction(opset or values.Opset("this", 1), function, transform, kwargs)


@contextlib.contextmanager
def _swapped() -> Iterator[None]:
    onnxscript.script, values.TracedOnnxFunction = _lazy_script, LazyTracedOnnxFunction
    try:
        yield
    finally:
        onnxscript.script, values.TracedOnnxFunction = _script, _TracedOnnxFunction


def supported() -> bool:
    """Whether torchlib's ``torch_op`` builds its functions through the names `lazily_built` swaps."""

    def probe(x):
        return x

    try:
        with _swapped():
            script = registration.torch_op("onnxlens::probe", registry=registration.Registry())(probe)
            traced = registration.torch_op("onnxlens::probe", registry=registration.Registry(), trace_only=True)(probe)
    except Exception:  # an onnxscript whose classes are built differently: build them eagerly
        return False
    return isinstance(script, LazyOnnxFunction) and isinstance(traced, LazyTracedOnnxFunction)


@contextlib.contextmanager
def lazily_built() -> Iterator[None]:
    """Within this block, torchlib's (and ``onnxscript.script``'s) functions are built on first use.

    With an onnxscript whose ``torch_op`` builds them some other way, they are built eagerly as usual.
    """
    if not supported():
        yield
        return
    with _swapped():
        yield


def build_all() -> None:
    """Build every lazily built function now (a process that forks exports calls this once)."""
    for function in list(_created):
        _ = function.op_signature  # a script function's is its compiled one's
