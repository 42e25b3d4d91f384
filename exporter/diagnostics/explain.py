"""Capture failures in the user's terms: what the line does that an exported graph cannot, and what to do.

torch.export reports these with its internals ("Could not guard on data-dependent expression
Eq(u0, 1)"); `explain` turns the common ones into one sentence about the user's line plus the fix,
so the message can be acted on without the documentation. Unknown failures get None (the caller
keeps torch's message).
"""

from __future__ import annotations

import dataclasses
import linecache
import re

from exporter.diagnostics.code import code_of
from exporter.diagnostics.locations import Frame

_DATA_DEPENDENT = (
    "Could not guard on data-dependent expression",
    "Could not extract specialized integer from data-dependent expression",
    "Data-dependent branching",
    "data dependent control flow",
)
_EAGER_QUANTIZED = "torch.classes.quantized."  # the packed params of torch.ao.nn.quantized modules
_DYNAMIC_OUTPUT = "DynamicOutputShapeException"  # an operator whose output size its fake kernel cannot tell
_NO_FAKE_KERNEL = "UnsupportedOperatorException"  # an operator without a fake (meta) kernel, on symbolic sizes
_BRANCHING = re.compile(r"^(if|elif|while|assert)\b|\bif\b.*\belse\b")


@dataclasses.dataclass(frozen=True)
class Explanation:
    cause: str  # a short id: "data-dependent-branch", "data-dependent-value"
    message: str
    fix: str


def explain_eager(error: BaseException) -> Explanation:
    """The capture failed because the model itself raises `error` when PyTorch runs it."""
    first = (str(error).strip().splitlines() or [""])[0].rstrip(".:")
    return Explanation(
        "eager-failure",
        f"The model raises {type(error).__name__} when PyTorch runs it on the example inputs, before any export: "
        f"{first}.",
        "Fix the model or its example inputs so that PyTorch runs it, then export again.",
    )


def explain_script_modules(model: object) -> Explanation | None:
    """The capture failed and the model holds TorchScript modules (torch.jit.script or trace), which torch.export
    does not capture: the likely cause, whatever the error says."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return None
    names = [name for name, m in model.named_modules() if isinstance(m, torch.jit.ScriptModule)]
    names = [n for n in names if not any(n.startswith(f"{outer}.") for outer in names if outer)]  # outermost
    if not names:
        return None
    if names == [""]:
        which = "The model is"
    else:
        shown = ", ".join(f"'{n}'" for n in names[:3]) + (", …" if len(names) > 3 else "")
        which = f"Module {shown} is" if len(names) == 1 else f"Modules {shown} are"
    return Explanation(
        "torchscript-module",
        f"{which} TorchScript (torch.jit.script or torch.jit.trace), which "
        "torch.export cannot capture: it runs compiled code instead of the module's forward().",
        "Export the Python module it was made from: build the model without torch.jit.script/trace for the export.",
    )


def explain_var_keyword(model: object, names: list[str]) -> Explanation | None:
    """The capture with dynamic shapes failed and the tensors `names` reach the model's forward only through its
    ``**kwargs``, whose dimensions torch.export cannot make dynamic (it fails with an internal assertion)."""
    if not names:
        return None
    quoted = ", ".join(f"'{n}'" for n in names)
    return Explanation(
        "dynamic-var-keyword",
        f"{quoted} {'is' if len(names) == 1 else 'are'} not among {type(model).__name__}.forward's parameters: "
        f"{'it goes' if len(names) == 1 else 'they go'} to its **kwargs, and torch.export cannot make the "
        "dimensions of such an argument dynamic.",
        "Leave it out if forward ignores it, pass it under a parameter forward declares, or export with static shapes.",
    )


def explain(error: BaseException, location: list[Frame]) -> Explanation | None:
    """What `error` (a capture failure) means at the innermost user frame of `location`, if it is a known kind."""
    text = f"{type(error).__name__}: {error}"
    eager_quantized, dynamic_output, no_fake = (
        _EAGER_QUANTIZED in text,
        _DYNAMIC_OUTPUT in text,
        _NO_FAKE_KERNEL in text,
    )
    if not (eager_quantized or dynamic_output or no_fake or any(marker in text for marker in _DATA_DEPENDENT)):
        return None
    line = ""
    if location:
        line = (location[0].snippet or code_of(linecache.getline(location[0].path, location[0].line))).strip()
    code = f"`{line}`" if line else "This line"
    if eager_quantized:
        return Explanation(
            "eager-mode-quantization",
            f"{code} calls a module quantized in eager mode (torch.ao.quantization.quantize_dynamic or quantize): "
            "its packed weights are TorchScript objects that an exported graph cannot hold.",
            "Quantize with PT2E instead: torchao.quantization.pt2e's prepare_pt2e/convert_pt2e on "
            "torch.export.export(float_model, args).module() exports as QuantizeLinear/DequantizeLinear pairs "
            "that onnxruntime fuses; or export the float model and quantize the ONNX weights "
            "(export_for_generation(..., precision='int8'), onnxruntime.quantization.quantize_dynamic).",
        )
    if no_fake:
        operator = text.split(_NO_FAKE_KERNEL, 1)[1].lstrip(": ").split()[0] if ":" in text else "an operator"
        return Explanation(
            "no-fake-kernel",
            f"{code} calls {operator}, which has no fake (meta) implementation: torch.export cannot tell its output's "
            "shape without running it, as it must for sizes it keeps symbolic.",
            "Export with static shapes, or give the operator a fake implementation (torch.library.register_fake for "
            "a custom operator). For a model trained with fake quantization (QAT), convert it first (convert_pt2e).",
        )
    if dynamic_output:
        operator = str(error).strip().splitlines()[0] if str(error).strip() else "an operator"
        return Explanation(
            "data-dependent-output-size",
            f"{code} calls {operator}, whose output size PyTorch computes from the input's values only while "
            "running it (it has no rule for the size in advance), so an exported graph cannot hold it.",
            "Compute it outside forward() (a loss, for instance, on the exported model's outputs), or give the "
            "operator a fake implementation that states its output size (torch.library.register_fake).",
        )
    if _BRANCHING.search(line) or "Data-dependent branching" in text:
        return Explanation(
            "data-dependent-branch",
            f"{code} branches on a tensor's values, which an exported graph cannot follow: the graph is one "
            "fixed sequence of operations for every input.",
            "Use torch.cond(pred, true_fn, false_fn, operands) for a branch the graph must keep, "
            "torch._check(...) to state a condition that always holds, or decide it outside forward().",
        )
    return Explanation(
        "data-dependent-value",
        f"{code} needs to know a value computed from tensor data (a size, a count, a condition), which an "
        "exported graph cannot know in advance.",
        "State what always holds with torch._check(...) before this line (e.g. torch._check(n % 2 == 0) "
        "after n = x.item()), or compute the value outside forward() and pass it in.",
    )
