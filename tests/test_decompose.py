"""Decomposition node by node: only the nodes the registry cannot translate change, they keep the
user's source line, and in-place ops are rewritten only where nothing else sees the mutation."""

from __future__ import annotations

import pytest
import torch
from helpers import assert_matches_eager

import exporter
from exporter.capture.extractor import FXGraphExtractor
from exporter.diagnostics import DiagnosticContext
from exporter.diagnostics.locations import stack_of
from exporter.passes import decompose
from exporter.translate.registry import default_registry


def _line(fn, text: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


class Std(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        spread = torch.std(y, dim=1)  # aten.std.dim: no torchlib function, decomposed
        return spread + 1


class InPlaceOnPrivate(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        before = y.sum()
        y.add_(1)
        y.relu_()
        return y, before


class InPlaceThroughView(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        row = y[0]
        row.add_(10)  # mutates y through the view
        return y


class InPlaceAfterView(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        flat = y.view(-1)
        y.mul_(3)  # flat sees this
        return flat


class SliceAssignments(torch.nn.Module):
    """Swin's shifted-window mask: regions of a fresh tensor filled by slice assignment, then read."""

    def forward(self, x):
        mask = x.new_zeros((x.shape[-2], x.shape[-1]))
        count = 0
        for rows in (slice(0, -2), slice(-2, -1), slice(-1, None)):
            for cols in (slice(0, -2), slice(-2, None)):
                mask[rows, cols] = count
                count += 1
        mask[0] += 5  # a select, and an in-place add through it
        return x + mask


class SliceAssignmentSeenThroughAnEarlierView(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        row = y[0]
        y[:, 1] = 5  # row sees this
        return row


class InPlaceThatWouldPromote(torch.nn.Module):
    def forward(self, x, scale):
        y = x.half() * 2
        y.add_(scale)  # in place: stays float16; add(y, scale) would be float32
        return y


def _capture(model, *args, dynamic=False):
    return FXGraphExtractor().generate_fx(model, args, {}, dynamic_shapes=dynamic, ctx=DiagnosticContext())


def _targets(program) -> set:
    return {n.target for n in program.graph.nodes if n.op == "call_function"}


@pytest.fixture
def no_whole_program_decomposition(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("run_decompositions re-traced the whole program")

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", fail)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_decomposed_node_keeps_its_source_line(no_whole_program_decomposition, dynamic):
    program = _capture(Std(), torch.randn(3, 5), dynamic=dynamic)
    assert torch.ops.aten.std.correction in _targets(program) or torch.ops.aten.std.dim in _targets(program)
    before = {n.name for n in program.graph.nodes}
    program = decompose.decompose(program, default_registry())
    new = [n for n in program.graph.nodes if n.op == "call_function" and n.name not in before]
    assert new and not (_targets(program) & {torch.ops.aten.std.dim, torch.ops.aten.std.correction})
    expected = _line(Std.forward, "torch.std(")
    assert {(stack_of(n)[0].path, stack_of(n)[0].line) for n in new} == {(__file__, expected)}
    assert decompose.untranslatable_targets(program, default_registry()) == set()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_decomposed_models_match_eager(dynamic):
    x = torch.randn(3, 5)
    export_output = exporter.dynamo_export(Std(), x, export_options=exporter.ExportOptions(dynamic_shapes=dynamic))
    assert_matches_eager(export_output, Std(), (x,))
    if dynamic:
        other = torch.randn(4, 7)
        assert_matches_eager(export_output, Std(), (x,), run_args=(other,))


def test_in_place_ops_on_a_private_tensor_become_functional(no_whole_program_decomposition, monkeypatch):
    program = _capture(InPlaceOnPrivate(), torch.randn(2, 3))
    tables = []  # building the decomposition table costs ~2 ms: only what is decomposed needs it
    monkeypatch.setattr(decompose, "onnx_friendly_decomposition_table", lambda *a: tables.append(a) or {})
    program = decompose.decompose(program, default_registry())
    assert tables == []
    targets = _targets(program)
    assert torch.ops.aten.add_.Tensor not in targets and torch.ops.aten.relu_.default not in targets
    assert {torch.ops.aten.add.Tensor, torch.ops.aten.relu.default} <= targets


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_slice_assignments_to_a_private_tensor_become_scatters(no_whole_program_decomposition, dynamic):
    """Without the whole-program re-trace, which took ~170 s of a dynamic Swin export."""
    x = torch.randn(2, 6, 7)
    export_output = exporter.dynamo_export(
        SliceAssignments(), x, export_options=exporter.ExportOptions(dynamic_shapes=dynamic)
    )
    assert_matches_eager(export_output, SliceAssignments(), (x,))
    if dynamic:
        assert_matches_eager(export_output, SliceAssignments(), (x,), run_args=(torch.randn(3, 9, 5),))


@pytest.mark.parametrize(
    "model",
    [InPlaceOnPrivate, InPlaceThroughView, InPlaceAfterView, SliceAssignmentSeenThroughAnEarlierView],
    ids=lambda m: m.__name__,
)
def test_in_place_ops_compute_what_eager_computes(model):
    x = torch.randn(2, 3)
    assert_matches_eager(exporter.dynamo_export(model(), x), model(), (x,))


def test_an_in_place_op_whose_functional_form_promotes_is_left_to_functionalization():
    x, scale = torch.randn(2, 3), torch.randn(3)
    export_output = exporter.dynamo_export(InPlaceThatWouldPromote(), x, scale)
    assert_matches_eager(export_output, InPlaceThatWouldPromote(), (x, scale), atol=1e-2, rtol=1e-2)


class TwoShapes(torch.nn.Module):
    """Three hard shrinks (an operator torchlib does not translate): two on tensors of one shape,
    one on a tensor twice as wide."""

    def forward(self, x):
        y = torch.nn.functional.hardshrink(torch.nn.functional.hardshrink(x, 0.7) * 3, 0.7)
        return torch.nn.functional.hardshrink(torch.cat([y, -y], dim=1), 0.7)


class Conversions(torch.nn.Module):
    """`to` calls that return their input, one that does not, and a view of the input's storage in
    another shape (`reshape_as`: an alias that is not the input)."""

    def forward(self, x):
        same = x.to(torch.float32).to(x.device).contiguous() * 2
        return same, x.t().to(torch.int64), same.to(dtype=torch.float32, device=x.device), x.reshape_as(x.t())


@pytest.fixture
def traced(monkeypatch) -> list:
    """The functions `decompose` traces, in order (make_fx still runs)."""
    calls = []
    make_fx = decompose.make_fx

    def counting_make_fx(fn, **kwargs):
        calls.append(fn)
        return make_fx(fn, **kwargs)

    monkeypatch.setattr(decompose, "make_fx", counting_make_fx)
    return calls


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_conversions_translate_without_a_trace_and_the_no_op_ones_vanish(
    no_whole_program_decomposition, traced, dynamic
):
    x = torch.randn(3, 5) * 4
    program = _capture(Conversions(), x, dynamic=dynamic)
    assert sum(n.op == "call_function" and n.target._schema.name == "aten::to" for n in program.graph.nodes) == 4
    decompose.decompose(program, default_registry())
    assert len(traced) == 1  # reshape_as
    export_output = exporter.dynamo_export(
        Conversions(), x, export_options=exporter.ExportOptions(dynamic_shapes=dynamic)
    )
    ops = [n.op_type for n in export_output.model_proto.graph.node]
    assert ops.count("Cast") == 1 and "Identity" not in ops  # only the cast to int64
    assert_matches_eager(export_output, Conversions(), (x,))
    if dynamic:
        assert_matches_eager(export_output, Conversions(), (x,), run_args=(torch.randn(4, 2) * 4,))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_nodes_with_one_signature_share_one_trace(no_whole_program_decomposition, traced, dynamic):
    model, x = TwoShapes(), torch.randn(2, 4, 5, 5)
    program = _capture(model, x, dynamic=dynamic)
    assert sum(n.target == torch.ops.aten.hardshrink.default for n in program.graph.nodes) == 3
    decompose.decompose(program, default_registry())
    assert len(traced) == 2  # width 4 once, width 8 once
    export_output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(dynamic_shapes=dynamic))
    assert_matches_eager(export_output, model, (x,))
    if dynamic:
        assert_matches_eager(export_output, model, (x,), run_args=(torch.randn(3, 4, 7, 6),))


def test_batch_norm_translates_without_a_trace(no_whole_program_decomposition, traced):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(inplace=True)).eval()
    program = _capture(model, torch.randn(2, 3, 8, 8))
    assert decompose.untranslatable_targets(program, default_registry()) == {torch.ops.aten.relu_.default}
    decompose.decompose(program, default_registry())
    assert traced == []  # relu_ became relu; batch_norm is translated as it is
    assert torch.ops.aten.batch_norm.default in _targets(program)


class Cosine(torch.nn.Module):
    def forward(self, a, b):
        return torch.nn.functional.cosine_similarity(a, b, dim=1)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_decomposition_that_mutates_its_temporaries_is_spliced_functionally(no_whole_program_decomposition, dynamic):
    """cosine_similarity's decomposition clamps its norms in place (``clamp_min_``)."""
    a, b = torch.randn(3, 5), torch.randn(3, 5)
    program = decompose.decompose(_capture(Cosine(), a, b, dynamic=dynamic), default_registry())
    assert not any(t._schema.is_mutable for t in _targets(program) if hasattr(t, "_schema"))
    assert decompose.untranslatable_targets(program, default_registry()) == set()
    export_output = exporter.dynamo_export(
        Cosine(), a, b, export_options=exporter.ExportOptions(dynamic_shapes=dynamic)
    )
    assert_matches_eager(export_output, Cosine(), (a, b))
    a[0] = 0.0  # a zero norm: the clamp to eps is what keeps it finite
    assert_matches_eager(
        export_output, Cosine(), (a, b), run_args=(a, b) if not dynamic else (torch.cat([a, a]), torch.cat([b, b]))
    )


def test_a_node_whose_trace_fails_sends_the_program_through_the_whole_decomposition(monkeypatch):
    """XLNet's dynamic export traces a node whose input carries a symbol without a range."""

    def failing_make_fx(*args, **kwargs):
        raise AssertionError("vr must not be None for symbol s53")

    monkeypatch.setattr(decompose, "make_fx", failing_make_fx)
    x = torch.randn(3, 5)
    program = decompose.decompose(_capture(Std(), x), default_registry())
    assert decompose.untranslatable_targets(program, default_registry()) == set()
    export_output = exporter.dynamo_export(Std(), x)
    assert_matches_eager(export_output, Std(), (x,))


class Ensemble(torch.nn.Module):
    """``torch.vmap`` inside ``forward``: an ensemble of linear maps over one input, and nested vmaps (``in_dims``)
    for the dot products of all pairs of rows of another."""

    def __init__(self) -> None:
        super().__init__()
        self.weights = torch.nn.Parameter(torch.randn(4, 8, 6))

    def forward(self, x, y):
        members = torch.vmap(lambda w: (x @ w).relu())(self.weights)
        pairs = torch.vmap(torch.vmap(torch.dot, in_dims=(None, 0)), in_dims=(0, None))(
            y, y
        )  # every row with every row
        return members, pairs


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_vmap_in_forward_exports(dynamic):
    """torch.export keeps vmap's own functions in the graph (``_add_batch_dim`` …): only its re-trace lowers them."""
    torch.manual_seed(0)
    model, args = Ensemble(), (torch.randn(3, 8), torch.randn(5, 6))
    export_output = exporter.dynamo_export(model, *args, export_options=exporter.ExportOptions(dynamic_shapes=dynamic))
    assert_matches_eager(export_output, model, args)
    if dynamic:
        assert_matches_eager(export_output, model, args, run_args=(torch.randn(7, 8), torch.randn(2, 6)))
