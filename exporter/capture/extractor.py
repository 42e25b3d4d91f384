"""`FXGraphExtractor`: capture a model as an FX graph with torch.export, trying strategies in order."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import sympy
import torch

from exporter.capture import dynamic, packed_sequences, recurrent, vision
from exporter.capture.adapters import flatten_outputs
from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.diagnostics.locations import EXPORTER_ROOT, Frame, is_user_file, parse_stack_trace
from exporter.errors import is_out_of_memory


class _CallableModule(torch.nn.Module):
    """Wraps a plain function so torch.export can capture it."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


@dataclasses.dataclass
class CaptureAttempt:
    strategy: str
    seconds: float
    error: BaseException | None = None


@dataclasses.dataclass(frozen=True)
class Strategy:
    name: str
    capture: Callable[..., torch.export.ExportedProgram]


def _non_strict(model, args, kwargs, dynamic_shapes, asserts):
    return torch.export.export(
        model,
        args,
        kwargs,
        dynamic_shapes=dynamic_shapes,
        strict=False,
        prefer_deferred_runtime_asserts_over_guards=asserts,
    )


def _strict(model, args, kwargs, dynamic_shapes, asserts):
    return torch.export.export(
        model,
        args,
        kwargs,
        dynamic_shapes=dynamic_shapes,
        strict=True,
        prefer_deferred_runtime_asserts_over_guards=asserts,
    )


# torch.export.draft_export is deliberately not a fallback: on a data-dependent branch it
# specializes to the example input's path, which would export a silently wrong model.
STRATEGIES = (
    Strategy("torch.export(strict=False)", _non_strict),
    Strategy("torch.export(strict=True, TorchDynamo)", _strict),
)


@dataclasses.dataclass(frozen=True)
class Mode:
    """How a strategy captures a dynamic model whose example has a size of 0 or 1."""

    oblivious: bool  # size-oblivious reasoning: sizes 0/1 stay symbolic
    assumes: bool  # guards become runtime assertions (which the graph drops; noted by FXE0020)
    suffix: str
    loosens: bool = False  # named Dims refused for the sizes they allow as Dim.DYNAMIC (`dynamic.loosened`)


_PLAIN = Mode(False, False, "")
_LOOSENED = Mode(False, False, " with the refused Dims' ranges as the code allows", loosens=True)
_OBLIVIOUS_MODES = (
    Mode(True, False, " keeping sizes 0/1 symbolic"),
    Mode(True, True, " keeping sizes 0/1 symbolic, guards as assertions"),
    _PLAIN,
    _LOOSENED,
)
_DYNAMIC_MODES = (_PLAIN, Mode(False, True, " with guards as assertions"), _LOOSENED)


def is_constraint_violation(error: BaseException | None) -> bool:
    """torch.export refused dynamic shapes the code does not allow for (a named Dim's "Constraints violated")."""
    return (
        isinstance(error, torch._dynamo.exc.UserError)
        and error.error_type == torch._dynamo.exc.UserErrorType.CONSTRAINT_VIOLATION
    )


class GraphCaptureError(RuntimeError):
    """Every capture strategy failed; `location` is the user line the first failure points at."""

    def __init__(self, attempts: list[CaptureAttempt], location: list[Frame]) -> None:
        first = attempts[0].error
        super().__init__(f"Could not capture the model as an FX graph: {type(first).__name__}: {first}")
        self.attempts = attempts
        self.location = location


