"""The server's event loop never parses Python source: target discovery and the quick fixes' analyses of
an export target run in the parser process (`targets.Discoveries`), where a long file cannot hold up
other requests. Counted with Python's audit events: every ``ast.parse`` raises ``compile`` (file name
``<unknown>``) in the process that runs it."""

from __future__ import annotations

import asyncio
import pathlib
import sys

from lsprotocol import types

from exporter.diagnostics import rules
from onnxlens_server import commands, features, sarif_log
from onnxlens_server.targets import Discoveries

PARSES: list[str] = []  # the source text of each ast.parse in this process


def _count_parses(event: str, args: tuple) -> None:
    if event == "compile" and len(args) > 1 and args[1] == "<unknown>":
        PARSES.append(args[0])


sys.addaudithook(_count_parses)  # audit hooks cannot be removed: it only counts

SOURCE = """import torch
import exporter


@exporter.export_target(dynamic_shapes=True)
def t():
    model = torch.nn.Linear(8, 4)
    return model, (torch.randn(1, 8),)
"""
TARGET_LINE, EXAMPLE_LINE = 5, 7  # 0-based: the def, the return with the literal size 1
PATH = "/m/net.py"
URI = pathlib.Path(PATH).as_uri()
FIXED = {"input": "x", "argument": 0, "dim": 0, "size": 1}  # FXE0020's properties: x's dim 0 fixed at size 1


def parses_in(run) -> tuple[object, list[str]]:
    """What `run()` (a coroutine function) returns, and the sources parsed in this process meanwhile."""

    async def main():
        discoveries = Discoveries()
        try:
            await discoveries.get("file:///warm.py", "x = 1\n")  # the parser process started before counting
            before = len(PARSES)
            result = await run(discoveries)
            return result, PARSES[before:]
        finally:
            discoveries.close()

    return asyncio.run(main())


def test_a_fixed_dimension_is_placed_without_parsing_on_the_event_loop():
    log = sarif_log.parse(
        {
            "runs": [
                {
                    "results": [
                        {
                            "ruleId": rules.DIMENSION_SPECIALIZED.id,
                            "level": "warning",
                            "message": {"text": "x dim 0 fixed"},
                            "properties": FIXED,
                        },
                        {
                            "ruleId": rules.DIMENSION_SPECIALIZED.id,
                            "level": "warning",
                            "message": {"text": "y dim 1 fixed"},
                            "properties": {"input": "y", "dim": 1},
                        },  # no example to point at: the target's line
                    ]
                }
            ]
        }
    )
    request = commands.ExportRequest(
        job_id="j",
        path=PATH,
        target="t",
        settings={},
        overrides={},
        output_stem="/m/out/net.t",
        cwd="/m",
        source=SOURCE,
    )

    async def run(discoveries: Discoveries):
        (target,) = (await discoveries.get(URI, SOURCE)).targets
        return await commands.fixed_dimension_places(log, request, target, discoveries.run)

    places, parsed = parses_in(run)
    assert parsed == []
    assert [places[id(r)] for r in log.results] == [(PATH, EXAMPLE_LINE), (PATH, TARGET_LINE)]


def test_shape_quick_fixes_are_computed_without_parsing_on_the_event_loop():
    at = types.Range(types.Position(EXAMPLE_LINE, 4), types.Position(EXAMPLE_LINE, 38))
    diagnostic = types.Diagnostic(
        at,
        "x dim 0 fixed",
        code=rules.DIMENSION_SPECIALIZED.id,
        data={"ruleId": rules.DIMENSION_SPECIALIZED.id, "properties": FIXED, "target": "t", "targetUri": URI},
    )
    params = types.CodeActionParams(
        types.TextDocumentIdentifier(URI), at, types.CodeActionContext(diagnostics=[diagnostic])
    )

    async def run(discoveries: Discoveries):
        found = await discoveries.get(URI, SOURCE)
        return await features.code_actions(URI, SOURCE, found, params, lambda uri: None, discoveries.run)

    actions, parsed = parses_in(run)
    assert parsed == []
    (action,) = actions
    column = SOURCE.splitlines()[EXAMPLE_LINE].index("randn(1") + len("randn(")
    assert action.edit.changes == {
        URI: [
            types.TextEdit(
                types.Range(types.Position(EXAMPLE_LINE, column), types.Position(EXAMPLE_LINE, column + 1)), "2"
            )
        ]
    }
    assert action.command.arguments == [{"uri": URI, "target": "t"}]
