"""The FXE0020 quick fixes' edits of an export target, on source text (the server drives them in
test_server_dynamic.py)."""

from __future__ import annotations

import pytest
from lsprotocol import types

from onnxlens_server import shape_fixes


def applied(source: str, edits: list[types.TextEdit]) -> str:
    """`source` with `edits` (non-overlapping) applied, as an editor applies them."""
    lines = source.splitlines(keepends=True)
    offsets = [sum(len(line) for line in lines[:i]) for i in range(len(lines) + 1)]
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        start = offsets[edit.range.start.line] + edit.range.start.character
        end = offsets[edit.range.end.line] + edit.range.end.character
        source = source[:start] + edit.new_text + source[end:]
    return source


TARGET = """\
import torch
import exporter


@exporter.export_target(dynamic_shapes=True)
def t():
{body}
"""


@pytest.mark.parametrize(
    "body, argument, dim, expected",
    [
        ("    return M(), (torch.randn(1, 6),)", 0, 0, "    return M(), (torch.randn(2, 6),)"),
        ("    return M(), (torch.randn(3, 1),)", 0, 1, "    return M(), (torch.randn(3, 2),)"),
        ("    return M(), torch.zeros(1, 6)", 0, 0, "    return M(), torch.zeros(2, 6)"),
        ("    x = torch.rand((1, 6))\n    return M(), (x,)", 0, 0, "    x = torch.rand((2, 6))\n    return M(), (x,)"),
        (
            "    x = torch.ones(size=[4, 1])\n    return M(), (x,)",
            0,
            1,
            "    x = torch.ones(size=[4, 2])\n    return M(), (x,)",
        ),
        (
            "    ids = torch.randint(0, 100, (1, 7))\n    return M(), (ids,)",
            0,
            0,
            "    ids = torch.randint(0, 100, (2, 7))\n    return M(), (ids,)",
        ),
        ("    return M(), (torch.randn(1, 6).half(),)", 0, 0, "    return M(), (torch.randn(2, 6).half(),)"),
        (
            "    return M(), (torch.randn(3),), {'mask': torch.ones(1, 3)}",
            "mask",
            0,
            "    return M(), (torch.randn(3),), {'mask': torch.ones(2, 3)}",
        ),
        (
            "    return M(), (), dict(mask=torch.ones(5, 0))",
            "mask",
            1,
            "    return M(), (), dict(mask=torch.ones(5, 2))",
        ),
        (
            "    a = torch.randn(1, 2)  # é\n    return M(), (torch.randn(8), a)",
            1,
            0,
            "    a = torch.randn(2, 2)  # é\n    return M(), (torch.randn(8), a)",
        ),
    ],
)
def test_the_examples_literal_size_becomes_2(body: str, argument, dim: int, expected: str):
    source = TARGET.format(body=body)
    size = 0 if "(5, 0)" in body else 1
    title, edits = shape_fixes.change_example_size(
        source, "t", {"input": "x", "argument": argument, "dim": dim, "size": size}
    )
    assert applied(source, edits) == TARGET.format(body=expected)
    assert title == f"Give the example of 'x' size 2 in dimension {dim} (it is {size}, which the code fixes)"


@pytest.mark.parametrize(
    "body, properties",
    [
        ("    n = 1\n    return M(), (torch.randn(n, 6),)", {"argument": 0, "dim": 0, "size": 1}),  # not a literal
        ("    return M(), (torch.randn(1, 6),)", {"argument": 0, "dim": 1, "size": 1}),  # that dim is 6, not 1
        ("    return M(), (torch.randn(1, 6),)", {"argument": 1, "dim": 0, "size": 1}),  # no such argument
        ("    return M(), (torch.randn(4, 6),)", {"argument": 0, "dim": 0, "size": 4}),  # only sizes 0 and 1
        ("    return M(), (load(),)", {"argument": 0, "dim": 0, "size": 1}),  # not a tensor factory
        (
            "    def inner():\n        return M(), (torch.randn(1, 6),)\n    return inner()",
            {"argument": 0, "dim": 0, "size": 1},
        ),
    ],
)
def test_no_edit_where_the_size_is_not_a_literal_of_the_example(body: str, properties: dict):
    assert shape_fixes.change_example_size(TARGET.format(body=body), "t", {"input": "x", **properties}) is None