class FXGraphExtractor:
    """Turns a model and example inputs into a `torch.export.ExportedProgram`."""

    def __init__(self, strategies: tuple[Strategy, ...] = STRATEGIES) -> None:
        self.strategies = strategies
        self.attempts: list[CaptureAttempt] = []
        self.specializations: list[dynamic.Specialization] = []  # of the last strategy tried
        self.assumptions: list[sympy.Expr] = []  # what the graph assumes of the sizes (`Mode.assumes`), as bounds
        self.narrowings: list[dynamic.Narrowing] = []  # the model's lines that narrow a refused named Dim

    def generate_fx(
        self,
        model: torch.nn.Module | Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        dynamic_shapes: Any,
        ctx: DiagnosticContext,
        fake_mode: Any = None,
    ) -> torch.export.ExportedProgram:
        module = model if isinstance(model, torch.nn.Module) else _CallableModule(model)
        register_hf_pytrees(module)
        shapes = dynamic.requested(module, args, kwargs, dynamic_shapes)
        # Size-oblivious capture keeps example sizes 0 and 1 symbolic; where the model then cannot be
        # traced (e.g. broadcasting that needs to know a size is not 1), capture as torch.export does.
        # Its reasoning takes a symbolic size for neither 0 nor 1, and a named Dim whose range has them
        # then fails on PyTorch's own guards (a reshape's "seq != 1"): it is tried again with the guards
        # as assertions (`Mode.assumes`), as is a capture refused on guards of other sizes (a CNN's strided sizes
        # are not 1). torch.export still refuses one false at the example's sizes.
        if shapes is None:
            modes: tuple[Mode, ...] = (_PLAIN,)
        else:
            modes = _OBLIVIOUS_MODES if dynamic.has_size_0_or_1((args, kwargs)) else _DYNAMIC_MODES
        carried: list[dynamic.Specialization] = []  # where the code fixed a size 0/1 that size-oblivious capture kept
        for strategy in self.strategies:
            errors: list[BaseException] = []
            for mode in modes:
                if mode.assumes and not (errors and is_constraint_violation(errors[-1])):
                    continue
                spec = dynamic.loosened(shapes, errors) if mode.loosens else shapes
                if mode.loosens and spec is None:
                    continue
                name = strategy.name + mode.suffix
                start = time.perf_counter()
                try:
                    with (
                        _maybe(fake_mode),
                        _fake_tensor_cache(shapes is None),
                        _flat_outputs(module),
                        full_user_stacks(),
                        _tensor_meta_without_layout(),
                        packed_sequences.capturing(),
                        recurrent.capturing(),
                        vision.capturing(),
                        dynamic.capturing(shapes is not None, mode.oblivious) as fixed,
                    ):
                        fixed += carried
                        self.specializations = fixed
                        program = strategy.capture(module, args, kwargs, spec, mode.assumes)
                except Exception as e:  # each failure is recorded and the next strategy tried
                    if is_out_of_memory(e):
                        raise
                    errors.append(e)
                    attempt = CaptureAttempt(name, time.perf_counter() - start, e)
                    self.attempts.append(attempt)
                    ctx.report(
                        rules.GRAPH_CAPTURE,
                        Level.NOTE,
                        f"{name} failed: {type(e).__name__}: {_first_line(e)}",
                        stack=user_frames_of(e),
                        exception=e,
                        strategy=name,
                    )
                    continue
                # right only at the example size, or not even there (a squeeze of a size 1): capture as torch.export does
                if mode.oblivious and (
                    carried := dynamic.still_symbolic(program, fixed) or dynamic.squeezed_at_one(program)
                ):
                    ctx.report(
                        rules.GRAPH_CAPTURE,
                        Level.NONE,
                        f"{name}: the code fixes a size of 0 or 1; capturing again.",
                        strategy=name,
                    )
                    continue
                assumptions = dynamic.as_bounds(program, dynamic.assertions(program)) if mode.assumes else []
                if mode.assumes and not dynamic.bounds_only(assumptions, relations=mode.oblivious):
                    ctx.report(
                        rules.GRAPH_CAPTURE,
                        Level.NONE,
                        f"{name}: it assumes sizes, not bounds; refused.",
                        strategy=name,
                    )
                    continue
                if mode.loosens:  # the refusal stands where a Dim came out static or a line of the model narrowed it
                    dims = dynamic.requested_dims(program, dynamic_shapes)
                    by_model = [n for n in dynamic.narrowed(program, dims) if n.by_model]
                    if dynamic.specialized(program, dims) or by_model:
                        self.narrowings = self.narrowings or by_model
                        ctx.report(rules.GRAPH_CAPTURE, Level.NONE, f"{name}: the refusal stands.", strategy=name)
                        continue
                attempt = CaptureAttempt(name, time.perf_counter() - start)
                self.attempts.append(attempt)
                self.assumptions = assumptions
                ctx.report(rules.GRAPH_CAPTURE, Level.NONE, f"Captured the model with {name}.", strategy=name)
                return program
        location = next((user_frames_of(a.error) for a in self.attempts if user_frames_of(a.error)), [])
        raise GraphCaptureError(self.attempts, location)


