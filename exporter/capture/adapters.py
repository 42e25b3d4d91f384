"""Input/output adapters: PyTorch's nested inputs and outputs ⇄ the flat tensor lists of ONNX.

The steps are recorded at export time and replayed by `ExportOutput.adapt_torch_inputs_to_onnx`
and `ExportOutput.adapt_torch_outputs_to_onnx`.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
import torch.utils._pytree as pytree

from exporter.diagnostics.locations import Frame


@runtime_checkable
class InputAdaptStep(Protocol):
    def apply(self, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Sequence[Any], dict[str, Any]]: ...


@runtime_checkable
class OutputAdaptStep(Protocol):
    def apply(self, outputs: Any) -> Any: ...


@dataclasses.dataclass
class FlattenInputStep:
    """Flatten (args, kwargs) the way torch.export did, checking the structure matches the export's."""

    in_spec: pytree.TreeSpec

    def apply(self, args, kwargs):
        kwarg_names = self.in_spec.child(1).context if self.in_spec.num_children == 2 else []
        unknown = set(kwargs) - set(kwarg_names)
        if unknown:
            raise ValueError(
                f"Unexpected keyword inputs {sorted(unknown)}; the model was exported with {list(kwarg_names)}."
            )
        ordered = {name: kwargs[name] for name in kwarg_names if name in kwargs}
        leaves, spec = pytree.tree_flatten((tuple(args), ordered))
        if spec != self.in_spec:
            raise ValueError(
                "Model inputs incompatible with the format that was exported.\n"
                f"Expected: {self.in_spec}\nActual: {spec}"
            )
        return leaves, {}


@dataclasses.dataclass
class KeepGraphInputsStep:
    """Keep the leaves that are ONNX graph inputs; Python numbers and strings were baked in as constants."""

    keep: tuple[bool, ...]

    def apply(self, args, kwargs):
        if len(args) != len(self.keep):
            raise ValueError(f"Expected {len(self.keep)} flattened inputs, got {len(args)}.")
        return [a for a, k in zip(args, self.keep) if k], kwargs


class ConvertComplexToRealStep:
    """Complex tensors become their real representation (trailing dimension of 2)."""

    def apply(self, args, kwargs):
        return [_to_real(a) for a in args], kwargs


class FlattenOutputStep:
    """Nested outputs (tuples, dicts, dataclasses, Hugging Face ModelOutput and caches) → leaves."""

    def apply(self, outputs):
        return flatten_outputs(outputs)


@dataclasses.dataclass
class KeepGraphOutputsStep:
    """Keep the leaves that are ONNX graph outputs (non-tensor outputs are not)."""

    keep: tuple[bool, ...]

    def apply(self, outputs):
        if len(outputs) != len(self.keep):
            raise ValueError(f"Expected {len(self.keep)} flattened outputs, got {len(outputs)}.")
        return [o for o, k in zip(outputs, self.keep) if k]


class ConvertComplexToRealOutputStep:
    def apply(self, outputs):
        return [_to_real(o) for o in outputs]


class InputAdapter:
    def __init__(self, steps: list[InputAdaptStep] | None = None) -> None:
        self.steps = list(steps or [])

    def append_step(self, step: InputAdaptStep) -> None:
        self.steps.append(step)

    def apply(self, *args: Any, **kwargs: Any) -> Sequence[Any]:
        for step in self.steps:
            args, kwargs = step.apply(args, kwargs)
        assert not kwargs
        return args


class OutputAdapter:
    def __init__(self, steps: list[OutputAdaptStep] | None = None) -> None:
        self.steps = list(steps or [])

    def append_step(self, step: OutputAdaptStep) -> None:
        self.steps.append(step)

    def apply(self, outputs: Any) -> Sequence[Any]:
        for step in self.steps:
            outputs = step.apply(outputs)
        return outputs


