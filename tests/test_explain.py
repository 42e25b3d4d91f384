"""Capture failures explained in the user's terms (`exporter.diagnostics.explain`)."""

from __future__ import annotations

import pytest

from exporter.diagnostics.explain import explain
from exporter.diagnostics.locations import Frame

GUARD = "GuardOnDataDependentSymNode: Could not guard on data-dependent expression Eq(Mod(u0, 2), 0) (unhinted: Eq(Mod(u0, 2), 0))."


class GuardOnDataDependentSymNode(RuntimeError):
    """Named as torch's: `explain` reads the type name and message, as a log does."""


@pytest.mark.parametrize(
    "line, cause",
    [
        ("if h.sum() > 0:", "data-dependent-branch"),
        ("while x.max() > 1:", "data-dependent-branch"),
        ("y = a if x.any() else b", "data-dependent-branch"),
        ("return x.new_zeros(n).view(2, -1)", "data-dependent-value"),
    ],
)
def test_data_dependent_failures_name_the_line_and_the_fix(line, cause):
    explained = explain(GuardOnDataDependentSymNode(GUARD), [Frame("/m/model.py", 12, "forward", line)])
    assert explained.cause == cause
    assert explained.message.startswith(f"`{line}` ")
    assert "u0" not in explained.message + explained.fix  # no symbols of PyTorch's internals
    expected_fix = "torch.cond(" if cause == "data-dependent-branch" else "torch._check("
    assert expected_fix in explained.fix


def test_the_line_is_read_from_the_file_when_the_frame_has_no_snippet(tmp_path):
    model = tmp_path / "m.py"
    model.write_text("def forward(x):\n    if x.sum() > 0:\n        return x\n")
    explained = explain(GuardOnDataDependentSymNode(GUARD), [Frame(str(model), 2, "forward")])
    assert explained.message.startswith("`if x.sum() > 0:` branches on a tensor's values")


def test_other_failures_keep_torchs_message():
    assert (
        explain(
            RuntimeError("mat1 and mat2 shapes cannot be multiplied"), [Frame("/m/model.py", 3, "forward", "y = a @ b")]
        )
        is None
    )
