"""Static discovery of export targets and nn.Module classes (user code never runs)."""

from __future__ import annotations

import asyncio
import textwrap

from onnxlens_server.targets import Discoveries, SyntaxProblem, discover, target_at

SOURCE = textwrap.dedent("""\
    import torch
    from torch import nn as tnn
    import exporter as ex
    from exporter import export_target as target


    class Net(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3)


    class Deeper(Net):
        pass


    class Plain:
        pass


    @ex.export_target
    def first():
        return Net(), (torch.randn(1, 3, 32, 32),)


    @target(dynamic_shapes=True)
    def second():
        return Deeper(), (torch.randn(1, 3, 32, 32),)


    @other.export_target
    def not_ours():
        pass
""")


def test_targets_in_every_import_style_with_their_lines():
    found = discover(SOURCE)
    assert [(t.name, t.decorator_line, t.line, t.end_line) for t in found.targets] == [
        ("first", 20, 21, 22),
        ("second", 25, 26, 27),
    ]
    assert found.imports_torch and found.imports_exporter and found.last_import_line == 3


def test_module_classes_with_example_inputs_from_their_first_layer():
    found = discover(SOURCE)
    assert [(m.name, m.line, m.end_line, m.example_input) for m in found.modules] == [
        ("Net", 6, 9, "torch.randn(1, 3, 32, 32)"),
        ("Deeper", 12, 13, "torch.randn(1, 3, 32, 32)"),  # a subclass without __init__ takes its base's
    ]


def test_a_file_that_does_not_parse_has_nothing_but_its_syntax_error():
    found = discover("import torch\n\ndef broken(:\n")
    assert (found.targets, found.modules, found.imports_torch, found.last_import_line) == ([], [], False, -1)
    assert found.syntax_error == SyntaxProblem("invalid syntax", 2)


def test_only_module_level_functions_are_targets():
    """The export calls ``getattr(module, name)()``: a method or a nested function is never found."""
    found = discover(
        textwrap.dedent("""\
        import exporter

        class Holder:
            @exporter.export_target
            def method(self):
                pass

        @exporter.export_target
        def outer():
            @exporter.export_target
            def nested():
                pass

        try:
            import torch
        except ImportError:
            pass
        else:
            @exporter.export_target
            async def guarded():
                pass
    """)
    )
    assert [(t.name, t.line) for t in found.targets] == [("outer", 8), ("guarded", 19)]
    assert found.imports_torch  # a module-level import, even under try


def test_discoveries_keep_the_last_good_one_while_the_text_does_not_parse():
    async def run() -> None:
        discoveries = Discoveries()
        good = await discoveries.get("file:///m.py", SOURCE)
        assert await discoveries.get("file:///m.py", SOURCE) is good  # once per text
        broken = await discoveries.get("file:///m.py", SOURCE.replace("def second():", "def second(:"))
        assert (broken.targets, broken.modules) == (good.targets, good.modules)
        assert broken.syntax_error == SyntaxProblem("invalid syntax", 26)
        assert (await discoveries.get("file:///other.py", "x = (\n")).targets == []  # nothing good yet
        discoveries.forget("file:///m.py")
        assert (await discoveries.get("file:///m.py", "x = (\n")).targets == []

    asyncio.run(run())


def test_discoveries_outlive_their_parser_process():
    async def run() -> None:
        discoveries = Discoveries()
        await discoveries.get("file:///m.py", "x = 1\n")
        for process in discoveries._parser._processes.values():
            process.kill()
        assert [t.name for t in (await discoveries.get("file:///m.py", SOURCE)).targets] == [
            "first",
            "second",
        ]  # parsed here
        assert [t.name for t in (await discoveries.get("file:///n.py", SOURCE)).targets] == [
            "first",
            "second",
        ]  # by a new process

    asyncio.run(run())


def test_target_at_picks_the_enclosing_then_the_nearest_above_then_the_first():
    targets = discover(SOURCE).targets
    assert target_at(targets, 20).name == "first"  # on the decorator
    assert target_at(targets, 27).name == "second"
    assert target_at(targets, 30).name == "second"  # below every target
    assert target_at(targets, 0).name == "first"  # above every target
    assert target_at([], 3) is None
