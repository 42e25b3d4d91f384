"""``onnxlens-export`` as a user meets it: located results and a summary, one clear line per user
error, outputs checked before exporting, nothing temporary left behind. Run through the installed
console script (never from PATH)."""

from __future__ import annotations

import os
import subprocess
import textwrap

import onnx
import pytest
from helpers import console_script

MODELS = textwrap.dedent(
    """\
    import torch
    import exporter


    class DataDependent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            h = self.fc(x)
            if h.sum() > 0:
                return h * 2
            return h


    class Labelled(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] > 100:
                return x
            return "a label"


    @exporter.export_target
    def branchy():
        return DataDependent(), (torch.randn(2, 4),)


    @exporter.export_target
    def labelled():
        return Labelled(), (torch.randn(2),)


    @exporter.export_target
    def small():
        return torch.nn.Linear(2, 3), (torch.randn(1, 2),)
    """
)


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [console_script("onnxlens-export"), *map(str, args)], capture_output=True, text=True, timeout=600, cwd=cwd
    )


def _leftovers(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.startswith(".tmp"))


def test_a_capture_failure_prints_the_located_result_and_a_summary_only(models, tmp_path):
    result = _cli(f"{models}:branchy", "-o", tmp_path / "b.onnx", "--sarif", tmp_path / "b.sarif")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith(f"{models}:{_line(MODELS, 'if h.sum() > 0:')}: error FXE0017 ")
    assert lines[1].startswith("FAILED branchy: ")
    assert len(lines) == 2, result.stderr  # no torch log lines, graph dumps or hints
    assert not (tmp_path / "b.onnx").exists()

    verbose = _cli(f"{models}:branchy", "-o", tmp_path / "b.onnx", "--verbose")
    assert "[torch.fx.experimental.symbolic_shapes]" in verbose.stderr
    assert "def forward(self" in verbose.stderr  # the partial graph torch prints


def test_torch_logs_are_in_the_sarif_log_at_debug_verbosity(models, tmp_path):
    import json

    _cli(f"{models}:branchy", "--sarif", tmp_path / "debug.sarif", "--verbosity", "debug")
    _cli(f"{models}:branchy", "--sarif", tmp_path / "info.sarif")
    debug = json.loads((tmp_path / "debug.sarif").read_text())["runs"][0]["invocations"][0]
    info = json.loads((tmp_path / "info.sarif").read_text())["runs"][0]["invocations"][0]
    sources = {n["properties"]["source"] for n in debug["toolExecutionNotifications"]}
    assert {"torch.fx.experimental.symbolic_shapes", "stderr"} <= sources
    assert "toolExecutionNotifications" not in info


def test_a_string_output_is_an_error_at_the_return_line(models, tmp_path):
    result = _cli(f"{models}:labelled", "-o", tmp_path / "l.onnx")
    assert result.returncode == 1
    line = _line(MODELS, 'return "a label"')
    assert result.stderr.startswith(f"{models}:{line}: error FXE0018 The model returns a str ('a label')")
    assert not (tmp_path / "l.onnx").exists()


