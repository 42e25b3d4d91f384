"""Human-readable diagnostics: ``file:line: level FXEnnnn message`` lines terminals make clickable."""

from __future__ import annotations

from exporter.diagnostics.context import DiagnosticContext
from exporter.diagnostics.rules import Level


def format_results(ctx: DiagnosticContext, min_level: Level = Level.WARNING) -> list[str]:
    lines = []
    for d in ctx.diagnostics:
        if d.level < min_level:
            continue
        where = f"{d.location.path}:{d.location.line}: " if d.location else ""
        lines.append(f"{where}{d.level.name.lower()} {d.rule.id} {d.message}")
    return lines
