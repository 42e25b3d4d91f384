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


@pytest.fixture(scope="module")
def quantized():
    torch.manual_seed(0)
    model = Net().eval()
    example = torch.randn(4, 3, 8, 8)
    captured = torch.export.export(model, (example,)).module()
    quantizer = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
    prepared = pt2e.prepare_pt2e(captured, quantizer)
    for _ in range(8):
        prepared(torch.randn(4, 3, 8, 8))  # calibration
    converted = pt2e.convert_pt2e(prepared)
    return model, converted, example, exporter.dynamo_export(converted, example).model_proto


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


def test_matches_the_quantized_eager_model_within_one_step(quantized):
    model, converted, example, proto = quantized
    inputs = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: inputs.numpy()})[0]
    with torch.no_grad():
        want, fp32 = converted(inputs).numpy(), model(inputs).numpy()
    # one step of fc2's quantized input moves an output by at most its scale times a row's |weights|
    fc2_input = [n for n in converted.graph.nodes if "quantize_per_tensor" in str(n.target)][-1]
    scale = float(fc2_input.args[1])
    step = scale * np.abs(model.fc2.weight.detach().numpy()).sum(1).max()
    assert np.abs(got - want).max() <= step
    assert np.abs(fp32 - want).max() > np.abs(got - want).max()  # the quantized model, not the float one


class Dynamic(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        return self.fc2(h)


def test_eager_mode_quantized_model_gets_a_located_message():
    model = torch.ao.quantization.quantize_dynamic(Dynamic().eval(), {torch.nn.Linear}, dtype=torch.qint8)
    with pytest.raises(exporter.OnnxExporterError, match="prepare_pt2e") as raised:
        exporter.dynamo_export(model, torch.randn(2, 16))
    [error] = [d for d in raised.value.export_output.diagnostic_context.diagnostics if d.level.name == "ERROR"]
    assert error.rule.id == "FXE0017" and error.properties["cause"] == "eager-mode-quantization"
    assert error.location.path == __file__ and error.location.snippet == "h = torch.relu(self.fc1(x))"
