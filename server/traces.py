"""Op-level debug traces inline: inlay hints at the end of source lines, and hovers with the details.

They come from the FXE0013 (op-level debug) and FXE0021 (a failed verification's bisection) per-line
summaries of SARIF logs (`sarif_log.LineTrace`), which list every checked op of the line with its
numbers. The hover's Markdown uses codicons (``$(check)``), which the extension renders (``supportThemeIcons``).
"""

from __future__ import annotations

from lsprotocol import types

from exporter.constants import Prop
from onnxlens_server.sarif_log import LineTrace

HINT_WIDTH = 36  # characters: a hint must not run off the editor or into the next line's reading


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
            ", ".join("×".join(s) or "scalar" for s in op.get(key, []))
            for key in (Prop.INPUT_SHAPES, Prop.OUTPUT_SHAPES)
        )
        err = op.get(Prop.MAX_ABS_ERROR)
        tol = f"{op[Prop.ATOL]:g} + {op[Prop.RTOL]:g}·\\|x\\|" if op.get(Prop.ATOL) is not None else ""
        verdict = "$(check)" if op.get(Prop.OK) else f"$(error) {op.get(Prop.SKIPPED, 'mismatch')}"  # codicons
        rows.append(
            f"| `{op.get(Prop.FX_TARGET, '?')}` | {', '.join(op.get(Prop.ONNX_OP_TYPES, []))} | {shapes} | "
            f"{', '.join(op.get(Prop.OUTPUT_DTYPES, []))} | {'' if err is None else f'{err:.3g}'} | {tol} | {verdict} |"
        )
    title = f"**onnxlens {trace.title}**" + (f" — {trace.mismatches} mismatch(es)" if trace.mismatches else "")
    return "\n".join([title, "", *rows])
