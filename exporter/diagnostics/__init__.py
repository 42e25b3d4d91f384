"""Diagnostics of an export: rules, the per-export context, source locations and SARIF.

The names below are imported on first use, so the rules (`exporter.diagnostics.rules`) import
without torch: the language server reads their ids, names and levels.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Diagnostic": "exporter.diagnostics.context",
    "DiagnosticContext": "exporter.diagnostics.context",
    "DiagnosticOptions": "exporter.diagnostics.context",
    "Level": "exporter.diagnostics.rules",
    "Rule": "exporter.diagnostics.rules",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'exporter.diagnostics' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
