"""Diagnostics of an export: rules, the per-export context, source locations and SARIF."""

from exporter.diagnostics.context import Diagnostic, DiagnosticContext, DiagnosticOptions
from exporter.diagnostics.rules import Level, Rule

__all__ = ["Diagnostic", "DiagnosticContext", "DiagnosticOptions", "Level", "Rule"]
