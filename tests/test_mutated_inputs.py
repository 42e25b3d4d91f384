"""Checks that run eager PyTorch for a reference never let the model mutate the inputs onnxruntime then gets.

Each model here mutates its input in place (``x.add_(1)``) before using it; the exported graph computes
the same from the user's values. A check that ran eager PyTorch on the user's tensors would feed
onnxruntime the mutated ones (x + 1, whose output is that of x + 2) and report a divergence that is not
there — the second-size check did (issue 31: FXE0020 "max abs error 1.99"). Expected values are
computed here with torch from copies of the inputs.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import onnxscript
import pytest
import torch
from onnxscript import opset18 as op

import exporter
from exporter.constants import Prop
from exporter.diagnostics import Level


class AddsOneInPlace(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 4)

    def forward(self, x):
        x.add_(1)
        return torch.relu(self.linear(x))


def model_and_input(batch: int = 4) -> tuple[AddsOneInPlace, torch.Tensor]:
    torch.manual_seed(0)
    return AddsOneInPlace().eval(), torch.randn(batch, 3)


def reference(model: AddsOneInPlace, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return torch.relu(model.linear(x + 1)).numpy()


def reports(export_output: exporter.ExportOutput, rule: str) -> list:
    return [d for d in export_output.diagnostic_context.diagnostics if d.rule.id == rule]


def run(export_output: exporter.ExportOutput, x: torch.Tensor) -> np.ndarray:
    session = ort.InferenceSession(export_output.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


def test_second_size_check_passes_and_the_graph_runs_at_other_sizes():
    model, x = model_and_input()
    before = x.clone()
    result = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(dynamic_shapes=True))
    [check] = [d for d in reports(result, "FXE0020") if "secondSizeCheck" in d.properties]
    assert check.level == Level.NOTE and check.properties["secondSizeCheck"] == "passed", check.message
    assert torch.equal(x, before)  # the user's tensor is as it was
    for batch in (4, 7):
        y = torch.randn(batch, 3)
        np.testing.assert_allclose(run(result, y), reference(model, y), atol=1e-5)


def test_verify_matches_and_compares_the_users_values():
    model, x = model_and_input()
    before = x.clone()
    result = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(verify=True))
    [check] = reports(result, "FXE0021")
    assert check.level == Level.NOTE and check.message.startswith("Verified in onnxruntime"), check.message
    assert check.properties["outputs"][0]["maxAbsError"] < 1e-5
    assert torch.equal(x, before)
    np.testing.assert_allclose(run(result, x), reference(model, before), atol=1e-5)


fault = onnxscript.values.Opset("onnxlens.test.mutated", 1)


@onnxscript.script(fault)
def relu_as_abs(self):
    return op.Abs(self)


def test_divergence_is_measured_on_the_users_values():
    """A wrong relu (|y| for max(y, 0)): verify fails and the bisection finds relu, with the error of
    |y| against relu(y) for y = linear(x + 1) — not of y = linear(x + 2), as a mutated input would give."""
    model, x = model_and_input()
    before = x.clone()
    registry = exporter.OnnxRegistry()
    registry.register_op(relu_as_abs, "aten", "relu")
    with pytest.raises(exporter.OnnxExporterError, match="FXE0021") as info:
        exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(verify=True, onnx_registry=registry))
    [error] = [d for d in reports(info.value.export_output, "FXE0021") if d.level == Level.ERROR]
    assert torch.equal(x, before)
    with torch.no_grad():
        y = model.linear(before + 1)
    expected = float((y.abs() - torch.relu(y)).abs().max())
    assert expected > 0.1
    assert error.properties["fxTarget"] == "aten.relu.default"
    assert error.properties["nodeMaxAbsError"] == pytest.approx(expected, rel=1e-4)
    assert error.properties["outputs"][0]["maxAbsError"] == pytest.approx(expected, rel=1e-4)


def test_op_level_debug_sees_the_users_values():
    model, x = model_and_input()
    before = x.clone()
    result = exporter.dynamo_export(
        model, x, export_options=exporter.ExportOptions(op_level_debug=True, verify=True, dynamic_shapes=True)
    )
    ops = [o for d in reports(result, "FXE0013") for o in d.properties.get(Prop.OPS, [])]
    assert {o["fxTarget"] for o in ops} >= {"aten.add.Tensor", "aten.relu.default"}
    assert all(o["ok"] and o["maxAbsError"] < 1e-5 for o in ops), ops
    assert torch.equal(x, before)
    np.testing.assert_allclose(run(result, x), reference(model, x), atol=1e-5)


def test_generation_check_leaves_the_prompt_and_mask_as_given(tmp_path):
    """A causal LM whose forward attends to the first position in place (``attention_mask[:, 0] = 1``)
    generates in onnxruntime like eagerly, and the user's mask keeps its padding."""
    from transformers import GPT2Config, GPT2LMHeadModel

    class AttendsFirst(GPT2LMHeadModel):
        def forward(self, input_ids=None, past_key_values=None, attention_mask=None, **kwargs):
            if attention_mask is not None:
                attention_mask[:, 0] = 1
            return super().forward(input_ids, past_key_values=past_key_values, attention_mask=attention_mask, **kwargs)

    torch.manual_seed(0)
    config = GPT2Config(
        n_embd=32,
        n_layer=1,
        n_head=2,
        n_positions=64,
        vocab_size=100,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    model = AttendsFirst(config).eval()
    prompt = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 11, 12, 13]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    given = mask.clone()
    result = exporter.export_for_generation(
        model, tmp_path, prompt=prompt, attention_mask=mask, max_new_tokens=4, sarif=False
    )
    assert result.parity is not None and result.parity.matched and result.parity.steps == 4
    assert torch.equal(mask, given)
