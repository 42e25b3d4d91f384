"""Static discovery of export targets and nn.Module classes (user code never runs)."""

from __future__ import annotations

import textwrap

from onnxlens_server.targets import discover, target_at

SOURCE = textwrap.dedent('''\
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
''')


def test_targets_in_every_import_style_with_their_lines():
    found = discover(SOURCE)
    assert [(t.name, t.decorator_line, t.line, t.end_line) for t in found.targets] == [("first", 20, 21, 22), ("second", 25, 26, 27)]
    assert found.imports_torch and found.imports_exporter and found.last_import_line == 3


def test_module_classes_with_example_inputs_from_their_first_layer():
    found = discover(SOURCE)
    assert [(m.name, m.line, m.end_line, m.example_input) for m in found.modules] == [
        ("Net", 6, 9, "torch.randn(1, 3, 32, 32)"),
        ("Deeper", 12, 13, "torch.randn(1, 3, 32, 32)"),  # a subclass without __init__ takes its base's
    ]


def test_a_file_that_does_not_parse_has_nothing():
    found = discover("def broken(:\n")
    assert (found.targets, found.modules, found.imports_torch, found.last_import_line) == ([], [], False, -1)


def test_target_at_picks_the_enclosing_then_the_nearest_above_then_the_first():
    targets = discover(SOURCE).targets
    assert target_at(targets, 20).name == "first"  # on the decorator
    assert target_at(targets, 27).name == "second"
    assert target_at(targets, 30).name == "second"  # below every target
    assert target_at(targets, 0).name == "first"  # above every target
    assert target_at([], 3) is None
