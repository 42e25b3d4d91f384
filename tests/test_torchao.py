"""Models quantized in place with torchao's quantize_ (weight-only int8/intx/float8, int8 dynamic activations):
exported, verified in onnxruntime against the quantized eager model, static and with dynamic shapes, without
warnings (float8 tensors drew "no ONNX function accepts the input types" for their transposes and casts)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import exporter

quantization = pytest.importorskip("torchao.quantization")

CONFIGS = [
    "Int8WeightOnlyConfig",
    "Int8DynamicActivationInt8WeightConfig",  # int8 × int8 products: aten._int_mm
    "IntxWeightOnlyConfig",
    "Float8WeightOnlyConfig",
]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("config", CONFIGS)
def test_quantized_model_is_verified_without_warnings(config, dynamic):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 16)).eval()
    quantization.quantize_(model, getattr(quantization, config)())
    options = exporter.ExportOptions(verify=True, dynamic_shapes=dynamic)
    output = exporter.dynamo_export(model, torch.randn(4, 64), export_options=options)
    diagnostics = output.diagnostic_context.diagnostics
    assert [d.message for d in diagnostics if d.level.name in ("WARNING", "ERROR")] == []
    assert any(d.rule.id == "FXE0021" and d.message.startswith("Verified in onnxruntime") for d in diagnostics)


class IntMM(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch._int_mm(a, b)


def test_int_mm_sums_in_int32_to_the_last_bit():
    """Full-range int8 operands, -128 × -128 in every product included: no saturation."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (32, 256), dtype=torch.int8, generator=generator)
    b = torch.randint(-128, 128, (256, 24), dtype=torch.int8, generator=generator)
    proto = exporter.dynamo_export(IntMM(), a, b).model_proto
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for x, y in (
        (a, b),
        (torch.full((32, 256), -128, dtype=torch.int8), torch.full((256, 24), -128, dtype=torch.int8)),
    ):
        (got,) = session.run(None, {"a": x.numpy(), "b": y.numpy()})
        want = x.numpy().astype(np.int64) @ y.numpy().astype(np.int64)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)
