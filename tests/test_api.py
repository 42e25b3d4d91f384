"""Adapters, dynamic shapes on other shapes, save/serializers, error paths, export targets."""

from __future__ import annotations

import dataclasses
import io
import subprocess
import sys
import textwrap

import onnx
import pytest
import torch
from helpers import assert_matches_eager, run_onnx, validate_sarif

import exporter
from exporter.targets import TargetError, build_target


@dataclasses.dataclass
class Prediction:
    logits: torch.Tensor
    extras: dict
    version: int = 2  # a number: a constant, not a graph output (the dataclass is not registered with pytree)


class NestedModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(3, 3)

    def forward(self, inputs: dict, pair: tuple, scale: float = 1.0, mask=None):
        a, (b, c) = inputs["a"], pair
        if mask is not None:
            a = a.masked_fill(mask, 0.0)
        logits = self.proj(a + b) * scale
        return Prediction(logits, {"sum": logits.sum(), "items": [c * 2, None, c - 1]})


def _inputs():
    return {"a": torch.randn(2, 3)}, (torch.randn(2, 3), torch.randn(4))


def test_nested_inputs_none_kwargs_and_dataclass_outputs():
    model = NestedModel()
    inputs, pair = _inputs()
    export_output = exporter.dynamo_export(model, inputs, pair, scale=0.5, mask=None)
    adapted = export_output.adapt_torch_inputs_to_onnx(inputs, pair, scale=0.5, mask=None)
    assert [tuple(t.shape) for t in adapted] == [(2, 3), (2, 3), (4,)]  # None and the float are not inputs
    outputs = export_output.adapt_torch_outputs_to_onnx(model(inputs, pair, scale=0.5))
    assert [tuple(t.shape) for t in outputs] == [(2, 3), (), (4,), (4,)]
    assert_matches_eager(export_output, model, (inputs, pair), {"scale": 0.5, "mask": None})


class Window:
    """A cache-like output whose flattening (like transformers' caches') keeps its length in the
    context when it is a Python int, and as a leaf when it is symbolic."""

    def __init__(self, keys: torch.Tensor, length) -> None:
        self.keys, self.length = keys, length


def _flatten_window(window: Window):
    symbolic = isinstance(window.length, torch.SymInt)
    return ([window.keys, window.length] if symbolic else [window.keys]), (None if symbolic else window.length)


def _unflatten_window(leaves, length) -> Window:
    return Window(leaves[0], leaves[1] if length is None else length)


torch.utils._pytree.register_pytree_node(Window, _flatten_window, _unflatten_window)


class WindowModel(torch.nn.Module):
    def forward(self, x):
        return x * 2, Window(x + 1, x.shape[1])


def test_numbers_inside_registered_objects_are_not_outputs():
    x = torch.randn(2, 5)
    export_output = exporter.dynamo_export(WindowModel(), x, export_options=exporter.ExportOptions(dynamic_shapes=True))
    assert len(export_output.model_proto.graph.output) == 2  # x * 2 and the keys; not the length
    assert_matches_eager(export_output, WindowModel(), (x,), run_args=(torch.randn(3, 7),))


def test_tensor_kwarg_input():
    model = NestedModel()
    inputs, pair = _inputs()
    mask = torch.tensor([[True, False, False], [False, False, True]])
    export_output = exporter.dynamo_export(model, inputs, pair, mask=mask)
    assert len(export_output.model_proto.graph.input) == 4
    assert_matches_eager(export_output, model, (inputs, pair), {"mask": mask})


def test_inputs_with_another_structure_are_rejected():
    export_output = exporter.dynamo_export(NestedModel(), *_inputs())
    with pytest.raises(ValueError, match="incompatible with the format that was exported"):
        export_output.adapt_torch_inputs_to_onnx({"a": torch.randn(2, 3), "b": torch.randn(1)}, _inputs()[1])
    with pytest.raises(ValueError, match="Unexpected keyword inputs"):
        export_output.adapt_torch_inputs_to_onnx(*_inputs(), bias=torch.randn(1))


def test_complex_inputs_travel_as_real_pairs():
    def rotate(z, angle):
        return z * torch.polar(torch.ones_like(angle), angle)

    z, angle = torch.randn(5, dtype=torch.complex64), torch.randn(5)
    export_output = exporter.dynamo_export(rotate, z, angle)
    assert tuple(export_output.adapt_torch_inputs_to_onnx(z, angle)[0].shape) == (5, 2)
    (out,) = run_onnx(export_output, z, angle)
    torch.testing.assert_close(torch.view_as_complex(torch.from_numpy(out)), rotate(z, angle))


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.head(self.body(x).mean(dim=(2, 3)))


