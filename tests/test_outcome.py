"""`exporter.outcome`: one rule for what an export's outcome is (failed, wrong, degraded, verified,
exported), decided for real exports of small models by the runner (`exporter.runner.export_target`),
carried by `ExportResult.to_message` and recorded in the SARIF log's run properties."""

from __future__ import annotations

import json
import os

import onnx
import onnxscript
import torch
import transformers
from helpers import validate_sarif
from onnxscript import opset18 as op

import exporter
from exporter.constants import OUTCOME_PROPERTY
from exporter.runner import export_target

HERE = os.path.realpath(__file__)


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(open(HERE).read().splitlines(), 1) if text in line)


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


class FloorDivides(torch.nn.Module):
    def forward(self, counts):
        return counts // 0.1  # integer floor division: PyTorch floors 1 / 0.1 to 9, onnxruntime to 10


class FixesEveryDim(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x).reshape(8)  # fixes the batch (2 * 4 = 8); the weight fixes the width


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent: no graph
            return x * 2
        return x


@torch.library.custom_op("onnxlens_outcome::tripled", mutates_args=())
def tripled(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@tripled.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


stub_opset = onnxscript.values.Opset("custom.onnxlens_outcome", 1)


@onnxscript.script(stub_opset)
def onnxlens_outcome_tripled(x):
    """The FXE0011 quick fix's stub: its first input unchanged."""
    return op.Identity(x)


class Triples(torch.nn.Module):
    def forward(self, x):
        return tripled(x) + 1  # a custom op, translated by the stub


@exporter.export_target
def mlp():
    torch.manual_seed(0)
    return MLP(), (torch.randn(2, 8),)


@exporter.export_target
def divides():
    return FloorDivides(), (torch.tensor([1, 3, 7]),)


@exporter.export_target(dynamic_shapes=True)
def dyn():
    return FixesEveryDim(), (torch.randn(2, 8),)


class FloorsWholeNumbers(torch.nn.Module):
    def forward(self, x):
        return (x.round().abs() + 1) // 0.1  # differs from eager at every size, in any graph, static or dynamic


@exporter.export_target(dynamic_shapes=True)
def floors():
    return FloorsWholeNumbers(), (torch.randn(2, 8),)


@exporter.export_target
def branchy():
    return Branchy(), (torch.randn(2, 4),)


@exporter.export_target
def stubbed():
    exporter.default_registry().register_op(onnxlens_outcome_tripled, "onnxlens_outcome", "tripled", "default")
    return Triples(), (torch.randn(2, 4),)


@exporter.export_target(task="text-generation", precision="fp16")
def mixtral_fp16():
    from tiny_lms import tiny_model

    return tiny_model("mixtral")


class FloorDividingLM(transformers.GPT2LMHeadModel):
    """A GPT-2 whose token 7 gets a bonus of 100 × (10·n − n // 0.1), n the tokens it is given: 100 in PyTorch
    (which floors n / 0.1 to 10·n − 1), 0 in onnxruntime (which floors it to 10·n)."""

    def forward(self, input_ids=None, **kwargs):
        out = super().forward(input_ids, **kwargs)
        n = (input_ids >= 0).sum(-1, keepdim=True).float()
        bonus = torch.nn.functional.one_hot(torch.tensor(7), self.config.vocab_size) * 100 * (10 * n - n // 0.1)
        out.logits = out.logits + bonus.unsqueeze(1)
        return out


@exporter.export_target(task="text-generation")
def floor_dividing_lm():
    from tiny_lms import CONFIGS

    torch.manual_seed(0)
    return FloorDividingLM(CONFIGS["gpt2"]()).eval()


def export(fn, tmp_path, **overrides):
    stem = str(tmp_path / fn.__name__)
    return export_target(fn, {}, overrides, stem + ".onnx", stem + ".sarif")


def logged_outcome(result) -> dict:
    """The outcome the SARIF log records, the log checked against the SARIF 2.1.0 schema."""
    return validate_sarif(result.sarif)["runs"][0]["properties"][OUTCOME_PROPERTY]


def test_a_plain_export_is_exported_info(tmp_path):
    result = export(mlp, tmp_path)
    outcome = {"kind": "exported", "headline": "Exported mlp", "severity": "info", "fixedDims": []}
    assert (result.outcome.kind, result.outcome.severity) == ("exported", "info")
    assert result.to_message()["outcome"] == outcome
    assert logged_outcome(result) == result.to_message()["outcome"]


def test_a_verified_export_says_how_close_every_output_is(tmp_path):
    result = export(mlp, tmp_path, verify=True)
    assert (result.outcome.kind, result.outcome.severity) == ("verified", "info")
    # The error as computed here, independently: onnxruntime on the written model against eager PyTorch.
    import onnxruntime as ort

    torch.manual_seed(0)
    model, x = MLP(), torch.randn(2, 8)
    (actual,) = ort.InferenceSession(result.onnx).run(None, {"x": x.numpy()})
    worst = float(abs(actual - model(x).detach().numpy()).max())
    assert result.outcome.headline == (
        f"Exported mlp, verified in onnxruntime: 1 output matches (max abs error {worst:.3g})"
    )
    assert logged_outcome(result)["kind"] == "verified"


def test_a_verification_divergence_is_a_wrong_model_that_is_kept(tmp_path):
    assert (torch.tensor([1]) // 0.1).item() == 9.0  # what PyTorch computes: the divergence is real
    result = export(divides, tmp_path, verify=True)
    assert result.status == "failed" and os.path.isfile(result.onnx)  # the model and its reproducer are kept
    assert (result.outcome.kind, result.outcome.severity) == ("wrong", "error")
    line = line_of("return counts // 0.1")
    assert result.outcome.headline == (
        f"divides's model is wrong: output 0 diverges at test_outcome.py:{line} (floor_divide)"
    )
    assert logged_outcome(result)["kind"] == "wrong"


def test_a_stub_inserted_by_the_quick_fix_is_a_wrong_model(tmp_path):
    result = export(stubbed, tmp_path)
    assert result.status == "ok"  # the export itself succeeds: only the check says the model is wrong
    assert (result.outcome.kind, result.outcome.severity) == ("wrong", "error")
    line = line_of("return tripled(x) + 1")
    assert result.outcome.headline == (
        f"stubbed's model is wrong: the ONNX function registered for tripled computes other numbers than PyTorch "
        f"at test_outcome.py:{line}"
    )


def test_an_fp16_model_further_from_fp32_than_pytorchs_fp16_is_wrong(monkeypatch, tmp_path):
    """A generation folder written and measured (FXE0023), whose fp16 graph agrees with fp32 on far fewer
    tokens than PyTorch's own fp16 model (the Mixtral with its histc halved again): not a success."""
    from exporter.generation import quantize

    monkeypatch.setattr(quantize, "_FP32_ONLY", ())
    result = export_target(mixtral_fp16, {}, {}, str(tmp_path / "folder"), str(tmp_path / "log.sarif"))
    assert result.status == "ok" and os.path.isfile(tmp_path / "folder" / "model.onnx")
    assert (result.outcome.kind, result.outcome.severity) == ("wrong", "error")
    assert result.outcome.headline.startswith("mixtral_fp16's model is wrong: Quality of the fp16: ")
    assert result.outcome.headline.endswith("so the export loses more than fp16 rounding does.")
    assert logged_outcome(result)["kind"] == "wrong"


def test_a_generation_divergence_is_a_wrong_model_whose_folder_is_kept(tmp_path):
    n = torch.arange(1, 64, dtype=torch.float32)
    assert ((10 * n - n // 0.1) == 1).all()  # what PyTorch computes: eager always chooses token 7, by 100
    folder = tmp_path / "folder"
    result = export_target(floor_dividing_lm, {}, {}, str(folder), str(tmp_path / "log.sarif"))
    assert result.status == "failed" and result.message.startswith("FXE0022 Generation diverges at step 0")
    assert result.onnx == str(folder / "model.onnx") and {"model.onnx", "model.onnx.data"} <= set(result.files)
    assert all(os.path.isfile(folder / name) for name in result.files)  # the folder is kept to inspect
    assert (result.outcome.kind, result.outcome.severity) == ("wrong", "error")
    assert result.outcome.headline.startswith(
        "floor_dividing_lm's model is wrong: Generation diverges at step 0 (prompt 0): generate() chose token 7,"
    )
    assert logged_outcome(result)["kind"] == "wrong"


def test_dynamic_shapes_that_all_come_out_static_is_a_degraded_warning(tmp_path):
    result = export(dyn, tmp_path)
    (graph_input,) = onnx.load(result.onnx).graph.input
    assert [d.dim_param or d.dim_value for d in graph_input.type.tensor_type.shape.dim] == [2, 8]
    assert (result.outcome.kind, result.outcome.severity) == ("degraded", "warning")
    assert result.outcome.headline == (
        "Exported dyn, but its dimensions are all static: x[2, 8] (asked dynamic: x dim 0, x dim 1)"
    )
    fixed = [{"input": "x", "dim": 0, "size": 2}, {"input": "x", "dim": 1, "size": 8}]
    assert result.to_message()["outcome"]["fixedDims"] == fixed
    log = validate_sarif(result.sarif)
    levels = {r["message"]["text"]: r["level"] for r in log["runs"][0]["results"] if r["ruleId"] == "FXE0020"}
    summary = (
        "Every dimension asked to be dynamic came out static (x dim 0, x dim 1): the graph's inputs are "
        "x[2, 8], and it accepts only these sizes."
    )
    assert levels.pop(summary) == "warning"
    assert len(levels) == 2 and set(levels.values()) == {"warning"}  # each fixed dim, at the line that fixed it
    assert log["runs"][0]["properties"][OUTCOME_PROPERTY]["kind"] == "degraded"


def test_a_spec_that_fixes_a_dim_to_a_number_is_degraded_and_says_which(tmp_path):
    result = export(mlp, tmp_path, dynamic_shapes={"x": {"0": 2}})  # torch's suggested fix "batch = 2", applied
    assert (result.outcome.kind, result.outcome.severity) == ("degraded", "warning")
    assert result.outcome.headline == "Exported mlp, but the graph accepts only these sizes: x dim 0 = 2"
    assert result.to_message()["outcome"]["fixedDims"] == [{"input": "x", "dim": 0, "size": 2}]
    assert logged_outcome(result)["fixedDims"] == [{"input": "x", "dim": 0, "size": 2}]


def test_numerics_a_static_graph_shares_at_a_second_size_are_not_degraded(tmp_path):
    """The second-size check's numerics warning (FXE0020): the dimensions are dynamic, so not degraded; the
    headline says that other sizes are as far from eager as a static export."""
    result = export(floors, tmp_path)
    assert (result.outcome.kind, result.outcome.severity) == ("exported", "info")
    assert result.outcome.headline == (
        "Exported floors (at other sizes as far from eager PyTorch as a static export there: FXE0020)"
    )
    [warning] = [r for r in validate_sarif(result.sarif)["runs"][0]["results"] if r["level"] == "warning"]
    assert warning["ruleId"] == "FXE0020" and warning["properties"]["secondSizeCheck"] == "numerics"


def test_a_model_that_fails_to_capture_failed(tmp_path):
    result = export(branchy, tmp_path)
    assert result.onnx is None and not (tmp_path / "branchy.onnx").exists()
    assert (result.outcome.kind, result.outcome.severity) == ("failed", "error")
    assert result.outcome.headline.startswith("Export of branchy failed: ")
    assert "data" in result.outcome.headline.lower() or "capture" in result.outcome.headline.lower()
    assert logged_outcome(result)["kind"] == "failed"


def test_an_error_in_the_target_itself_failed_without_a_log(tmp_path):
    @exporter.export_target
    def broken():
        raise ValueError("no weights here")

    result = export(broken, tmp_path)
    assert result.to_message()["outcome"] == {
        "kind": "failed",
        "headline": "Export of broken failed: ValueError: no weights here",
        "severity": "error",
        "fixedDims": [],
    }
    assert not os.path.exists(tmp_path / "broken.sarif")


def test_partly_static_under_dynamic_shapes_true_is_not_degraded(tmp_path):
    """The width fixed by the weight is expected under dynamic_shapes=True (a note): the batch stays
    dynamic."""
    result = export(mlp, tmp_path, dynamic_shapes=True)
    (graph_input,) = onnx.load(result.onnx).graph.input
    assert [d.dim_param or d.dim_value for d in graph_input.type.tensor_type.shape.dim] == ["x_dim_0", 8]
    assert result.outcome.kind == "exported"
    log = json.load(open(result.sarif))
    levels = {r["message"]["text"]: r["level"] for r in log["runs"][0]["results"] if r["ruleId"] == "FXE0020"}
    assert levels.pop("Symbolic dimensions of the graph: x_dim_0.") == "note"
    assert any("fixes dimension 1 of input 'x' to 8" in text for text in levels)
    assert set(levels.values()) == {"note"}
