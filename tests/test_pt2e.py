"""Quantized PyTorch models: a PT2E-quantized model (torchao's prepare_pt2e/convert_pt2e) exports
with its int8 weights and QuantizeLinear/DequantizeLinear pairs, which onnxruntime fuses into its
quantized kernels, and computes what the quantized eager model does within one quantization step.
An eager-mode quantized model (quantize_dynamic) fails with a located message saying what to do.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx.inliner
import onnxruntime as ort
import pytest
import torch

import exporter
from exporter.verify import int8_kernels

pt2e = pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
x86 = pytest.importorskip("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer")


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc1 = torch.nn.Linear(8 * 8 * 8, 32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x))
        h = torch.relu(self.fc1(h.flatten(1)))
        return self.fc2(h)


def quantize(seed: int, reduce_range: bool = False) -> tuple[Net, torch.fx.GraphModule, torch.Tensor]:
    """A float `Net` (random weights from `seed`), its PT2E-quantized form (x86 quantizer: uint8 activations,
    0…127 with `reduce_range`; int8 weights per channel) calibrated on random batches, and an example input."""
    torch.manual_seed(seed)
    model = Net().eval()
    example = torch.randn(4, 3, 8, 8)
    captured = torch.export.export(model, (example,)).module()
    config = x86.get_default_x86_inductor_quantization_config(reduce_range=reduce_range)
    prepared = pt2e.prepare_pt2e(captured, x86.X86InductorQuantizer().set_global(config))
    for _ in range(8):
        prepared(torch.randn(4, 3, 8, 8))  # calibration
    return model, pt2e.convert_pt2e(prepared), example


@pytest.fixture(scope="module")
def quantized():
    model, converted, example = quantize(0)
    return model, converted, example, exporter.dynamo_export(converted, example).model_proto


@pytest.fixture(scope="module")
def quantized_7bit():
    """Activations in 0…127: onnxruntime's int8 kernels cannot saturate on any CPU."""
    model, converted, example = quantize(0, reduce_range=True)
    return model, converted, example, exporter.dynamo_export(converted, example).model_proto


def run(proto: onnx.ModelProto, x: torch.Tensor, **config: str) -> np.ndarray:
    options = ort.SessionOptions()
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


def test_pt2e_model_keeps_int8_weights_and_qdq_pairs(quantized):
    _, _, _, proto = quantized
    ops = collections.Counter(n.op_type for n in onnx.inliner.inline_local_functions(proto).graph.node)
    assert ops["QuantizeLinear"] == 3 and ops["DequantizeLinear"] == 6  # an activation and a weight per layer
    weights = [i for i in proto.graph.initializer if len(i.dims) >= 2]
    assert len(weights) == 3 and {i.data_type for i in weights} == {onnx.TensorProto.INT8}


def test_onnxruntime_fuses_the_qdq_pairs(quantized, tmp_path):
    _, _, _, proto = quantized
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ops = collections.Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)
    assert ops["QLinearConv"] == 1 and ops["QGemm"] + ops["QLinearMatMul"] + ops["MatMulIntegerToFloat"] >= 1


def test_matches_the_quantized_eager_model_within_one_step(quantized_7bit):
    model, converted, example, proto = quantized_7bit
    inputs = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    got = run(proto, inputs)
    with torch.no_grad():
        want, fp32 = converted(inputs).numpy(), model(inputs).numpy()
    # one step of fc2's quantized input moves an output by at most its scale times a row's |weights|
    fc2_input = [n for n in converted.graph.nodes if "quantize_per_tensor" in str(n.target)][-1]
    scale = float(fc2_input.args[1])
    step = scale * np.abs(model.fc2.weight.detach().numpy()).sum(1).max()
    assert np.abs(got - want).max() <= step
    assert np.abs(fp32 - want).max() > np.abs(got - want).max()  # the quantized model, not the float one