def flatten_outputs(outputs: Any) -> list[Any]:
    """The leaves of a model's outputs: pytree containers and dataclasses are opened, None dropped.

    The exporter captures the model with this applied to its outputs, so plain dataclasses need
    no pytree registration. Numbers inside other registered objects (caches) are not outputs: their
    flattening may keep a Python int in its context but a symbolic one as a leaf (a sliding-window
    cache's length), so eager and captured outputs would flatten to different counts.
    """
    if outputs is None:
        return []
    if (
        dataclasses.is_dataclass(outputs)
        and not isinstance(outputs, type)
        and type(outputs) not in pytree.SUPPORTED_NODES
    ):
        return [leaf for f in dataclasses.fields(outputs) for leaf in flatten_outputs(getattr(outputs, f.name))]
    children, _ = pytree.tree_flatten(outputs, is_leaf=lambda x: x is not outputs)
    if len(children) == 1 and children[0] is outputs:
        return [outputs]
    if not isinstance(outputs, (tuple, list, dict)):
        children = [c for c in children if not isinstance(c, _NUMBERS)]
    return [leaf for child in children for leaf in flatten_outputs(child)]


_NUMBERS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)


class UnsupportedOutputError(TypeError):
    """The model returns something that is neither a tensor nor a number (e.g. a string)."""

    def __init__(self, message: str, stack: list[Frame]) -> None:
        super().__init__(message)
        self.stack = stack


def check_outputs(program: torch.export.ExportedProgram, model: Callable[..., Any]) -> None:
    """Raise `UnsupportedOutputError` (located at the model's return) for outputs ONNX cannot hold.

    Tensors and Python numbers (graph constants) are fine; anything else — a string, a dtype —
    would silently vanish from the ONNX model's outputs, and a model returning nothing would have none.
    """
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    specs = program.graph_signature.output_specs
    user_outputs = [
        a for a, s in zip(output_node.args[0], specs) if s.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT
    ]
    if not user_outputs:
        raise UnsupportedOutputError(
            "The model returns no tensor (None, or containers without one): an ONNX model needs an output. Return "
            "what forward computes; an input it changes in place (x.mul_(2)) is not an output unless returned.",
            return_frames(model),
        )
    for i, value in enumerate(user_outputs):
        if not isinstance(value, (torch.fx.Node, int, float, bool)):
            raise UnsupportedOutputError(
                f"The model returns a {type(value).__name__} ({value!r:.60}) as output {i}: an ONNX model can only "
                "return tensors and numbers (in tuples, lists, dicts or dataclasses). Return it outside "
                "forward, or as a tensor.",
                return_frames(model, value),
            )


def return_frames(model: Callable[..., Any], value: Any = None) -> list[Frame]:
    """Where `model`'s forward returns `value`: its only ``return`` statement (or the only one that
    spells `value` literally), else its ``def`` line."""
    forward = model.forward if isinstance(model, torch.nn.Module) else model
    forward = inspect.unwrap(getattr(forward, "__func__", forward))
    try:
        lines, start = inspect.getsourcelines(forward)
        path = inspect.getsourcefile(forward)
    except (OSError, TypeError):
        return []
    if path is None:
        return []
    tree = ast.parse(textwrap.dedent("".join(lines)))
    function = tree.body[0]
    returns = [n for n in _own_nodes(function) if isinstance(n, ast.Return)]
    literal = [r for r in returns if any(isinstance(c, ast.Constant) and c.value == value for c in ast.walk(r))]
    returns = literal if len(literal) == 1 else returns
    line = start + (returns[0].lineno if len(returns) == 1 else function.lineno) - 1
    return [Frame(path, line, forward.__name__, lines[line - start].strip())]


def _own_nodes(function: ast.AST):
    """The nodes of `function`'s body, not those of functions or classes nested in it."""
    for child in ast.iter_child_nodes(function):
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield from _own_nodes(child)


def is_graph_io(value: Any) -> bool:
    return isinstance(value, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool))


def _to_real(value: Any) -> Any:
    return torch.view_as_real(value) if isinstance(value, torch.Tensor) and value.is_complex() else value
