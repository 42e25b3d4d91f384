"""Op-level debug traces from SARIF line summaries: inlay hints and hovers."""

from __future__ import annotations

from lsprotocol import types

from onnxlens_server import sarif_log, traces

OPS = [
    {
        "fxTarget": "aten.linear.default",
        "onnxOpTypes": ["Gemm"],
        "inputShapes": [["3", "8"], ["4", "8"]],
        "outputShapes": [["3", "4"]],
        "outputDtypes": ["float32"],
        "maxAbsError": 1.5e-7,
        "atol": 1e-5,
        "rtol": 1e-3,
        "ok": True,
    },
    {
        "fxTarget": "aten.sigmoid.default",
        "onnxOpTypes": ["Sigmoid"],
        "inputShapes": [[]],
        "outputShapes": [[]],
        "outputDtypes": ["float32"],
        "maxAbsError": None,
        "ok": False,
        "skipped": "no values",
    },
]


def summary(line: int, mismatches: int) -> dict:
    return {
        "ruleId": "FXE0013",
        "level": "note",
        "message": {"text": "summary"},
        "locations": [
            {"physicalLocation": {"artifactLocation": {"uri": "file:///m/net.py"}, "region": {"startLine": line}}}
        ],
        "properties": {
            "aggregate": "sourceLine",
            "ops": OPS,
            "onnxOpTypes": ["Gemm", "Sigmoid"],
            "maxAbsError": 1.5e-7,
            "mismatches": mismatches,
        },
    }


def test_only_line_summaries_become_traces():
    log = {
        "runs": [
            {
                "results": [
                    summary(3, 0),
                    {**summary(4, 0), "properties": {"aggregate": "node"}},
                    {**summary(5, 0), "ruleId": "FXE0011"},
                ]
            }
        ]
    }
    (trace,) = sarif_log.parse(log).traces
    assert (trace.path, trace.line, trace.op_types, trace.max_abs_error, trace.mismatches) == (
        "/m/net.py",
        2,
        ["Gemm", "Sigmoid"],
        1.5e-7,
        0,
    )


def test_inlay_hint_sits_at_the_line_end_and_marks_mismatches():
    (clean, bad) = sarif_log.parse({"runs": [{"results": [summary(3, 0), summary(4, 2)]}]}).traces
    hint = traces.inlay_hint(clean, "        y = self.fc(x)\r\n")
    assert hint.position == types.Position(2, 22) and hint.label == "Δ 1.5e-07 · Gemm, Sigmoid"
    assert traces.inlay_hint(bad, "x").label == "⚠ 2 ops off · Δ 1.5e-07 · Gemm +1"


def test_hints_stay_short_cutting_op_types_first():
    def label(op_types, mismatches=0, error=0.25):
        return traces.hint_label(sarif_log.LineTrace("/m/net.py", 0, [], op_types, error, mismatches))

    many = ["MatMul", "Add", "Reshape", "Transpose", "Softmax"]
    assert label(many) == "Δ 0.25 · MatMul, Add, Reshape +2"
    assert label(["LayerNormalizationWithAVeryLongName"], 3) == "⚠ 3 ops off · Δ 0.25"
    assert all(len(label(many[:n], m)) <= traces.HINT_WIDTH for n in range(6) for m in (0, 1, 12))


def test_hover_lists_every_op_with_its_numbers():
    (trace,) = sarif_log.parse({"runs": [{"results": [summary(3, 1)]}]}).traces
    rows = traces.hover_markdown(trace).splitlines()
    assert rows[0] == "**onnxlens op-level debug** — 1 mismatch(es)"
    assert (
        rows[4]
        == "| `aten.linear.default` | Gemm | 3×8, 4×8 → 3×4 | float32 | 1.5e-07 | 1e-05 + 0.001·\\|x\\| | $(check) |"
    )
    assert rows[5] == "| `aten.sigmoid.default` | Sigmoid | scalar → scalar | float32 |  |  | $(error) no values |"
