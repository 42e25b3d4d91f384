"""Verification in onnxruntime (FXE0021): injected faults are found at their line, with a reproducer.

Each fault is a translation registered with `OnnxRegistry.register_op` that computes something a
little different from the ATen op; the expected line is the fixture's marker for that op's call,
and the expected errors are computed here with numpy/torch, not by the code under test.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import onnx.helper
import onnx_ir as ir
import onnxruntime as ort
import onnxscript
import pytest
import torch
from fixtures import diverging_models as models
from helpers import validate_sarif
from onnxscript import opset18 as op

import exporter
from exporter.diagnostics import Level

MODEL_FILE = os.path.realpath(models.__file__)
fault = onnxscript.values.Opset("onnxlens.test.fault", 1)


@onnxscript.script(fault)
def sigmoid_one_percent_high(x):
    return op.Mul(op.Sigmoid(x), op.CastLike(op.Constant(value_float=1.01), x))


@onnxscript.script(fault)
def softmax_without_max(self, dim: int, dtype: int = -1):
    """exp(x) / sum(exp(x)): right for small scores, inf/inf = NaN once a score passes ~88 in float32."""
    e = op.Exp(self)
    axes = op.Reshape(op.Constant(value_int=dim), op.Constant(value_ints=[1]))
    return op.Div(e, op.ReduceSum(e, axes, keepdims=1))


@onnxscript.script(fault)
def mean_ten_ppm_high(self, dim: list[int], keepdim: bool = False, dtype: int = -1):
    return op.Mul(
        op.ReduceMean(self, op.Constant(value_ints=dim), keepdims=keepdim),
        op.CastLike(op.Constant(value_float=1.00001), self),
    )


@onnxscript.script(fault)
def norm_five_percent_high(self, ord: float, dim: list[int], keepdim: bool, dtype: int = -1):
    return op.Mul(
        op.ReduceL2(self, op.Constant(value_ints=dim), keepdims=keepdim),
        op.CastLike(op.Constant(value_float=1.05), self),
    )


def line_of(marker: str) -> int:
    with open(MODEL_FILE) as f:
        for number, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# MARK: {marker}"):
                return number
    raise LookupError(marker)


def registry_with(function, name: str, overload: str | None = None) -> exporter.OnnxRegistry:
    registry = exporter.OnnxRegistry()
    registry.register_op(function, "aten", name, overload)
    return registry


def verified_failure(model, *args, registry) -> exporter.ExportOutput:
    with pytest.raises(exporter.OnnxExporterError, match="FXE0021") as info:
        exporter.dynamo_export(model, *args, export_options=exporter.ExportOptions(verify=True, onnx_registry=registry))
    return info.value.export_output


def accuracy_errors(export_output: exporter.ExportOutput) -> list:
    return [
        d for d in export_output.diagnostic_context.diagnostics if d.rule.id == "FXE0021" and d.level == Level.ERROR
    ]


def only_error_at(export_output: exporter.ExportOutput, marker: str):
    errors = accuracy_errors(export_output)
    assert len(errors) == 1, [e.message for e in errors]
    error = errors[0]
    assert (os.path.realpath(error.location.path), error.location.line) == (MODEL_FILE, line_of(marker)), error.message
    return error


def test_slightly_wrong_translation_is_found_at_its_line(tmp_path):
    torch.manual_seed(0)
    model, x = models.Gated().eval(), torch.randn(5, 16)
    failed = verified_failure(model, x, registry=registry_with(sigmoid_one_percent_high, "sigmoid"))
    error = only_error_at(failed, "gated-sigmoid")
    with torch.no_grad():  # the gate's exact error: sigmoid(g) * 0.01
        expected_error = float((torch.sigmoid(model.gate(torch.relu(model.inp(x)))) * 0.01).max())
    props = error.properties
    assert props["fxTarget"] == "aten.sigmoid.default"
    assert set(props["onnxOpTypes"]) >= {"Sigmoid", "Mul"}
    assert props["nodeMaxAbsError"] == pytest.approx(expected_error, rel=1e-3)
    assert (props["nodeAtol"], props["nodeRtol"]) == (1e-4, 1e-3)
    assert props["inheritedDivergences"] >= 2  # the mix line and the output inherit it
    assert props["unoptimizedModelMatches"] is False  # the translation, not the optimizer
    assert props["isolatedNodeDiverges"] is True  # wrong on PyTorch's own inputs too
    assert "aten.sigmoid.default" in error.message and "Sigmoid" in error.message
    # One more onnxruntime session over the model for the bisection (plus the model's, the unoptimized
    # model's and the reproducer's), one run each.
    assert props["ortSessions"] == props["ortRuns"] == 4 and props["nodesCompared"] >= 6
    output = props["outputs"][0]
    assert output["ok"] is False and sum(output["errorHistogram"].values()) == output["elements"] == 5 * 8
    failed.save(tmp_path / "gated.onnx")
    failed.save_diagnostics(tmp_path / "gated.sarif")
    log = validate_sarif(tmp_path / "gated.sarif")
    [result] = [r for r in log["runs"][0]["results"] if r["ruleId"] == "FXE0021" and r["level"] == "error"]
    assert result["properties"]["reproducer"] == str(tmp_path / "gated_repro")
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == line_of("gated-sigmoid")
    # In the editor: a problem at that line whose related information opens the reproducer's run.py.
    from onnxlens_server.sarif_log import parse
    from onnxlens_server.sarif_to_lsp import diagnostics_by_path

    [problem] = [d for d in diagnostics_by_path(parse(log))[MODEL_FILE] if d.code == "FXE0021"]
    assert problem.range.start.line == line_of("gated-sigmoid") - 1
    assert problem.related_information[-1].location.uri == (tmp_path / "gated_repro" / "run.py").as_uri()
    # Hovers: each line's values in onnxruntime; the error starts at the sigmoid's line.
    traces = {t.line + 1: t for t in parse(log).traces if t.path == MODEL_FILE}
    assert traces[line_of("gated-relu")].mismatches == 0 and traces[line_of("gated-relu")].max_abs_error < 1e-5
    assert traces[line_of("gated-sigmoid")].mismatches == 1
    assert traces[line_of("gated-sigmoid")].max_abs_error == pytest.approx(expected_error, rel=1e-3)
    assert traces[line_of("gated-mix")].mismatches >= 1


def test_reproducer_exits_1_with_the_fault_and_0_without(tmp_path):
    torch.manual_seed(0)
    failed = verified_failure(
        models.Gated().eval(), torch.randn(5, 16), registry=registry_with(sigmoid_one_percent_high, "sigmoid")
    )
    failed.save(tmp_path / "gated.v2.onnx")
    repro = tmp_path / "gated.v2_repro"
    assert sorted(os.listdir(repro)) == ["expected.npz", "inputs.npz", "model.onnx", "run.py"]
    model = onnx.load(repro / "model.onnx")
    assert sorted(n.op_type for n in model.graph.node) == [
        "Mul",
        "Sigmoid",
    ]  # the node only, no weights of other layers
    assert os.path.getsize(repro / "model.onnx") < 2000
    run = subprocess.run([sys.executable, str(repro / "run.py")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "DIFFERS" in run.stdout
    # Remove the fault: the same inputs and outputs, computed by a plain Sigmoid.
    [inp], [out] = model.graph.input, model.graph.output
    del model.graph.node[:], model.graph.initializer[:]
    model.graph.node.append(onnx.helper.make_node("Sigmoid", [inp.name], [out.name]))
    onnx.save(model, repro / "model.onnx")
    run = subprocess.run([sys.executable, str(repro / "run.py")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    # The inputs are PyTorch's values of the node's input, the expected output its sigmoid.
    inputs, expected = np.load(repro / "inputs.npz"), np.load(repro / "expected.npz")
    np.testing.assert_allclose(expected[out.name], torch.sigmoid(torch.from_numpy(inputs[inp.name])).numpy(), rtol=1e-6)


def test_softmax_overflowing_only_at_the_models_scale():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 16)
    registry = registry_with(softmax_without_max, "softmax", "int")
    small = exporter.dynamo_export(
        models.ScaledAttention(0.25).eval(),
        x,
        export_options=exporter.ExportOptions(verify=True, onnx_registry=registry),
    )
    assert accuracy_errors(small) == []  # fine in isolation, at unit scale
    model = models.ScaledAttention(40.0).eval()
    with torch.no_grad():
        scores = model.q(x) @ model.k(x).transpose(-1, -2) * 40.0
    assert scores.max() > 88.8  # exp overflows float32 at this model's activation scale
    error = only_error_at(verified_failure(model, x, registry=registry), "attention-softmax")
    assert error.properties["nodeMaxAbsError"] == float("inf")
    assert error.properties["fxTarget"] == "aten.softmax.int"


def test_float16_model_diverges_at_one_op():
    torch.manual_seed(0)
    model, x = models.NormalizedHalf().eval().half(), torch.randn(4, 64).half()
    error = only_error_at(
        verified_failure(model, x, registry=registry_with(norm_five_percent_high, "linalg_vector_norm")),
        "half-normalize",
    )
    with torch.no_grad():
        norm = (model.up(x) * 3).float().norm(dim=-1)
    assert error.properties["nodeMaxAbsError"] == pytest.approx(float(norm.max()) * 0.05, rel=2e-2)
    assert (error.properties["nodeAtol"], error.properties["nodeRtol"]) == (1e-2, 1e-2)
    assert error.properties["outputDtypes"] == ["float16"]


def test_verify_on_given_inputs_and_no_error_when_exact(tmp_path):
    torch.manual_seed(0)
    model, x = models.Gated().eval(), torch.randn(5, 16)
    export_output = exporter.dynamo_export(model, x)
    verification = export_output.verify(torch.randn(5, 16) * 3)
    assert verification.ok and verification.ort_sessions == 1
    [note] = [d for d in export_output.diagnostic_context.diagnostics if d.rule.id == "FXE0021"]
    assert note.level == Level.NOTE and note.properties["outputs"][0]["maxAbsError"] < 1e-5
    faulty = exporter.dynamo_export(
        model,
        x,
        export_options=exporter.ExportOptions(onnx_registry=registry_with(sigmoid_one_percent_high, "sigmoid")),
    )
    assert accuracy_errors(faulty) == []  # not verified unless asked
    verification = faulty.verify(torch.randn(5, 16) * 3)
    assert (
        not verification.ok and verification.unoptimized_matches is None
    )  # no unoptimized model kept without verify=True
    only_error_at(faulty, "gated-sigmoid")
    faulty.save(tmp_path / "m.onnx")
    assert (tmp_path / "m_repro" / "run.py").is_file()


def test_tolerances_are_overridable():
    torch.manual_seed(0)
    options = exporter.ExportOptions(
        verify=True,
        onnx_registry=registry_with(sigmoid_one_percent_high, "sigmoid"),
        verify_tolerances={"float32": (0.05, 0.05)},
    )
    export_output = exporter.dynamo_export(models.Gated().eval(), torch.randn(5, 16), export_options=options)
    assert accuracy_errors(export_output) == []
    with pytest.raises(ValueError, match="unknown dtypes"):
        exporter.ExportOptions(verify=True, verify_tolerances={"fp32": (1, 1)})


def test_bisection_in_chunks_finds_the_same_node():
    """A tiny activation budget: one onnxruntime run per compared value, the same first divergence."""
    from exporter.api import Exporter
    from exporter.verify import divergence, numerics

    torch.manual_seed(0)
    model, x = models.Gated().eval(), torch.randn(5, 16)
    job = Exporter(
        exporter.ExportOptions(onnx_registry=registry_with(sigmoid_one_percent_high, "sigmoid")), model, (x,), {}
    )
    export_output = job.export()
    feeds = {"x": x.numpy()}
    program = job._verifier.program
    whole = divergence.bisect(program, export_output.model, feeds, (x,), {}, numerics.tolerances())
    chunked = divergence.bisect(program, export_output.model, feeds, (x,), {}, numerics.tolerances(), budget_bytes=1)
    assert whole.ort_runs == 1 and chunked.ort_runs == chunked.compared > 1
    assert whole.divergence.node.name == chunked.divergence.node.name == "sigmoid"
    assert whole.divergence.inherited == chunked.divergence.inherited


class _SigmoidToHardSigmoid(ir.passes.InPlacePass):
    """A wrong "optimization": Sigmoid → HardSigmoid (off by up to 0.07), keeping the node's tags."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        nodes = [n for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.op_type == "Sigmoid"]
        for node in nodes:
            node.op_type = "HardSigmoid"
        return ir.passes.PassResult(model, modified=bool(nodes))


