"""Quick-fix edits: an ONNX function stub for an unsupported operator, an export target for a module."""

from __future__ import annotations

import runpy
import textwrap

from lsprotocol import types

import exporter
from onnxlens_server import fixes
from onnxlens_server.targets import discover

SOURCE = textwrap.dedent("""\
    import torch


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)
""")


def apply(text: str, edits: list[types.TextEdit]) -> str:
    lines = text.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: e.range.start.line, reverse=True):
        assert edit.range.start == edit.range.end  # insertions only
        lines[edit.range.start.line : edit.range.start.line] = [edit.new_text]
    return "".join(lines)


def test_stub_has_inputs_attributes_and_its_registration():
    found = discover(SOURCE)
    schema = "mylib::scaled(Tensor x, SymInt n, float scale=1.0, *, Tensor? bias=None) -> (Tensor, Tensor)"
    fixed = apply(SOURCE, fixes.register_stub(schema, found, len(SOURCE.splitlines())))
    assert fixed.startswith("import torch\nimport onnxscript\nfrom onnxscript import opset18 as op\nimport exporter\n")
    assert "def mylib_scaled(x, n: int, scale: float = 1.0, bias=None):" in fixed
    assert "    return op.Identity(x), op.Identity(x)  # TODO" in fixed
    assert fixed.endswith('exporter.default_registry().register_op(mylib_scaled, "mylib", "scaled", "default")\n')
    compile(fixed, "net.py", "exec")


def test_stub_with_required_keyword_arguments_after_a_default_is_a_valid_onnxscript_function(tmp_path, monkeypatch):
    found = discover(SOURCE)
    schema = "mylib::blend(Tensor x, float alpha=0.5, *, Tensor y, int mode) -> Tensor"
    fixed = apply(SOURCE, fixes.register_stub(schema, found, len(SOURCE.splitlines())))
    assert "def mylib_blend(x, alpha: float = 0.5, y=None, mode: int = None):" in fixed
    registry = exporter.OnnxRegistry()
    monkeypatch.setattr(exporter, "default_registry", lambda: registry)
    (tmp_path / "net.py").write_text(fixed)
    namespace = runpy.run_path(str(tmp_path / "net.py"))  # onnxscript converts the stub, the file registers it
    assert registry.is_registered_op("mylib", "blend")
    proto = namespace["mylib_blend"].to_function_proto()
    assert list(proto.input) == ["x", "y"] and list(proto.attribute) == ["mode"]
    assert [a.name for a in proto.attribute_proto] == ["alpha"]


def test_stub_for_an_overload_and_an_unparsable_schema():
    found = discover(SOURCE)
    edits = fixes.register_stub("mylib::op.out(Tensor self) -> Tensor", found, 7)
    assert "def mylib_op_out(self):" in edits[-1].new_text and '"mylib", "op", "out")' in edits[-1].new_text
    assert fixes.register_stub("not a schema", found, 7) is None


def test_export_target_after_the_class_with_the_missing_import():
    found = discover(SOURCE)
    (module,) = found.modules
    fixed = apply(SOURCE, fixes.export_target_for(module, found))
    assert fixed == SOURCE.replace("import torch\n", "import torch\nimport exporter\n") + textwrap.dedent('''

        @exporter.export_target
        def export_net():
            """Build Net with example inputs for onnxlens (check the input shape)."""
            return Net().eval(), (torch.randn(2, 4),)
    ''')


GENERATED = {
    "function": "mylib_scaled",
    "imports": ["import torch", "from onnxscript import script", "from onnxscript.onnx_opset import opset18"],
    "code": "@script()\ndef mylib_scaled(x, scale: float):\n    return opset18.Mul(x, opset18.Constant(value_float=scale))\n",
}


def test_generated_function_with_its_missing_imports_and_registration():
    found = discover(SOURCE)
    fixed = apply(
        SOURCE,
        fixes.register_generated(
            "mylib::scaled(Tensor x, float scale) -> Tensor", GENERATED, SOURCE, found, len(SOURCE.splitlines())
        ),
    )
    assert fixed.startswith(
        "import torch\nfrom onnxscript import script\nfrom onnxscript.onnx_opset import opset18\nimport exporter\n\n"
    )
    assert fixed.endswith(
        "\n\n@script()\ndef mylib_scaled(x, scale: float):\n    return opset18.Mul(x, opset18.Constant(value_float=scale))\n\n\n"
        'exporter.default_registry().register_op(mylib_scaled, "mylib", "scaled", "default")\n'
    )
    compile(fixed, "net.py", "exec")


def test_no_generated_function_edits_for_what_is_not_one():
    found = discover(SOURCE)
    schema = "mylib::scaled(Tensor x, float scale) -> Tensor"
    for bad in [
        None,
        "code",
        {**GENERATED, "function": "not a name"},
        {**GENERATED, "imports": "import os"},
        {k: v for k, v in GENERATED.items() if k != "code"},
    ]:
        assert fixes.register_generated(schema, bad, SOURCE, found, 7) is None
    assert fixes.register_generated("not a schema", GENERATED, SOURCE, found, 7) is None
