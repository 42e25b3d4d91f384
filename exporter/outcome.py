"""What an export's outcome is, in one rule shared by the CLI, the SARIF log and the editor.

- **failed**: no usable model.
- **wrong**: a model exists but a check says it is wrong: a verification divergence (an FXE0021 error,
  which keeps the model and its reproducer), a generation folder whose check fails (an FXE0022 or FXE0023
  error: the folder is kept), an op that computes other numbers than PyTorch (an FXE0013
  warning: op-level debug, or a function the user registered, such as the quick fix's stub), or a lower
  precision's quality report below its bar (an FXE0023 warning: `min_token_agreement` not met, or an fp16
  model further from fp32 than PyTorch's own fp16 model).
- **degraded**: asked dynamic, came out static (an FXE0020 warning), or options that fix a dimension to a
  number (a spec such as ``{"x": {0: 2}}``): the graph accepts only those sizes. Not the second-size
  check's numerics warning (a static graph is as far from eager at those sizes): the headline says it.
- **verified**: verify ran and every output matched, or a generation export's greedy tokens are those of
  ``generate()`` (FXE0022's note).
- **exported**: none of the above.

Torch-free: the language server imports these names.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from exporter.constants import Prop
from exporter.diagnostics.rules import (
    ACCURACY_DIVERGENCE,
    DIMENSION_SPECIALIZED,
    GENERATION_DIVERGENCE,
    OP_LEVEL_DEBUGGING,
    QUANTIZATION_QUALITY,
    Level,
    Rule,
)

ASKED_DYNAMIC = "askedDynamic"  # FXE0020's note (a warning when all came out static): the dims asked dynamic
NUMERICS = "numerics"  # FXE0020's second-size verdict where a static graph differs from eager as much


class Kind(str, enum.Enum):
    FAILED = "failed"
    WRONG = "wrong"
    DEGRADED = "degraded"
    VERIFIED = "verified"
    EXPORTED = "exported"

    def __str__(self) -> str:
        return self.value

    @property
    def severity(self) -> str:
        """How the outcome is shown: ``error``, ``warning`` or ``info``."""
        return {Kind.FAILED: "error", Kind.WRONG: "error", Kind.DEGRADED: "warning"}.get(self, "info")


@dataclasses.dataclass(frozen=True)
class FixedDim:
    """An input dimension the exported graph accepts at one size only."""

    input: str
    dim: int
    size: int

    def __str__(self) -> str:
        return f"{self.input} dim {self.dim} = {self.size}"


@dataclasses.dataclass(frozen=True)
class Outcome:
    kind: Kind
    headline: str  # one line, in the user's words
    fixed: tuple[FixedDim, ...] = ()  # a degraded export's static dims

    @property
    def severity(self) -> str:
        return self.kind.severity

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "headline": self.headline,
            "severity": self.severity,
            "fixedDims": [dataclasses.asdict(d) for d in self.fixed],
        }


class _Location(Protocol):
    path: str
    line: int


class DiagnosticLike(Protocol):
    """What the rule reads of a result (`exporter.diagnostics.context.Diagnostic`)."""

    rule: Rule
    level: Level
    message: str
    properties: dict[str, Any]

    @property
    def location(self) -> _Location | None: ...


def decide(
    diagnostics: Sequence[DiagnosticLike],
    *,
    name: str | None = None,
    model: bool | None = None,
    failure: str = "",
    fixed_by_options: Sequence[FixedDim] = (),
) -> Outcome:
    """The outcome of the export of `name` (None: "the model") from its `diagnostics`.

    `model`: whether a model was written (None: the results say, as an export keeps its model only when
    its verification failed); `failure`: why it failed, if it did; `fixed_by_options`: dims its options fix
    to a number (`fixed_by_spec`)."""
    subject = name or "the model"
    errors = [d for d in diagnostics if d.level >= Level.ERROR]
    if model is None:
        model = all(_is(d, ACCURACY_DIVERGENCE) for d in errors)
    if not model:
        reason = failure or (f"{errors[0].rule.id} {errors[0].message}" if errors else "no model was written")
        return Outcome(Kind.FAILED, f"Export of {subject} failed: {_first_line(reason)}")
    wrong = [d for d in errors if _is(d, ACCURACY_DIVERGENCE) or _is(d, GENERATION_DIVERGENCE)]
    wrong += [
        d
        for d in diagnostics
        if (_is(d, OP_LEVEL_DEBUGGING) or _is(d, QUANTIZATION_QUALITY)) and d.level >= Level.WARNING
    ]
    if wrong:
        owner = f"{name}'s model" if name else "The model"
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        return Outcome(Kind.WRONG, f"{owner} is wrong: {_what_is_wrong(wrong[0])}{more}")
    dynamic = [d for d in diagnostics if _is(d, DIMENSION_SPECIALIZED)]
    numerics = [d for d in dynamic if d.properties.get(Prop.SECOND_SIZE_CHECK) == NUMERICS]
    dynamic = [d for d in dynamic if d not in numerics]
    if any(d.level == Level.WARNING for d in dynamic) or fixed_by_options:
        fixed = tuple(dict.fromkeys([*fixed_by_options, *_fixed_dims(dynamic)]))
        return Outcome(Kind.DEGRADED, _degraded(subject, dynamic, fixed), fixed)
    caveat = " (at other sizes as far from eager PyTorch as a static export there: FXE0020)" if numerics else ""
    verified = next((d for d in diagnostics if _is(d, ACCURACY_DIVERGENCE) and _verified(d)), None)
    if verified is not None:
        outputs = verified.properties["outputs"]
        worst = max((o.get(Prop.MAX_ABS_ERROR, 0.0) for o in outputs), default=0.0)
        count = f"{len(outputs)} output matches" if len(outputs) == 1 else f"{len(outputs)} outputs match"
        headline = f"Exported {subject}, verified in onnxruntime: {count} (max abs error {worst:.3g}){caveat}"
        return Outcome(Kind.VERIFIED, headline)
    generated = next((d for d in diagnostics if _is(d, GENERATION_DIVERGENCE) and _generation_passed(d)), None)
    if generated is not None:
        steps, batch = generated.properties["steps"], generated.properties["batch"]
        headline = f"Exported {subject} for generation, verified in onnxruntime: {steps} greedy tokens for {batch} prompts as generate()"
        return Outcome(Kind.VERIFIED, headline)
    return Outcome(Kind.EXPORTED, f"Exported {subject}{caveat}")


def failed(message: str, name: str | None = None) -> Outcome:
    """The outcome of an export that stopped before exporting (user code, a bad target or option)."""
    return decide([], name=name, model=False, failure=message)


def fixed_by_spec(spec: Any) -> list[FixedDim]:
    """The dims a ``dynamic_shapes`` spec fixes to a number (``{"x": {0: 2}}``; by position: "input 0")."""
    if not isinstance(spec, (dict, list, tuple)):
        return []
    inputs = spec.items() if isinstance(spec, dict) else ((f"input {i}", s) for i, s in enumerate(spec))
    return [
        FixedDim(str(name), int(dim), size)
        for name, dims in inputs
        for dim, size in _per_dim(dims)
        if isinstance(size, int) and not isinstance(size, bool) and str(dim).isdigit()
    ]


def _per_dim(dims: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(dims, dict):
        return dims.items()
    return enumerate(dims) if isinstance(dims, (list, tuple)) else ()


def _is(d: DiagnosticLike, rule: Rule) -> bool:
    return d.rule.id == rule.id


def _verified(d: DiagnosticLike) -> bool:
    """FXE0021's note that every output matched (the failure's note names the diverging outputs)."""
    return d.level == Level.NOTE and "outputs" in d.properties and "divergingOutputs" not in d.properties


def _generation_passed(d: DiagnosticLike) -> bool:
    return d.level == Level.NOTE and d.properties.get("generationCheck") == "passed"


def _fixed_dims(dynamic: Iterable[DiagnosticLike]) -> list[FixedDim]:
    keys = (Prop.INPUT, Prop.DIM, Prop.SIZE)
    return [FixedDim(*(d.properties[k] for k in keys)) for d in dynamic if all(k in d.properties for k in keys)]


def _degraded(subject: str, dynamic: Sequence[DiagnosticLike], fixed: Sequence[FixedDim]) -> str:
    summary = next((d for d in dynamic if d.level == Level.WARNING and ASKED_DYNAMIC in d.properties), None)
    if summary is not None:
        shapes = ", ".join(f"{n}[{', '.join(map(str, s))}]" for n, s in summary.properties[Prop.INPUT_SHAPES].items())
        asked = ", ".join(summary.properties[ASKED_DYNAMIC])
        return f"Exported {subject}, but its dimensions are all static: {shapes} (asked dynamic: {asked})"
    return f"Exported {subject}, but the graph accepts only these sizes: {', '.join(map(str, fixed))}"


def _what_is_wrong(d: DiagnosticLike) -> str:
    """Which output or op is wrong and where (``output 0 diverges at model.py:12 (floor_divide)``)."""
    where = f" at {os.path.basename(d.location.path)}:{d.location.line}" if d.location else ""
    op = _op_name(d.properties.get(Prop.FX_TARGET, ""))
    if _is(d, GENERATION_DIVERGENCE) or _is(d, QUANTIZATION_QUALITY):
        return f"{_first_line(d.message)}{where}"
    if _is(d, OP_LEVEL_DEBUGGING):
        registered = "the ONNX function registered for " if d.properties.get("custom") else ""
        return f"{registered}{op or 'an op'} computes other numbers than PyTorch{where}"
    diverging = d.properties.get("divergingOutputs") or []
    if len(diverging) > 1:
        outputs = f"outputs {', '.join(map(str, diverging))} diverge"
    else:
        outputs = f"output {diverging[0]} diverges" if diverging else "an output diverges"
    return f"{outputs}{where}" + (f" ({op})" if op else "")


def _op_name(target: str) -> str:
    """``aten.floor_divide.default`` → ``floor_divide``."""
    parts = target.split(".")
    return parts[1] if len(parts) == 3 else target


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else text