def test_a_divergence_the_optimizer_introduced_is_blamed_on_it(monkeypatch):
    from exporter.onnx_passes import finalize

    real = finalize.OptimizePass

    class FaultyOptimizePass(ir.passes.Sequential):
        def __init__(self) -> None:
            super().__init__(real(), _SigmoidToHardSigmoid())

    monkeypatch.setattr(finalize, "OptimizePass", FaultyOptimizePass)
    torch.manual_seed(0)
    failed = verified_failure(models.Gated().eval(), torch.randn(5, 16), registry=None)
    error = only_error_at(failed, "gated-sigmoid")
    assert error.properties["onnxOpTypes"] == ["HardSigmoid"]
    assert error.properties["unoptimizedModelMatches"] is True
    assert "comes from the ONNX optimizer" in error.message


CLI_MODEL = """\
import onnxscript
import torch
from onnxscript import opset18 as op

import exporter

fault = onnxscript.values.Opset("onnxlens.test.fault", 1)


@onnxscript.script(fault)
def sigmoid_one_percent_high(x):
    return op.Mul(op.Sigmoid(x), op.CastLike(op.Constant(value_float=1.01), x))


class Gated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.gate = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        return h * torch.sigmoid(self.gate(h))  # the gate


@exporter.export_target
def gated():
    torch.manual_seed(0)
    if FAULT:
        exporter.default_registry().register_op(sigmoid_one_percent_high, "aten", "sigmoid")
    return Gated().eval(), (torch.randn(3, 8),)
"""