def eager_error(
    model: torch.nn.Module | Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Exception | None:
    """What `model` raises when PyTorch runs it on copies of the example, if it raises: a capture failure that
    is the model's own. Its buffers (a training-mode BatchNorm's running statistics) are restored after."""
    buffers = dict(model.named_buffers()) if isinstance(model, torch.nn.Module) else {}
    saved = {name: buffer.clone() for name, buffer in buffers.items()}
    args, kwargs = torch.utils._pytree.tree_map_only(torch.Tensor, torch.clone, (args, kwargs))
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    except Exception as e:
        if is_out_of_memory(e):
            raise
        return e
    finally:
        with torch.no_grad():
            for name, buffer in buffers.items():
                buffer.copy_(saved[name])
    return None


def register_hf_pytrees(module: torch.nn.Module) -> None:
    """Let torch.export flatten Hugging Face cache objects (transformers registers ModelOutput only)."""
    transformers = sys.modules.get("transformers")
    if transformers is None or not isinstance(module, transformers.PreTrainedModel):
        return
    try:
        from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model
    except ImportError:  # older transformers register their caches themselves
        return
    register_cache_pytrees_for_model(module)


def user_frames_of(error: BaseException | None) -> list[Frame]:
    """User-code frames of an exception raised while tracing, innermost first.

    TorchDynamo reports the user line it stopped at in its message ("from user code: File ...");
    other failures carry it in their traceback.
    """
    if error is None:
        return []
    frames = [f for f in parse_stack_trace(str(error)) if f.is_user_code]
    if frames:
        return frames
    tb_frames = inspect.getinnerframes(error.__traceback__) if error.__traceback__ else []
    found = [
        Frame(f.filename, f.lineno, f.function, (f.code_context or [""])[0].strip())
        for f in reversed(tb_frames)
        if is_user_file(f.filename)
    ]
    if found or error.__cause__ is None:
        return found
    return user_frames_of(error.__cause__)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


@contextlib.contextmanager
def full_user_stacks() -> Iterator[None]:
    """Record every user frame in ``node.meta["stack_trace"]`` during non-strict capture.

    torch.export's non-strict tracer keeps only frames named ``forward``, so an op called from a
    helper function would be located at the helper's call site. This keeps the user's files'
    frames (and ``forward`` frames for context); TorchDynamo (strict) records them anyway. The
    frames are read from the live stack (`_KeptFrames`), not symbolized whole for every node.
    """
    tracer = torch.fx.proxy.TracerBase
    original, captured = tracer._filter_traceback_frames, torch.fx.proxy.CapturedTraceback

    def keep_user_frames(self, summary: traceback.StackSummary) -> traceback.StackSummary:
        frames = [f for f in summary if _kept(f.filename, f.name)]
        return traceback.StackSummary.from_list(frames) if frames else original(self, summary)

    tracer._filter_traceback_frames = keep_user_frames
    torch.fx.proxy.CapturedTraceback = _KeptFrames
    try:
        yield
    finally:
        tracer._filter_traceback_frames = original
        torch.fx.proxy.CapturedTraceback = captured


def _kept(filename: str, function: str) -> bool:
    """Whether `full_user_stacks` keeps a frame: the user's files, and ``forward`` outside the tracing."""
    return is_user_file(filename) or (function == "forward" and not _is_machinery(filename))


class _KeptFrames:
    """What `TracerBase.create_node` records of the stack (``CapturedTraceback.extract().summary()``, then
    `full_user_stacks`' filter): the frames that filter keeps, read from the live stack; the whole stack
    where it keeps none (the filter then falls back to torch's own). Symbolizing and reading the source
    lines of every frame for every node was 10 % of an 8-layer decoder's capture."""

    def __init__(self, summary: traceback.StackSummary) -> None:
        self._summary = summary

    @classmethod
    def extract(cls) -> _KeptFrames:
        stack = []
        frame = sys._getframe(1)
        while frame is not None:
            stack.append(frame)
            frame = frame.f_back
        stack.reverse()  # outermost first, as traceback.extract_stack
        kept = [f for f in stack if _kept(f.f_code.co_filename, f.f_code.co_name)]
        return cls(
            traceback.StackSummary.from_list(
                traceback.FrameSummary(f.f_code.co_filename, f.f_lineno, f.f_code.co_name, lookup_line=False)
                for f in kept or stack
            )
        )

    def summary(self) -> traceback.StackSummary:
        return self._summary


_MACHINERY = tuple(os.path.join(os.path.dirname(torch.__file__), d) for d in ("fx", "export", "_export", "_dynamo")) + (
    EXPORTER_ROOT,
)


@functools.lru_cache(maxsize=4096)
def _is_machinery(path: str) -> bool:
    """Frames of the tracing itself (torch.fx/export/dynamo, this package): never worth showing."""
    return os.path.abspath(path).startswith(_MACHINERY)


@contextlib.contextmanager
def _flat_outputs(module: torch.nn.Module) -> Iterator[None]:
    """Capture `module` with its outputs flattened (see `adapters.flatten_outputs`)."""
    original = module.forward

    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> list[Any]:
        return flatten_outputs(original(*args, **kwargs))

    had_own = "forward" in vars(module)
    module.forward = forward
    try:
        yield
    finally:
        if had_own:
            module.forward = original
        else:
            del module.forward


@contextlib.contextmanager
def _tensor_meta_without_layout() -> Iterator[None]:
    """``node.meta["tensor_meta"]`` without its memory format: finding it tries three layouts' contiguity on
    symbolic strides for every node (~9 % of an 8-layer decoder's capture), and nothing here reads it (the
    translation reads ``meta["val"]``)."""
    proxy_tensor = torch.fx.experimental.proxy_tensor
    original = proxy_tensor._extract_tensor_metadata
    proxy_tensor._extract_tensor_metadata = functools.partial(original, include_contiguity=False)
    try:
        yield
    finally:
        proxy_tensor._extract_tensor_metadata = original


def _fake_tensor_cache(enabled: bool) -> contextlib.AbstractContextManager[None]:
    """The fake-tensor cache on for a static capture only: with symbolic sizes its entries and hits
    rebuild every output's sizes and strides symbolically, which made an 8-layer decoder's capture
    10–25 % slower than running each op's meta function (`benchmarks/capture_time.py`)."""
    return torch._dynamo.config.patch(fake_tensor_cache_enabled=enabled)


@contextlib.contextmanager
def _maybe(context: Any) -> Iterator[None]:
    if context is None:
        yield
    else:
        with context:
            yield