@pytest.mark.parametrize(
    "source, where, error",
    [
        ("import torch\n\ndef f(:\n    pass\n", "3:7", "SyntaxError: invalid syntax"),
        ("import torch\n\nSIZE = int('a')\n", "3", "ValueError: invalid literal for int() with base 10: 'a'"),
        (
            "import sys\n\nsys.exit(3)\n",
            "3",
            "UserExit: sys.exit(3) was called while importing broken.py (a script's code runs at import: "
            'put it under `if __name__ == "__main__":`)',
        ),
    ],
    ids=["syntax-error", "exception-at-import", "exit-at-import"],
)
def test_a_broken_model_file_is_one_located_line(tmp_path, source, where, error):
    path = tmp_path / "broken.py"
    path.write_text(source)
    result = _cli(path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"{path}:{where}: error: {error}"


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda d: ["-o", d / "folder"], "folder is a directory"),
        (lambda d: ["-o", d / "model.txt"], "must end in .onnx"),
        (lambda d: ["-o", d / "ok.onnx", "--sarif", d / "log.json"], "must end in .sarif"),
        (lambda d: ["-o", d / "ok.onnx", "--sarif", d / "models.py" / "log.sarif"], "is not a directory"),
        (lambda d: ["-o", d / "ok.onnx", "--sarif", d / "readonly" / "log.sarif"], "permission denied"),
    ],
    ids=["output-is-a-directory", "output-suffix", "sarif-suffix", "sarif-under-a-file", "sarif-unwritable"],
)
def test_bad_output_paths_fail_before_exporting_and_leave_nothing(models, tmp_path, make_args, message):
    (tmp_path / "folder").mkdir()
    (tmp_path / "readonly").mkdir(mode=0o500)
    if os.geteuid() == 0 and "permission denied" in message:
        pytest.skip("root can write anywhere")
    result = _cli(f"{models}:small", *make_args(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith("onnxlens-export: error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "exported" not in result.stdout
    assert not (tmp_path / "ok.onnx").exists()
    assert _leftovers(tmp_path) == [] and _leftovers(tmp_path / "folder") == []


def test_a_successful_export_prints_the_summary(models, tmp_path):
    result = _cli(f"{models}:small", "-o", tmp_path / "s.onnx", "--sarif", tmp_path / "s.sarif")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith(f"exported small -> {tmp_path / 's.onnx'}\n  1 inputs, 1 outputs, ")
    assert [o.name for o in onnx.load(tmp_path / "s.onnx").graph.output] == ["linear"]
    assert _leftovers(tmp_path) == []


def test_dynamic_shapes_takes_a_json_spec(tmp_path):
    model = tmp_path / "head.py"
    model.write_text(
        "import torch, exporter\n\n\n"
        "@exporter.export_target\n"
        "def head():\n"
        "    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Softmax(-1)), (torch.randn(1, 4),)\n"
    )
    result = _cli(f"{model}:head", "-o", tmp_path / "h.onnx", "--dynamic-shapes", '{"input": {"0": "batch"}}')
    assert result.returncode == 0, result.stderr
    (graph_input,) = onnx.load(tmp_path / "h.onnx").graph.input
    assert [d.dim_param or d.dim_value for d in graph_input.type.tensor_type.shape.dim] == [
        "batch",
        4,
    ]  # a batch-1 example
    bad = _cli(f"{model}:head", "--dynamic-shapes", "{batch}")
    assert bad.returncode == 2 and "--dynamic-shapes: not JSON" in bad.stderr


OUTCOME_MODELS = textwrap.dedent(
    """\
    import torch
    import exporter


    class FixesEveryDim(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(x).reshape(8)


    class FloorDivides(torch.nn.Module):
        def forward(self, counts):
            return counts // 0.1


    @exporter.export_target
    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()), (torch.randn(2, 8),)


    @exporter.export_target(dynamic_shapes=True)
    def dyn():
        return FixesEveryDim(), (torch.randn(2, 8),)


    @exporter.export_target
    def divides():
        return FloorDivides(), (torch.tensor([1, 3, 7]),)
    """
)


@pytest.fixture
def outcome_models(tmp_path):
    path = tmp_path / "outcomes.py"
    path.write_text(OUTCOME_MODELS)
    return path


def test_a_verified_export_says_verified(outcome_models, tmp_path):
    result = _cli(f"{outcome_models}:mlp", "-o", tmp_path / "m.onnx", "--verify")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"verified mlp -> {tmp_path / 'm.onnx'}"
    assert lines[1].startswith("  Exported mlp, verified in onnxruntime: 1 output matches (max abs error ")
    assert lines[2].startswith("  1 inputs, 1 outputs, ")


def test_a_wrong_model_fails_the_command_and_says_wrong(outcome_models, tmp_path):
    result = _cli(f"{outcome_models}:divides", "-o", tmp_path / "d.onnx", "--verify")
    assert result.returncode == 1
    line = _line(OUTCOME_MODELS, "return counts // 0.1")
    lines = result.stderr.strip().splitlines()
    wrong = f"WRONG divides: divides's model is wrong: output 0 diverges at outcomes.py:{line} (floor_divide)"
    assert lines[-2] == wrong
    assert lines[-1] == f"  the model is kept to inspect: {tmp_path / 'd.onnx'}"
    assert (tmp_path / "d.onnx").is_file() and "exported" not in result.stdout


def test_a_degraded_export_says_degraded_and_exits_0_unless_warnings_are_errors(outcome_models, tmp_path):
    result = _cli(f"{outcome_models}:dyn", "-o", tmp_path / "s.onnx")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == [
        f"degraded dyn -> {tmp_path / 's.onnx'}",
        "  Exported dyn, but its dimensions are all static: x[2, 8] (asked dynamic: x dim 0, x dim 1)",
    ]
    line = _line(OUTCOME_MODELS, "return self.fc(x).reshape(8)")
    warnings = result.stderr.splitlines()
    assert len(warnings) == 3 and all(w.startswith(f"{outcome_models}:{line}: warning FXE0020 ") for w in warnings[:2])
    assert warnings[2].startswith("warning FXE0020 Every dimension asked to be dynamic came out static")
    strict = _cli(f"{outcome_models}:dyn", "-o", tmp_path / "strict.onnx", "--warnings-as-errors")
    assert strict.returncode == 1 and "FAILED dyn: " in strict.stderr


def test_a_spec_that_fixes_a_dim_says_which_one(outcome_models, tmp_path):
    result = _cli(f"{outcome_models}:mlp", "-o", tmp_path / "b.onnx", "--dynamic-shapes", '{"input": {"0": 2}}')
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == [
        f"degraded mlp -> {tmp_path / 'b.onnx'}",
        "  Exported mlp, but the graph accepts only these sizes: input dim 0 = 2",
    ]
