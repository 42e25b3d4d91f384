"""What the last export of each target left: its problems (by file), inline traces, output files and
its parsed SARIF log."""

from __future__ import annotations

import dataclasses
from typing import Any

from lsprotocol import types
from pygls.uris import to_fs_path

from onnxlens_server.sarif_log import LineTrace, SarifLog


@dataclasses.dataclass
class TargetState:
    diagnostics: dict[str, list[types.Diagnostic]] = dataclasses.field(default_factory=dict)  # key -> problems
    traces: list[LineTrace] = dataclasses.field(default_factory=list)
    sarif: str | None = None
    onnx: str | None = None
    log: SarifLog | None = None  # the log at `sarif`, parsed when the export's result arrived
    outcome: dict[str, Any] | None = None  # the export's (`exporter.outcome.Outcome.to_json`); a wrong one has a model
    notebook: Any = None  # the `notebooks.Notebook` exported (its cells' map), for a notebook's target


class States:
    """Per-target state, by target key (`job.target_key`)."""

    def __init__(self) -> None:
        self._by_target: dict[str, TargetState] = {}

    def get(self, key: str) -> TargetState | None:
        return self._by_target.get(key)

    def replace(self, key: str, state: TargetState) -> set[str]:
        """Set a target's state; the files whose problems changed (the old state's and the new one's)."""
        old = self._by_target.get(key, TargetState())
        self._by_target[key] = state
        return set(old.diagnostics) | set(state.diagnostics)

    def diagnostics(self, path: str) -> list[types.Diagnostic]:
        """Every target's problems in `path`."""
        return [d for state in self._by_target.values() for d in state.diagnostics.get(path, [])]

    def traces(self, path: str | None) -> list[LineTrace]:
        return [t for state in self._by_target.values() for t in state.traces if t.path == path]

    def clear(self, keys: list[str]) -> set[str]:
        """Remove every target's problems and traces in the documents `keys` (stale); those that had some."""
        cleared = set()
        for state in self._by_target.values():
            for key in keys:
                if state.diagnostics.pop(key, None):
                    cleared.add(key)
            cleared |= {t.path for t in state.traces if t.path in keys}
            state.traces = [t for t in state.traces if t.path not in keys]
        return cleared

    def follow_edits(self, path: str, changes: list[tuple[int, int]]) -> bool:
        """Move `path`'s problems and traces with edits above them: `changes` are (last line replaced,
        lines added) of each edit, in order. True if a problem moved."""

        def moved(line: int) -> int:
            for last, added in changes:
                if line > last:
                    line += added
            return line

        def move_range(r: types.Range) -> types.Range:
            return types.Range(
                types.Position(moved(r.start.line), r.start.character),
                types.Position(moved(r.end.line), r.end.character),
            )

        changed = False
        for state in self._by_target.values():
            for diagnostic in state.diagnostics.get(path, []):
                if moved(diagnostic.range.start.line) != diagnostic.range.start.line:
                    diagnostic.range = move_range(diagnostic.range)
                    changed = True
            for diagnostics in state.diagnostics.values():
                for info in (
                    i for d in diagnostics for i in d.related_information or [] if to_fs_path(i.location.uri) == path
                ):
                    line = info.location.range.start.line
                    info.location.range = move_range(info.location.range)
                    info.message = info.message.replace(f":{line + 1})", f":{moved(line) + 1})")  # "forward (m.py:26)"
            state.traces = [dataclasses.replace(t, line=moved(t.line)) if t.path == path else t for t in state.traces]
        return changed


def edit_changes(params: types.DidChangeTextDocumentParams) -> list[tuple[int, int]]:
    """(last line replaced, lines added) of each incremental edit, for `States.follow_edits`."""
    return [
        (c.range.end.line, c.text.count("\n") - (c.range.end.line - c.range.start.line))
        for c in params.content_changes
        if isinstance(c, types.TextDocumentContentChangePartial)
    ]
