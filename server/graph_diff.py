"""Two exports of a model compared, node by node (the `COMPARE_GRAPHS` command), for the graph view.

Both models are graphs as `onnxlens_server.graph` makes them. Nodes are aligned by where they come from: the
module path, the source file and function of their innermost user frame, and the op. Among the nodes of one such
key, those at the same line pair first, then the rest in order of line (an edit above them moves their lines, not
what they are). A pair whose attributes, input count or output types differ is ``changed``; what is left over is
``added`` (in the second) or ``removed`` (in the first). Each node gets its status in ``diff`` (``same`` too), and
the summary counts the ops of each type before and after.

When either model has no source lines (another producer's file), nodes align by module path and op alone.
"""

from __future__ import annotations

import collections
import os
from typing import Any

ADDED, REMOVED, CHANGED, SAME = "added", "removed", "changed", "same"


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """`before` and `after` (graph JSON) with each node's ``diff`` status set, and the summary."""
    for node in before["nodes"]:
        node["diff"] = REMOVED
    for node in after["nodes"]:
        node["diff"] = ADDED
    located = all(any(n.get("source") for n in graph["nodes"]) for graph in (before, after))
    old_by_key = _by_key(before["nodes"], located)
    for key, new_nodes in _by_key(after["nodes"], located).items():
        for old, new in _pairs(old_by_key.get(key, []), new_nodes):
            old["diff"] = new["diff"] = CHANGED if _signature(old) != _signature(new) else SAME
    counts = collections.Counter(n["diff"] for n in before["nodes"] + after["nodes"])
    ops_before = collections.Counter(n["op"] for n in before["nodes"])
    ops_after = collections.Counter(n["op"] for n in after["nodes"])
    return {
        "before": before,
        "after": after,
        "added": counts[ADDED],
        "removed": counts[REMOVED],
        "changed": counts[CHANGED] // 2,
        "summary": [
            {"op": op, "before": ops_before[op], "after": ops_after[op]}
            for op in sorted(ops_before | ops_after, key=lambda op: (ops_before[op] == ops_after[op], op))
        ],
    }


def previous_path(onnx_path: str) -> str:
    """Where the server keeps the model an export replaces: ``<stem>.previous.onnx`` beside it."""
    return os.path.splitext(onnx_path)[0] + ".previous.onnx"


def _by_key(nodes: list[dict[str, Any]], located: bool) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """`nodes` by module path, source file and function (if both models have sources: `located`), and op."""
    keyed: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for node in nodes:
        source = (node.get("source") or {}) if located else {}
        key = node["module"], source.get("path"), source.get("function"), node["domain"], node["op"]
        keyed.setdefault(key, []).append(node)
    return keyed


def _line(node: dict[str, Any]) -> int:
    return (node.get("source") or {}).get("line", 0)


def _pairs(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Same line first (in graph order), then the rest in order of line."""
    pairs = []
    free = collections.defaultdict(collections.deque)
    for node in old:
        free[_line(node)].append(node)
    rest = []
    for node in new:
        if free[_line(node)]:
            pairs.append((free[_line(node)].popleft(), node))
        else:
            rest.append(node)
    left = sorted((n for nodes in free.values() for n in nodes), key=_line)
    pairs.extend(zip(left, sorted(rest, key=_line)))
    return pairs


def _signature(node: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two aligned nodes the same op: attributes, input count, output types (not value names)."""
    outputs = tuple((v.get("dtype"), None if v.get("shape") is None else tuple(v["shape"])) for v in node["outputs"])
    return tuple(sorted(node["attributes"].items())), len(node["inputs"]), outputs