@pytest.mark.parametrize("faulty", [True, False])
def test_cli_verify_prints_the_line_and_fails(tmp_path, faulty):
    from helpers import console_script

    source = tmp_path / "gated.py"
    source.write_text(f"FAULT = {faulty}\n" + CLI_MODEL)
    line = 1 + next(i for i, text in enumerate(CLI_MODEL.splitlines(), 1) if "# the gate" in text)
    out = tmp_path / "out" / "g.onnx"
    run = subprocess.run(
        [
            console_script("onnxlens-export"),
            f"{source}:gated",
            "-o",
            str(out),
            "--verify",
            "--sarif",
            str(tmp_path / "g.sarif"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if not faulty:
        assert run.returncode == 0, run.stderr
        log = validate_sarif(tmp_path / "g.sarif")
        assert [r["level"] for r in log["runs"][0]["results"] if r["ruleId"] == "FXE0021"] == ["note"]
        assert not (tmp_path / "out" / "g_repro").exists()
        return
    assert run.returncode == 1, run.stderr
    errors = [text for text in run.stderr.splitlines() if ": error FXE" in text]
    assert len(errors) == 1 and errors[0].startswith(f"{source}:{line}: error FXE0021 First divergence"), run.stderr
    assert f"Reproducer: {tmp_path / 'out' / 'g_repro'}/run.py" in errors[0]
    assert out.is_file() and (tmp_path / "out" / "g_repro" / "run.py").is_file()
    assert (
        subprocess.run([sys.executable, str(tmp_path / "out" / "g_repro" / "run.py")], capture_output=True).returncode
        == 1
    )


def test_comparison_numbers_and_histogram():
    from exporter.verify.numerics import compare, tolerances

    expected = np.array([1.0, 2.0, -4.0, 0.0, np.inf, np.nan], dtype=np.float32)
    actual = np.array([1.0, 2.0 + 3e-6, -4.5, 2e-3, np.inf, np.nan], dtype=np.float32)
    c = compare(actual, expected, "float32", tolerances(), histogram=True)
    # |2e-3 - 0| > 1e-4 and |-4.5 + 4| > 1e-4 + 1e-3 * 4: two elements out of tolerance; inf and NaN agree.
    assert (c.ok, c.mismatched, c.elements) == (False, 2, 6)
    assert c.max_abs_error == pytest.approx(0.5) and c.max_rel_error == pytest.approx(0.125)
    assert c.histogram == {
        "0": 3,
        "<=1e-07": 0,
        "<=1e-06": 0,
        "<=1e-05": 1,
        "<=0.0001": 0,
        "<=0.001": 0,
        "<=0.01": 1,
        "<=0.1": 0,
        "<=1": 1,
        ">1": 0,
    }
    nan_where_finite = compare(
        np.array([np.nan], np.float32), np.array([1.0], np.float32), "float32", tolerances(), histogram=True
    )
    assert (
        not nan_where_finite.ok
        and nan_where_finite.max_abs_error == float("inf")
        and nan_where_finite.histogram[">1"] == 1
    )
    assert compare(np.array([3, 4]), np.array([3, 5]), "int64", tolerances()).mismatched == 1  # integers exact
    assert (
        compare(np.zeros((2, 3)), np.zeros((3, 2)), "float32", tolerances()).problem == "shape [2, 3] vs PyTorch [3, 2]"
    )


def test_sessions_share_the_weights_and_leave_the_model_as_it_was():
    from exporter.verify import ort_session

    torch.manual_seed(0)
    model, x = (
        torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3)).eval(),
        torch.randn(2, 64),
    )
    export_output = exporter.dynamo_export(model, x)
    before = {name: v.const_value for name, v in export_output.model.graph.initializers.items()}
    session = ort_session.session(export_output.model)
    assert {name: v.const_value for name, v in export_output.model.graph.initializers.items()} == before
    shared = {name for name, t in model.state_dict().items() if t.numel() * 4 >= 1024}  # smaller ones stay inline
    assert {name for name, _ in session.onnxlens_weights} == shared == {"0.weight"}
    with torch.no_grad():
        np.testing.assert_allclose(session.run(None, {"input": x.numpy()})[0], model(x).numpy(), atol=1e-5)


def test_an_error_within_tolerance_that_a_later_op_amplifies_is_said_to_be_amplified():
    torch.manual_seed(0)
    model, x = models.Centered().eval(), torch.randn(3, 16)
    failed = verified_failure(model, x, registry=registry_with(mean_ten_ppm_high, "mean", "dim"))
    error = only_error_at(failed, "centered-sub")
    with torch.no_grad():
        mean = model.up(x).mean(-1)
    # The mean is off by 1e-5 * 1e4 = 0.1, within 1e-4 + 1e-3 * 1e4; h - mean is near 0, so 0.1 is far out.
    assert float((mean * 1e-5).max()) < 1e-4 + 1e-3 * float(mean.min())
    assert error.properties["fxTarget"] == "aten.sub.Tensor"
    assert error.properties["isolatedNodeDiverges"] is False
    assert "amplifies differences of its inputs that are within tolerance" in error.message


def test_rows_that_trade_places_among_tied_scores_match():
    """Detections of equal scores may come out in either order; any other difference still fails."""
    from exporter.verify.numerics import compare_outputs, tolerances

    scores = np.array([0.9, 0.5 + 2e-7, 0.5 + 1e-7, 0.5, 0.1], np.float32)  # sorted; rows 1-3 tie within tolerance
    boxes = np.arange(20, dtype=np.float32).reshape(5, 4)
    labels = np.array([3, 1, 2, 4, 5])
    swap = [0, 3, 1, 2, 4]  # the tied rows in another order
    ok = compare_outputs([scores[swap], boxes[swap], labels[swap]], [scores, boxes, labels], tolerances())
    assert [c.ok for c in ok] == [True, True, True]
    across = [1, 0, 2, 3, 4]  # 0.9 and 0.5 are not tied
    assert [
        c.ok for c in compare_outputs([scores, boxes[across], labels[across]], [scores, boxes, labels], tolerances())
    ] == [
        True,
        False,
        False,
    ]
    moved = boxes[swap].copy()
    moved[1, 0] += 0.5  # a tied row whose box is not PyTorch's
    assert not all(
        c.ok for c in compare_outputs([scores[swap], moved, labels[swap]], [scores, boxes, labels], tolerances())
    )


@onnxscript.script(onnxscript.values.Opset("onnxlens.test", 1))
def _sort_ties_last_first(self, dim: int = -1, descending: bool = False, stable: bool = False):
    """A 1-D descending sort whose ties come out highest index first (TopK of the reversed input)."""
    size = op.Shape(self)
    reversed_ = op.Slice(
        self,
        op.Constant(value_ints=[-1]),
        op.Constant(value_ints=[-9223372036854775807]),
        op.Constant(value_ints=[0]),
        op.Constant(value_ints=[-1]),
    )
    values, indices = op.TopK(reversed_, size, axis=0, largest=1, sorted=1)
    return values, op.Sub(op.Sub(size, op.Constant(value_ints=[1])), indices)


class _SortedDetections(torch.nn.Module):
    def forward(self, scores, boxes):
        values, order = torch.sort(scores, descending=True)
        return values, boxes[order]


def test_a_sort_whose_ties_come_out_in_another_order_is_verified():
    import onnxruntime as ort

    registry = exporter.OnnxRegistry()
    registry.register_op(_sort_ties_last_first, "aten", "sort")
    scores = torch.tensor([0.5, 0.9, 0.5, 0.1, 0.9, 0.5])
    boxes = torch.arange(24, dtype=torch.float32).reshape(6, 4)
    options = exporter.ExportOptions(onnx_registry=registry, verify=True, dynamic_shapes=True)
    result = exporter.dynamo_export(_SortedDetections(), scores, boxes, export_options=options)
    session = ort.InferenceSession(result.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    onnx_values, onnx_boxes = session.run(
        None, {i.name: x.numpy() for i, x in zip(session.get_inputs(), (scores, boxes))}
    )
    eager_values, order = torch.sort(scores, descending=True, stable=True)
    np.testing.assert_array_equal(onnx_values, eager_values.numpy())
    assert not np.array_equal(onnx_boxes, boxes[order].numpy())  # the ties' rows in the other order
    assert sorted(map(tuple, onnx_boxes)) == sorted(map(tuple, boxes[order].numpy()))
    diagnostics = result.diagnostic_context.diagnostics
    assert not [d for d in diagnostics if d.level == Level.ERROR], [d.message for d in diagnostics]
    assert any("Verified in onnxruntime" in d.message for d in diagnostics)


class TopIndices(torch.nn.Module):
    """The indices of each row's 3 largest scores, masked scores at -inf: equal values that PyTorch's CPU ``topk``
    and onnxruntime's ``TopK`` order differently."""

    def forward(self, scores, mask):
        return scores.masked_fill(~mask, float("-inf")).topk(3, -1).indices  # MARK: tied topk


@onnxscript.script(fault)
def topk_smallest(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """The k smallest instead of the largest: other values, not other elements of the same values."""
    values, indices = op.TopK(
        self, op.Reshape(op.Constant(value_int=k), op.Constant(value_ints=[1])), axis=dim, largest=0
    )
    return values, indices


def _tied_scores() -> tuple[torch.Tensor, torch.Tensor]:
    scores = torch.tensor([[2.0, 2.0, 2.0, 2.0, 2.0], [0.5, 0.1, 0.9, 0.3, 0.7]])
    mask = torch.tensor([[True] * 5, [True, False, True, False, False]])
    return scores, mask


def test_indices_that_pick_other_elements_of_equal_values_are_not_a_divergence():
    import onnxruntime as ort

    scores, mask = _tied_scores()
    result = exporter.dynamo_export(TopIndices(), scores, mask, export_options=exporter.ExportOptions(verify=True))
    session = ort.InferenceSession(result.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (ort_indices,) = session.run(None, {"scores": scores.numpy(), "mask": mask.numpy()})
    eager = TopIndices()(scores, mask)
    assert not np.array_equal(ort_indices, eager.numpy())  # the two order the equal values differently …
    masked = scores.masked_fill(~mask, float("-inf"))
    assert torch.equal(masked.gather(1, torch.from_numpy(ort_indices)), masked.gather(1, eager))  # … of equal values
    (warning,) = [d for d in result.diagnostic_context.diagnostics if d.rule.id == "FXE0021"]
    assert warning.level == Level.WARNING and warning.properties["tiedOutputs"] == [0]
    assert warning.message.startswith("Verified in onnxruntime against eager PyTorch but for the order of equal values")
    assert warning.location.line == _line("# MARK: tied topk")
    debugged = exporter.dynamo_export(
        TopIndices(), scores, mask, export_options=exporter.ExportOptions(op_level_debug=True)
    )  # op by op too: the topk alone, on PyTorch's inputs, is right
    assert not [
        d for d in debugged.diagnostic_context.diagnostics if d.rule.id == "FXE0013" and d.level >= Level.WARNING
    ]


def test_indices_of_other_values_are_still_a_divergence():
    registry = exporter.OnnxRegistry()
    registry.register_op(topk_smallest, "aten", "topk")
    options = exporter.ExportOptions(onnx_registry=registry, verify=True)
    with pytest.raises(exporter.OnnxExporterError, match="First divergence") as info:
        exporter.dynamo_export(TopIndices(), *_tied_scores(), export_options=options)
    (error,) = info.value.export_output.diagnostic_context.errors()
    assert error.message.startswith("First divergence from eager PyTorch in onnxruntime: aten.topk.default")


def _line(marker: str) -> int:
    return next(i for i, line in enumerate(open(__file__).read().splitlines(), 1) if marker in line)


class PaddedEncoder(torch.nn.Module):
    """nn.TransformerEncoder as people write it: enable_nested_tensor left True, a padding mask."""

    def __init__(self) -> None:
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2)

    def forward(self, x: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        return self.encoder(x, src_key_padding_mask=padding) * 2  # MARK: encoder


def test_a_transformer_encoders_nested_tensors_are_a_warning_not_a_divergence():
    """In inference, eager PyTorch runs the encoder on nested tensors, which give 0 at padded positions; the graph
    computes them (torch.export captures the regular path). Verified against the regular path, with a warning at
    the line calling the encoder (it was an FXE0021 error: 'the outputs do')."""
    torch.manual_seed(0)
    model = PaddedEncoder().eval()
    x, padding = torch.randn(2, 4, 16), torch.tensor([[False, False, True, True], [False, False, False, True]])
    output = exporter.dynamo_export(model, x, padding, export_options=exporter.ExportOptions(verify=True))
    with torch.no_grad():
        nested = model(x, padding)  # the fast path, as eager PyTorch runs it
    assert torch.equal(nested[padding], torch.zeros_like(nested[padding]))
    session = ort.InferenceSession(output.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = [a.numpy() for a in output.adapt_torch_inputs_to_onnx(x, padding)]
    (got,) = session.run(None, dict(zip([i.name for i in session.get_inputs()], feeds)))
    np.testing.assert_allclose(got[~padding.numpy()], nested[~padding].numpy(), rtol=1e-4, atol=1e-5)
    assert np.abs(got[padding.numpy()]).min() > 0  # computed where eager gives 0
    [warning] = [d for d in output.diagnostic_context.diagnostics if d.level == Level.WARNING]
    assert warning.rule.id == "FXE0021" and "nn.TransformerEncoder 'encoder' on nested tensors" in warning.message
    assert "enable_nested_tensor=False" in warning.message and warning.properties["nestedTensorEncoders"] == ["encoder"]
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# MARK: encoder" in text)
    assert (warning.stack[0].path, warning.stack[0].line) == (os.path.realpath(__file__), line)

    unpadded = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(verify=True))
    assert not [d for d in unpadded.diagnostic_context.diagnostics if d.level >= Level.WARNING]


def test_inputs_onnxruntime_refuses_fail_the_verification_rather_than_skip_it():
    """Only a missing kernel (onnxruntime's NotImplemented: bf16 on the CPU provider) skips a verification: a run
    onnxruntime refuses (here a static graph given another batch size) was 'Verification skipped', a pass."""
    output = exporter.dynamo_export(torch.nn.Linear(4, 3), torch.randn(5, 4))
    verification = output.verify(torch.randn(7, 4))
    assert not verification.ok and verification.skipped is None
    assert verification.diagnostic.message.startswith("onnxruntime cannot run the exported model: InvalidArgument")
    assert "Got invalid dimensions for input" in verification.diagnostic.message


def test_a_missing_kernel_still_skips_the_verification():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()).to(torch.bfloat16)
    output = exporter.dynamo_export(
        model, torch.randn(2, 4, dtype=torch.bfloat16), export_options=exporter.ExportOptions(verify=True)
    )
    [note] = [d for d in output.diagnostic_context.diagnostics if d.rule.id == "FXE0021"]
    assert note.level == Level.NOTE and note.message.startswith("Verification skipped: onnxruntime does not run")
