"""What the editor asks about a document: code lenses on targets, op-level debug traces inline
(inlay hints, hovers) and quick fixes."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from lsprotocol import types

from exporter.constants import Prop
from exporter.diagnostics import rules
from exporter.options import SETTINGS
from exporter.targets import TEXT_GENERATION
from onnxlens_server import fixes, shape_fixes, traces
from onnxlens_server.protocol import EXPORT_AFTER_FIX, EXPORT_TARGET, OPEN_SARIF_LOG
from onnxlens_server.request import target_key
from onnxlens_server.sarif_to_lsp import LineText
from onnxlens_server.state import States
from onnxlens_server.targets import Discovery

ReadText = Callable[[str], "str | None"]  # uri -> the document's text (None: unreadable)
RunParser = Callable[..., Awaitable[Any]]  # (function, *args) -> its result, computed in the parser process
_OP_LEVEL_DEBUG, _VERIFY = SETTINGS["op_level_debug"].editor_key, SETTINGS["verify"].editor_key


def code_lenses(uri: str, path: str, found: Discovery, states: States) -> list[types.CodeLens]:
    """Export (plain, with op-level debug, verified) on every target, Export for Generation on a text-generation
    target; its SARIF log once it has one. The exports go through the extension (`EXPORT_TARGET`), which
    shows their progress and result."""
    lenses = []
    for target in found.targets:
        at = types.Range(types.Position(target.decorator_line, 0), types.Position(target.decorator_line, 0))
        arguments = {"uri": uri, "target": target.name}
        if target.task == TEXT_GENERATION:  # the target's task decides how it exports
            lenses.append(
                types.CodeLens(
                    at,
                    types.Command(
                        title="$(export) Export for Generation", command=EXPORT_TARGET, arguments=[arguments]
                    ),
                )
            )
        else:
            lenses.append(
                types.CodeLens(
                    at, types.Command(title="$(export) Export to ONNX", command=EXPORT_TARGET, arguments=[arguments])
                )
            )
            lenses.append(
                types.CodeLens(
                    at,
                    types.Command(
                        title="Export with op-level debug",
                        command=EXPORT_TARGET,
                        arguments=[{**arguments, "options": {_OP_LEVEL_DEBUG: True}}],
                    ),
                )
            )
            lenses.append(
                types.CodeLens(
                    at,
                    types.Command(
                        title="Export and verify",
                        command=EXPORT_TARGET,
                        arguments=[{**arguments, "options": {_VERIFY: True}}],
                    ),
                )
            )
        state = states.get(target_key(path, target.name))
        if state and state.sarif:
            lenses.append(
                types.CodeLens(
                    at, types.Command(title="Open SARIF log", command=OPEN_SARIF_LOG, arguments=[state.sarif])
                )
            )
    return lenses


def inlay_hints(path: str, lines: types.Range, states: States, line_text: LineText) -> list[types.InlayHint]:
    """A trace summary at the end of each traced line in `lines`."""
    hints = []
    for trace in states.traces(path):
        if lines.start.line <= trace.line <= lines.end.line and (text := line_text(path, trace.line)) is not None:
            hints.append(traces.inlay_hint(trace, text))
    return hints


def hover(path: str, line: int, states: States) -> types.Hover | None:
    """The traces of `line`, op by op."""
    found = [t for t in states.traces(path) if t.line == line]
    if not found:
        return None
    return types.Hover(
        types.MarkupContent(types.MarkupKind.Markdown, "\n\n".join(traces.hover_markdown(t) for t in found))
    )


async def code_actions(
    uri: str, source: str, found: Discovery, params: types.CodeActionParams, read: ReadText, run: RunParser
) -> list[types.CodeAction]:
    """For each FXE0011 problem the exporter's generated ONNX function (when it has one) and a stub; for
    each FXE0020 problem the edits of its export target (`shape_fixes`, analysed in the parser process:
    `run`), each followed by a re-export of the target; an export target for the module class at the
    cursor. No action while the file does not parse: the last good discovery's lines may be stale, an
    edit would land wrong."""
    if found.syntax_error:
        return []
    end = len(source.splitlines())
    actions = []
    for diagnostic in params.context.diagnostics:
        data = diagnostic.data if isinstance(diagnostic.data, dict) else {}
        properties = data.get("properties") if isinstance(data.get("properties"), dict) else {}
        if diagnostic.code == rules.DIMENSION_SPECIALIZED.id:
            actions += await _shape_fixes(uri, source, diagnostic, data, properties, read, run)
        schema = properties.get(Prop.SCHEMA)
        if diagnostic.code != rules.NO_SYMBOLIC_FUNCTION.id or not schema:
            continue
        generated = fixes.register_generated(schema, properties.get(Prop.GENERATED_FUNCTION), source, found, end)
        if generated:
            actions.append(
                types.CodeAction(
                    title=f"Insert generated ONNX function for {schema.split('(')[0]} (verified)",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    edit=types.WorkspaceEdit(changes={uri: generated}),
                    is_preferred=True,
                )
            )
        if edits := fixes.register_stub(schema, found, end):
            actions.append(
                types.CodeAction(
                    title=f"Add an ONNX function stub for {schema.split('(')[0]} and register it",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    edit=types.WorkspaceEdit(changes={uri: edits}),
                    is_preferred=not generated,
                )
            )
    line = params.range.start.line
    for module in found.modules:
        if module.line <= line <= module.end_line and not _has_target_for(source, found, module.name):
            actions.append(
                types.CodeAction(
                    title=f"Create an export target for {module.name}",
                    kind=types.CodeActionKind.QuickFix,
                    edit=types.WorkspaceEdit(changes={uri: fixes.export_target_for(module, found)}),
                )
            )
    return actions


async def _shape_fixes(
    uri: str, source: str, diagnostic: types.Diagnostic, data: dict, properties: dict, read: ReadText, run: RunParser
) -> list[types.CodeAction]:
    target, target_uri = data.get("target"), data.get("targetUri")
    if not isinstance(target, str) or not isinstance(target_uri, str):
        return []
    target_source = source if target_uri == uri else read(target_uri)
    if target_source is None:
        return []
    actions = []
    for title, edits in await run(shape_fixes.fixes, target_source, target, properties):
        actions.append(
            types.CodeAction(
                title=title,
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[diagnostic],
                is_preferred=True,
                edit=types.WorkspaceEdit(changes={target_uri: edits}),
                command=types.Command(
                    title=f"Save and export {target}",
                    command=EXPORT_AFTER_FIX,
                    arguments=[{"uri": target_uri, "target": target}],
                ),
            )
        )
    return actions


def _has_target_for(source: str, found: Discovery, class_name: str) -> bool:
    lines = source.splitlines()
    pattern = re.compile(rf"\b{re.escape(class_name)}\s*\(")
    return any(pattern.search("\n".join(lines[t.line : t.end_line + 1])) for t in found.targets)