VIOLATION = {"input": "x", "dim": 1, "dimName": "width", "suggestedFixes": ["width = 6"], "argument": 0}
SOURCE = """\
import torch
import exporter
from torch.export import Dim

{prelude}
@exporter.export_target{options}
def t():
    return M(), (torch.randn(2, 6),)
"""


@pytest.mark.parametrize(
    "prelude, options, fixes, expected_prelude, expected_options",
    [
        (
            "",
            '(dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("width")}})',
            ["width = 6"],
            "",
            '(dynamic_shapes={"x": {0: Dim("batch"), 1: 6}})',
        ),
        (
            "",
            '(dynamic_shapes={"x": (torch.export.Dim("batch"), torch.export.Dim("width"))})',
            ["width = Dim('width', max=6)"],
            "",
            '(dynamic_shapes={"x": (torch.export.Dim("batch"), torch.export.Dim("width", max=6))})',
        ),
        (
            'width = Dim("width")\n',
            '(dynamic_shapes={"x": {0: Dim("batch"), 1: width}}, opset_version=18)',
            ["width = 6"],
            "width = 6\n",
            '(dynamic_shapes={"x": {0: Dim("batch"), 1: width}}, opset_version=18)',
        ),
        (
            "",
            '(dynamic_shapes={"x": {"0": "batch", "1": "width"}})',
            ["width = 6"],
            "",
            '(dynamic_shapes={"x": {"0": "batch", "1": 6}})',
        ),
    ],
)
def test_torchs_suggested_fix_goes_into_the_targets_spec(prelude, options, fixes, expected_prelude, expected_options):
    source = SOURCE.format(prelude=prelude, options=options)
    title, edits = shape_fixes.apply_suggested_fix(source, "t", {**VIOLATION, "suggestedFixes": fixes})
    assert applied(source, edits) == SOURCE.format(prelude=expected_prelude, options=expected_options)
    static = next((line.split(" = ")[1] for line in fixes if line.split(" = ")[1].isdigit()), None)
    assert title == (
        f"Apply torch.export's suggested fix: makes width static ({static})"
        if static
        else f"Apply torch.export's suggested fix: {fixes[0]}"
    )


@pytest.mark.parametrize(
    "options, expected",
    [
        ("", '(dynamic_shapes={"x": {0: "batch", 1: 6}})'),
        ("()", '(dynamic_shapes={"x": {0: "batch", 1: 6}})'),
        ("(opset_version=18)", '(opset_version=18, dynamic_shapes={"x": {0: "batch", 1: 6}})'),
    ],
)
def test_a_spec_from_the_settings_becomes_the_targets_argument(options: str, expected: str):
    source = SOURCE.format(prelude="", options=options)
    properties = {**VIOLATION, "dynamicShapes": {"x": {"0": "batch", "1": "width"}}}
    _, edits = shape_fixes.apply_suggested_fix(source, "t", properties)
    assert applied(source, edits) == SOURCE.format(prelude="", options=expected)


@pytest.mark.parametrize(
    "fixes, spec",
    [
        (
            ["width = 2*_width", "_width = Dim('_width', max=3)"],
            {"x": {"0": "batch", "1": "width"}},
        ),  # derived: needs a new root
        (["height = 6"], {"x": {"0": "batch", "1": "width"}}),  # not the violated dim
        (["width = 6"], None),  # a spec the settings JSON cannot say
    ],
)
def test_no_edit_for_fixes_it_cannot_apply(fixes: list[str], spec):
    source = SOURCE.format(prelude="", options="")
    assert (
        shape_fixes.apply_suggested_fix(source, "t", {**VIOLATION, "suggestedFixes": fixes, "dynamicShapes": spec})
        is None
    )