def test_dynamic_shapes_run_on_other_shapes():
    model = ConvNet().eval()
    export_output = exporter.dynamo_export(
        model, torch.randn(2, 3, 16, 16), export_options=exporter.ExportOptions(dynamic_shapes=True)
    )
    dims = export_output.model_proto.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param for d in dims] == ["x_dim_0", "", "x_dim_2", "x_dim_3"]
    assert dims[1].dim_value == 3
    for shape in [(1, 3, 16, 16), (5, 3, 9, 31)]:
        x = torch.randn(shape)
        assert_matches_eager(export_output, model, (x,), run_args=(x,), atol=1e-4)


def test_dynamic_sequence_length_for_a_transformer_encoder():
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    export_output = exporter.dynamo_export(
        model, torch.randn(2, 7, 16), export_options=exporter.ExportOptions(dynamic_shapes=True)
    )
    for shape in [(1, 3, 16), (4, 12, 16)]:
        x = torch.randn(shape)
        assert_matches_eager(export_output, model, (x,), run_args=(x,), atol=1e-4)


def test_save_to_path_stream_and_with_serializer(tmp_path):
    model, x = ConvNet().eval(), torch.randn(1, 3, 8, 8)
    export_output = exporter.dynamo_export(model, x)
    export_output.save(tmp_path / "m.onnx")
    stream = io.BytesIO()
    export_output.save(stream)
    assert onnx.load_from_string(stream.getvalue()) == onnx.load(tmp_path / "m.onnx")

    class TextSerializer:
        def serialize(self, export_output, destination):
            destination.write(onnx.printer.to_text(export_output.model_proto).encode())

    export_output.save(tmp_path / "m.txt", serializer=TextSerializer())
    assert (tmp_path / "m.txt").read_text() == onnx.printer.to_text(export_output.model_proto)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.txt"]  # no temporary files left


def test_failed_save_leaves_no_file(tmp_path):
    class Broken:
        def serialize(self, export_output, destination):
            destination.write(b"partial")
            raise RuntimeError("disk full")

    export_output = exporter.dynamo_export(torch.nn.ReLU(), torch.randn(2))
    with pytest.raises(RuntimeError, match="disk full"):
        export_output.save(tmp_path / "m.onnx", serializer=Broken())
    assert list(tmp_path.iterdir()) == []


def test_capture_failure_is_an_exporter_error_with_partial_output():
    def data_dependent(x):
        if x.sum() > 0:  # a Python branch on a tensor value: no strategy can capture this
            return x * 2
        return x - 1

    with pytest.raises(exporter.OnnxExporterError, match="Could not capture") as info:
        exporter.dynamo_export(data_dependent, torch.randn(3))
    partial = info.value.export_output
    assert partial.model is None
    with pytest.raises(RuntimeError, match="failed before an ONNX model was built"):
        _ = partial.model_proto
    assert partial.diagnostic_context.errors()


class MutatesOnly(torch.nn.Module):
    def forward(self, x: torch.Tensor, out: torch.Tensor) -> None:  # MARK: no return
        out.copy_(x.sin())


class NothingInside(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor):
        x.mul_(y)
        return {"steps": None, "items": []}  # MARK: empty


@pytest.mark.parametrize("model, mark", [(MutatesOnly(), "no return"), (NothingInside(), "empty")])
def test_a_model_returning_no_tensor_is_refused_at_its_return(model, mark):
    """It was exported with no outputs (an ONNX model onnxruntime cannot even load), as an export that succeeded."""
    with pytest.raises(exporter.OnnxExporterError, match="returns no tensor") as raised:
        exporter.dynamo_export(model, torch.randn(3), torch.zeros(3))
    [error] = raised.value.export_output.diagnostic_context.errors()
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if f"# MARK: {mark}" in text)
    assert (error.rule.id, error.stack[0].line) == ("FXE0018", line)


def test_build_target_checks_the_return_value():
    with pytest.raises(TargetError, match=r"must return \(model, args\) or \(model, args, kwargs\), got Linear"):
        build_target(lambda: torch.nn.Linear(2, 2))
    with pytest.raises(TargetError, match="kwargs must be a dict"):
        build_target(lambda: (torch.nn.Linear(2, 2), (torch.randn(2),), [1]))
    model, args, kwargs = build_target(lambda: (torch.nn.Linear(2, 2), torch.randn(2)))
    assert len(args) == 1 and kwargs == {}


def test_options_from_settings_validates():
    options = exporter.ExportOptions.from_settings({"dynamic_shapes": True, "verbosity": "debug", "opset_version": 20})
    assert options.dynamic_shapes and options.opset_version == 20 and options.diagnostic_options.verbosity_level == 10
    with pytest.raises(ValueError, match="unknown export options"):
        exporter.ExportOptions.from_settings({"dynamic": True})
    with pytest.raises(ValueError, match="verbosity"):
        exporter.ExportOptions.from_settings({"verbosity": "loud"})


MODEL_FILE = textwrap.dedent(
    """
    import torch
    import exporter

    @exporter.export_target(dynamic_shapes=True)
    def small():
        return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()), (torch.randn(2, 4),)

    @exporter.export_target
    def broken():
        return torch.nn.Linear(2, 2)
    """
)