def test_a_range_narrower_than_the_type_is_kept(quantized_7bit):
    """quant_min/quant_max 0…127 in uint8: inputs beyond the calibrated range are clamped at 127, as PyTorch does
    (torchlib's QuantizeLinear saturated at 255: an output off by more than its own size)."""
    _, converted, example, proto = quantized_7bit
    first = next(n for n in converted.graph.nodes if "quantize_per_tensor" in str(n.target))
    assert first.args[3:5] == (0, 127)
    inputs = example * 10
    with torch.no_grad():
        want = converted(inputs).numpy()
    np.testing.assert_allclose(run(proto, inputs, **{"session.disable_quant_qdq": "1"}), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_seven_bit_models_verify_and_int8_rounding_is_a_warning(seed):
    """A quantized model computes in onnxruntime what the quantized eager model does: verified with the QDQ
    fusion off if its int8 kernels (on by default) differ, and then a warning at the first divergence."""
    _, converted, example = quantize(seed, reduce_range=True)
    output = exporter.dynamo_export(converted, example, export_options=exporter.ExportOptions(verify=True))
    warnings = [d for d in output.diagnostic_context.diagnostics if d.level.name in ("WARNING", "ERROR")]
    for warning in warnings:
        assert (warning.rule.id, warning.level.name) == ("FXE0021", "WARNING")
        assert warning.properties["qdqFusionOffMatches"] is True
        assert "with its QDQ fusion off" in warning.message and "round their results" in warning.message


def test_a_full_range_model_on_a_cpu_without_vnni_is_an_error_saying_why(quantized):
    """On an x86 CPU without VNNI, onnxruntime's u8×s8 kernels saturate 16-bit sums: a full-range uint8 model
    differs from the quantized eager model there by more than rounding (an error saying so and what to do);
    elsewhere it verifies."""
    _, converted, example, _ = quantized
    options = exporter.ExportOptions(verify=True)
    if not int8_kernels.saturates_u8s8():
        exporter.dynamo_export(converted, example, export_options=options)
        return
    with pytest.raises(exporter.OnnxExporterError) as raised:
        exporter.dynamo_export(converted, example, export_options=options)
    [error] = [d for d in raised.value.export_output.diagnostic_context.diagnostics if d.level.name == "ERROR"]
    assert error.rule.id == "FXE0021" and error.properties["qdqFusionOffMatches"] is True
    assert "can saturate on this CPU (x86 without VNNI)" in error.message and "reduce_range=True" in error.message
    with torch.no_grad():  # and the graph itself is exact
        want = converted(example).numpy()
    np.testing.assert_allclose(
        run(raised.value.export_output.model_proto, example, **{"session.disable_quant_qdq": "1"}),
        want,
        rtol=1e-5,
        atol=1e-6,
    )


class Dynamic(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        return self.fc2(h)


def test_dynamic_quantization_exports_and_matches_at_every_batch_size():
    """PT2E dynamic quantization (scale and zero point chosen from each input: choose_qparams, which torchlib does
    not translate) captured with a dynamic batch: the export matches the quantized eager model at other sizes and
    ranges."""
    torch.manual_seed(0)
    model, example = Dynamic().eval(), torch.randn(4, 16)
    config = x86.get_default_x86_inductor_quantization_config(is_dynamic=True)
    captured = torch.export.export(model, (example,), dynamic_shapes={"x": {0: torch.export.Dim("batch")}}).module()
    prepared = pt2e.prepare_pt2e(captured, x86.X86InductorQuantizer().set_global(config))
    prepared(example)
    converted = pt2e.convert_pt2e(prepared)
    assert any("choose_qparams" in str(n.target) for n in converted.graph.nodes)
    proto = exporter.dynamo_export(converted, example, export_options=exporter.ExportOptions(dynamic_shapes=True))
    for x in (torch.randn(7, 16), torch.randn(1, 16) * 100, torch.rand(3, 16)):
        with torch.no_grad():
            want = converted(x).numpy()
        np.testing.assert_allclose(run(proto.model_proto, x), want, rtol=1e-5, atol=1e-5)


def test_a_graph_captured_at_fixed_sizes_says_where_to_make_them_dynamic(quantized_7bit):
    """A PT2E model is a graph torch.export captured: exported with dynamic shapes, the sizes it was captured at
    stay, and the warning says to capture it dynamic (it blamed "the model's code")."""
    _, converted, example, _ = quantized_7bit
    output = exporter.dynamo_export(converted, example, export_options=exporter.ExportOptions(dynamic_shapes=True))
    fixed = [d for d in output.diagnostic_context.diagnostics if d.rule.id == "FXE0020" and "dim" in d.properties]
    assert [(d.properties["dim"], d.properties["size"]) for d in fixed] == list(enumerate(example.shape))
    assert fixed[0].message.startswith("The model is a graph torch.export captured with dimension 0 of input 'x' fixed")
    assert "dynamic_shapes={'x': {0: Dim.AUTO}}" in fixed[0].message


qd = torch.ops.quantized_decomposed


class ChooseAndQuantize(torch.nn.Module):
    """Dynamic quantization's ops as PT2E's graph calls them: scale and zero point, quantized, dequantized."""

    def __init__(self, symmetric: bool, quant_min: int, quant_max: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.symmetric, self.range, self.dtype = symmetric, (quant_min, quant_max), dtype

    def forward(self, x: torch.Tensor):
        choose = qd.choose_qparams_symmetric.tensor if self.symmetric else qd.choose_qparams.tensor
        scale, zero_point = choose(x, *self.range, 1e-5, self.dtype)
        q = qd.quantize_per_tensor.tensor(x, scale, zero_point, *self.range, self.dtype)
        return scale, zero_point, q, qd.dequantize_per_tensor.tensor(q, scale, zero_point, *self.range, self.dtype)


@pytest.mark.parametrize("symmetric", [False, True], ids=["affine", "symmetric"])
@pytest.mark.parametrize(
    "quant_min, quant_max, dtype",
    [(0, 255, torch.uint8), (-128, 127, torch.int8), (0, 127, torch.uint8), (-127, 127, torch.int8)],
    ids=["uint8", "int8", "uint8-7bit", "int8-narrow"],
)
def test_choose_qparams_and_quantize_are_pytorchs_to_the_last_bit(symmetric, quant_min, quant_max, dtype):
    """Equal scales, zero points and quantized values (symmetric quantization puts the extreme value exactly half
    a step out: dividing by the scale instead of multiplying by its inverse rounded it the other way)."""
    model = ChooseAndQuantize(symmetric, quant_min, quant_max, dtype)
    proto = exporter.dynamo_export(
        model, torch.randn(3, 5), export_options=exporter.ExportOptions(dynamic_shapes=True)
    ).model_proto
    inputs = {
        "mixed": torch.randn(3, 5),
        "positive": torch.rand(2, 7) + 0.5,
        "negative": -torch.rand(3, 5) - 1,
        "zeros": torch.zeros(3, 5),
        "wide": torch.randn(4, 5) * 1e4,
        "tiny": torch.randn(3, 5) * 1e-7,
    }
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for name, x in inputs.items():
        got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        for i, (g, want) in enumerate(zip(got, (t.numpy() for t in model(x)))):
            assert (g.dtype, g.shape) == (want.dtype, want.shape), (name, i)
            np.testing.assert_array_equal(g, want, err_msg=f"{name}: output {i}")


def test_eager_mode_quantized_model_gets_a_located_message():
    model = torch.ao.quantization.quantize_dynamic(Dynamic().eval(), {torch.nn.Linear}, dtype=torch.qint8)
    with pytest.raises(exporter.OnnxExporterError, match="prepare_pt2e") as raised:
        exporter.dynamo_export(model, torch.randn(2, 16))
    [error] = [d for d in raised.value.export_output.diagnostic_context.diagnostics if d.level.name == "ERROR"]
    assert error.rule.id == "FXE0017" and error.properties["cause"] == "eager-mode-quantization"
    assert error.location.path == __file__ and error.location.snippet == "h = torch.relu(self.fc1(x))"
