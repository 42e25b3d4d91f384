"""Op-level debug traces inline: inlay hints at the end of source lines, and hovers with the details.

They come from the FXE0013 (op-level debug) and FXE0021 (a failed verification's bisection) per-line
summaries of SARIF logs (``properties.aggregate == "sourceLine"``), which list every checked op of
the line with its numbers. The hover's Markdown
uses codicons (``$(check)``), which the extension renders (``supportThemeIcons``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lsprotocol import types

from onnxlens_server.sarif_to_lsp import artifact_path, line_of


_TITLES = {"FXE0013": "op-level debug", "FXE0021": "verification in onnxruntime"}  # rules with per-line traces
HINT_WIDTH = 36  # characters: a hint must not run off the editor or into the next line's reading


@dataclasses.dataclass(frozen=True)
class LineTrace:
    path: str
    line: int  # 0-based
    ops: list[dict[str, Any]]
    op_types: list[str]
    max_abs_error: float
    mismatches: int
    title: str = "op-level debug"


def line_traces(log: dict[str, Any]) -> list[LineTrace]:
    traces = []
    for run in log.get("runs", []):
        for result in run.get("results", []):
            props = result.get("properties", {})
            if result.get("ruleId") not in _TITLES or props.get("aggregate") != "sourceLine" or not result.get("locations"):
                continue
            path = artifact_path(result["locations"][0], run)
            if path is not None:
                traces.append(
                    LineTrace(path, line_of(result["locations"][0]), props.get("ops", []), props.get("onnxOpTypes", []),
                              props.get("maxAbsError", 0.0), props.get("mismatches", 0), _TITLES[result["ruleId"]])
                )
    return traces


def inlay_hint(trace: LineTrace, line_text: str) -> types.InlayHint:
    """A short label at the line's end, the worst error first; the hover (also its tooltip) has the details."""
    return types.InlayHint(
        position=types.Position(trace.line, len(line_text.rstrip("\r\n"))),
        label=hint_label(trace),
        kind=types.InlayHintKind.Type,
        padding_left=True,
        tooltip=types.MarkupContent(types.MarkupKind.Markdown, hover_markdown(trace)),
    )


def hint_label(trace: LineTrace, width: int = HINT_WIDTH) -> str:
    """``Δ 2e-07 · Gemm, Sigmoid`` or ``⚠ 2 ops off · Δ 0.89 · Mul``: at most `width` characters,
    the op types cut first."""
    head = f"⚠ {trace.mismatches} op{'s' if trace.mismatches > 1 else ''} off · " if trace.mismatches else ""
    head += f"Δ {trace.max_abs_error:.2g}"
    ops = ""
    for i, op_type in enumerate(trace.op_types):
        more = f" +{len(trace.op_types) - i - 1}" if i < len(trace.op_types) - 1 else ""
        candidate = f"{ops}{', ' if ops else ''}{op_type}"
        if len(f"{head} · {candidate}{more}") > width:
            ops = f"{ops} +{len(trace.op_types) - i}" if ops else ""
            break
        ops = candidate
    return f"{head} · {ops}" if ops else head


def hover_markdown(trace: LineTrace) -> str:
    rows = ["| PyTorch op | ONNX | shapes | dtype | max abs err | tolerance | |", "|---|---|---|---|---|---|---|"]
    for op in trace.ops:
        shapes = " → ".join(
            ", ".join("×".join(s) or "scalar" for s in op.get(key, [])) for key in ("inputShapes", "outputShapes")
        )
        err = op.get("maxAbsError")
        tol = f"{op['atol']:g} + {op['rtol']:g}·\\|x\\|" if op.get("atol") is not None else ""
        verdict = "$(check)" if op.get("ok") else f"$(error) {op.get('skipped', 'mismatch')}"  # codicons, not emoji
        rows.append(
            f"| `{op.get('fxTarget', '?')}` | {', '.join(op.get('onnxOpTypes', []))} | {shapes} | "
            f"{', '.join(op.get('outputDtypes', []))} | {'' if err is None else f'{err:.3g}'} | {tol} | {verdict} |"
        )
    title = f"**onnxlens {trace.title}**" + (f" — {trace.mismatches} mismatch(es)" if trace.mismatches else "")
    return "\n".join([title, "", *rows])
