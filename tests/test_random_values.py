"""Values drawn at random (`exporter.verify.seeded`): onnxruntime draws other numbers than PyTorch, so the
checks that compare with eager PyTorch (verification, the second-size check, op-level debug) leave out what
depends on them, say so at the line that draws them, and still find a real divergence beside them."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

import exporter
from exporter.diagnostics import Level
from exporter.outcome import decide
from exporter.verify import seeded

HERE = os.path.realpath(__file__)


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(open(HERE).read().splitlines(), 1) if text in line)


class Noisy(torch.nn.Module):
    """A deterministic output beside three drawn at random: a diffusion step's noise, dropout, and a training-mode
    LSTM's dropout between its layers (an output of a node with several: through ``getitem``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.lstm = torch.nn.LSTM(8, 8, num_layers=2, dropout=0.5)

    def forward(self, x):
        y = self.fc(x)
        noisy = y + 0.1 * torch.randn_like(y)  # MARK: noise
        return y.relu(), noisy, F.dropout(y, 0.5, training=True), self.lstm(y)[0]


class NoisyAndWrong(torch.nn.Module):
    """Noise beside an op onnxruntime computes differently (it floors 1 / 0.1 to 10, PyTorch to 9)."""

    def forward(self, x, counts):
        return x + torch.rand_like(x), counts // 0.1  # MARK: floor-divide


class Attends(torch.nn.Module):
    """Ops torch tags as drawing that draw nothing here: attention without dropout, an LSTM's dropout in evaluation."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 8, num_layers=2, dropout=0.5, batch_first=True)

    def forward(self, x):
        attended = F.scaled_dot_product_attention(x, x, x, is_causal=True)
        return self.lstm(attended)[0]


def export(model, *args, **options):
    return exporter.dynamo_export(model, *args, export_options=exporter.ExportOptions(**options))


def fxe(export_output, rule_id: str) -> list:
    return [d for d in export_output.diagnostic_context.diagnostics if d.rule.id == rule_id and d.level >= Level.NOTE]


def test_what_draws_random_numbers():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    aten = torch.ops.aten
    nodes = {
        "rand_like": graph.call_function(aten.rand_like.default, (x,)),
        "bernoulli": graph.call_function(aten.bernoulli.p, (x, 0.5)),
        "dropout in training": graph.call_function(aten.dropout.default, (x, 0.5, True)),
        "dropout in evaluation": graph.call_function(aten.dropout.default, (x, 0.5, False)),
        "native_dropout, train by name": graph.call_function(aten.native_dropout.default, (x, 0.5), {"train": False}),
        "attention": graph.call_function(aten.scaled_dot_product_attention.default, (x, x, x)),  # dropout_p 0
        "attention with dropout": graph.call_function(aten.scaled_dot_product_attention.default, (x, x, x, None, 0.1)),
        "add": graph.call_function(aten.add.Tensor, (x, x)),
    }
    drawn = {name for name, node in nodes.items() if seeded.draws(node)}
    assert drawn == {"rand_like", "bernoulli", "dropout in training", "attention with dropout"}


def test_verification_leaves_out_the_outputs_drawn_at_random_and_says_where(tmp_path):
    torch.manual_seed(0)
    result = export(Noisy(), torch.randn(3, 2, 8), verify=True)  # no error: nothing diverged that can be compared
    (warning,) = fxe(result, "FXE0021")
    assert warning.level == Level.WARNING and warning.location.line == line_of("# MARK: noise")
    assert warning.properties["randomOutputs"] == [1, 2, 3] and len(warning.properties["outputs"]) == 1
    assert warning.message == (
        "Not verified: outputs 1, 2, 3 depend on random numbers (aten.randn_like.default, aten.dropout.default, "
        "aten.lstm.input), which onnxruntime draws apart from PyTorch, so they cannot be compared; the other 1 "
        "output matches."
    )
    outcome = decide(result.diagnostic_context.diagnostics, name="noisy", model=True)
    assert outcome.kind == "exported"  # neither wrong nor verified


def test_ops_that_draw_nothing_here_are_verified():
    torch.manual_seed(0)
    result = export(Attends().eval(), torch.randn(2, 5, 8), verify=True)
    (note,) = fxe(result, "FXE0021")
    assert note.level == Level.NOTE and note.message.startswith(
        "Verified in onnxruntime against eager PyTorch: 1 output"
    )
    assert decide(result.diagnostic_context.diagnostics, name="attends", model=True).kind == "verified"


def test_a_real_divergence_beside_random_numbers_is_still_found_at_its_line():
    assert (torch.tensor([1.0]) // 0.1).item() == 9.0  # PyTorch's answer; onnxruntime gives 10
    try:
        export(NoisyAndWrong(), torch.randn(4), torch.tensor([1.0, 2.0]), verify=True)
    except exporter.OnnxExporterError as e:
        (error,) = e.export_output.diagnostic_context.errors()
    assert error.properties["divergingOutputs"] == [1]
    assert error.location.line == line_of("# MARK: floor-divide")
    assert error.message.startswith("First divergence from eager PyTorch in onnxruntime: aten.floor_divide")


def test_the_second_size_check_and_op_level_debug_leave_them_out():
    torch.manual_seed(0)
    result = export(Noisy(), torch.randn(3, 2, 8), dynamic_shapes=True, op_level_debug=True)
    checks = [d.message for d in fxe(result, "FXE0020") if "Second-size check" in d.message]
    assert len(checks) == 1 and checks[0].startswith("Second-size check passed at "), checks
    assert not [d for d in fxe(result, "FXE0020") if d.level >= Level.WARNING]  # not even as numerics
    assert not [d for d in fxe(result, "FXE0013") if d.level >= Level.WARNING]  # the drawing ops are skipped