def test_cli_exports_a_target_and_reports_a_broken_one(tmp_path):
    source = tmp_path / "models.py"
    source.write_text(MODEL_FILE)
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter.cli",
            f"{source}:small",
            "-o",
            str(tmp_path / "small.onnx"),
            "--sarif",
            str(tmp_path / "small.sarif"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ok.returncode == 0, ok.stderr
    assert "exported small" in ok.stdout and "1 inputs, 1 outputs" in ok.stdout
    model = onnx.load(tmp_path / "small.onnx")
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "input_dim_0"
    assert validate_sarif(tmp_path / "small.sarif")["runs"][0]["invocations"][0]["executionSuccessful"] is True

    bad = subprocess.run(
        [sys.executable, "-m", "exporter.cli", f"{source}:broken"], capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 1
    assert "must return (model, args) or (model, args, kwargs), got Linear" in bad.stderr

    missing = subprocess.run(
        [sys.executable, "-m", "exporter.cli", f"{source}:nope"], capture_output=True, text=True, timeout=300
    )
    assert missing.returncode == 2 and "no export target 'nope'" in missing.stderr


class _LayerNormGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.norm = torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)

    def forward(self, x):
        return torch.nn.functional.gelu(self.norm(self.fc(x)))


@pytest.mark.parametrize(
    "options, opset",
    [
        (dict(opset_version=18, onnx_registry=exporter.OnnxRegistry(opset_version=20)), 18),  # the option wins
        (dict(opset_version=21, onnx_registry=exporter.OnnxRegistry(opset_version=18)), 21),
        (dict(onnx_registry=exporter.OnnxRegistry(opset_version=18)), 18),  # no option: the registry's
        (dict(), 20),  # the default, as torch.onnx.export's
    ],
)
def test_the_requested_opset_is_the_models_whatever_the_registry(options, opset):
    model, x = _LayerNormGelu().eval(), torch.randn(2, 4)
    output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(**options))
    proto = output.model_proto
    assert {o.domain: o.version for o in proto.opset_import}[""] == opset
    assert_matches_eager(output, model, (x,))


@pytest.mark.parametrize("opset, ir_version", [(18, 10), (21, 10), (23, 11), (25, 13)])
def test_ir_version_follows_onnx_table_for_the_imported_opsets(opset, ir_version):
    model, x = _LayerNormGelu().eval(), torch.randn(2, 4)
    proto = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(opset_version=opset)).model_proto
    assert proto.ir_version == max(
        10, onnx.helper.find_min_ir_version_for(list(proto.opset_import), ignore_unknown=True)
    )
    assert proto.ir_version == ir_version  # onnx's table: opset 23 needs IR 11, 25 IR 13; 10 at least (node metadata)
    onnx.checker.check_model(proto, full_check=True)
    assert_matches_eager(
        exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(opset_version=opset)), model, (x,)
    )


class Spectrum(torch.nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x, dim=-1).abs()


@pytest.mark.parametrize("opset", [18, 20, 23])
def test_torchlibs_opset_18_ops_are_converted_to_the_requested_opset(opset):
    """torchlib writes DFT with an ``axis`` attribute (opset 17-19); from opset 20 the axis is an input. The
    recorded nodes keep the opset they were written for and are converted, so the model checks and runs."""
    model, x = Spectrum(), torch.randn(2, 16)
    export_output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(opset_version=opset))
    proto = export_output.model_proto
    onnx.checker.check_model(proto, full_check=True)
    (dft,) = [n for n in proto.graph.node if n.op_type == "DFT"]
    assert ([a.name for a in dft.attribute if a.name == "axis"] == []) == (opset >= 20), dft
    assert_matches_eager(export_output, model, (x,))


@pytest.mark.parametrize(
    "setting, refused",
    [
        ({"precision": "int4"}, "precision='int4'"),
        ({"precision": "fp16", "block_size": 64}, "precision='fp16', block_size=64"),
        ({"int8_head": True}, "int8_head=True"),
    ],
)
def test_dynamo_export_refuses_weight_precision_settings_it_would_ignore(setting, refused):
    options = exporter.ExportOptions(**setting)
    with pytest.raises(ValueError, match=f"dynamo_export does not take {refused}: the weights' precision is a setting"):
        exporter.dynamo_export(torch.nn.Linear(2, 2), torch.randn(1, 2), export_options=options)
    # the generation-only flag that changes nothing here, and the defaults spelled out, are accepted
    options = exporter.ExportOptions(precision="fp32", block_size=32, fused_kernels=False)
    model = torch.nn.Linear(2, 2)
    x = torch.randn(1, 2)
    [out] = run_onnx(exporter.dynamo_export(model, x, export_options=options), x, model=model)
    torch.testing.assert_close(torch.from_numpy(out), model(x).detach())
