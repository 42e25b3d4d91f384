"""The diagnostics context: every stage of an export reports here."""

from __future__ import annotations

import dataclasses
import logging
import traceback
from typing import Any

import torch

from exporter.constants import Prop
from exporter.diagnostics.locations import Frame, stack_of
from exporter.diagnostics.rules import ALL_RULES, Level, Rule
from exporter.diagnostics.torch_logs import LogRecord
from exporter.options import DiagnosticOptions

logger = logging.getLogger("exporter")
logger.addHandler(logging.NullHandler())


@dataclasses.dataclass
class Diagnostic:
    """One result: a rule, a level, a message, where, and the numbers."""

    rule: Rule
    level: Level
    message: str
    stack: list[Frame] = dataclasses.field(default_factory=list)
    properties: dict[str, Any] = dataclasses.field(default_factory=dict)
    exception: str | None = None

    @property
    def location(self) -> Frame | None:
        """The primary location: the innermost frame of user code."""
        return self.stack[0] if self.stack else None


class DiagnosticContext:
    """Collects the diagnostics of one export."""

    def __init__(self, options: DiagnosticOptions | None = None) -> None:
        self.options = options or DiagnosticOptions()
        self.diagnostics: list[Diagnostic] = []
        self.rules: tuple[Rule, ...] = ALL_RULES
        self.timings: dict[str, float] = {}  # seconds per export stage (in the SARIF invocation)
        self.logs: list[LogRecord] = []  # torch's log records and warnings during the export

    def wants(self, level: Level) -> bool:
        """Whether a result at `level` is recorded at the configured verbosity."""
        return level >= self.options.verbosity_level or level >= Level.WARNING

    def report(
        self,
        rule: Rule,
        level: Level,
        message: str,
        *,
        node: torch.fx.Node | None = None,
        stack: list[Frame] | None = None,
        exception: BaseException | None = None,
        **properties: Any,
    ) -> Diagnostic | None:
        """Record a result (if the verbosity wants it) and return it."""
        if level == Level.WARNING and self.options.warnings_as_errors:
            level = Level.ERROR
            properties["warningAsError"] = True
        if not self.wants(level):
            return None
        if node is not None:
            stack = stack if stack is not None else stack_of(node)
            properties = {**node_properties(node), **properties}
        diagnostic = Diagnostic(
            rule,
            level,
            message,
            stack or [],
            properties,
            "".join(traceback.format_exception(exception)) if exception is not None else None,
        )
        self.diagnostics.append(diagnostic)
        logger.log(level, "%s %s", rule.id, message)
        return diagnostic

    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.level == Level.ERROR]


def node_properties(node: torch.fx.Node) -> dict[str, Any]:
    """Names that identify an FX node: its name, target and nn.Module path."""
    props: dict[str, Any] = {Prop.FX_NODE: node.name, Prop.FX_TARGET: str(node.target), **io_properties(node)}
    module_stack = node.meta.get("nn_module_stack")
    if module_stack:
        path, cls = list(module_stack.values())[-1]
        props[Prop.MODULE_PATH] = path
        props[Prop.MODULE_CLASS] = cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))
    return props


def io_properties(node: torch.fx.Node) -> dict[str, Any]:
    """Shapes and dtypes of an FX node's tensor inputs and outputs."""

    def describe(val: Any) -> tuple[list, str] | None:
        if isinstance(val, torch.Tensor):
            return [str(d) for d in val.shape], str(val.dtype).removeprefix("torch.")
        return None

    ins = [describe(a.meta.get("val")) for a in node.all_input_nodes]
    val = node.meta.get("val")
    outs = [describe(v) for v in (val if isinstance(val, (list, tuple)) else [val])]
    return {
        Prop.INPUT_SHAPES: [d[0] for d in ins if d],
        Prop.INPUT_DTYPES: [d[1] for d in ins if d],
        Prop.OUTPUT_SHAPES: [d[0] for d in outs if d],
        Prop.OUTPUT_DTYPES: [d[1] for d in outs if d],
    }
