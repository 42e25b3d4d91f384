"""Two exports of a model compared (`onnxlens_server.graph_diff`): real exports of a small model whose code
differs by one line, checked against the ONNX models' own op counts and the model files' lines."""

from __future__ import annotations

import collections
import importlib.util
import pathlib
import shutil

import onnx
import onnx.inliner
import torch

import exporter
from onnxlens_server.graph import graph_json
from onnxlens_server.graph_diff import compare

MODEL = """import torch


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = self.fc1(x)  # the first layer
        h = torch.relu(h)  # the activation
        return self.fc2(h)  # the second layer
"""


def export(folder: pathlib.Path, name: str, source: str) -> tuple[pathlib.Path, pathlib.Path]:
    """`source` written to `folder`/small.py (as the user edits the file), its `Small` exported to
    `folder`/`name`.onnx; the model file and the model."""
    folder.mkdir(exist_ok=True)
    path = folder / "small.py"
    path.write_text(source)
    # A same-sized edit within the same second would otherwise import the previous text's bytecode.
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
    spec = importlib.util.spec_from_file_location(f"diff_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    onnx_path = folder / f"{name}.onnx"
    exporter.dynamo_export(module.Small().eval(), torch.randn(3, 8)).save(str(onnx_path))
    return path, onnx_path


def line_of(path: pathlib.Path, marker: str) -> int:
    (line,) = [i for i, text in enumerate(path.read_text().splitlines(), 1) if text.endswith(marker)]
    return line


def ops(onnx_path: pathlib.Path) -> collections.Counter:
    inlined = onnx.inliner.inline_local_functions(onnx.load(str(onnx_path)))
    return collections.Counter(n.op_type for n in inlined.graph.node)


def test_an_activation_changed_on_its_line(tmp_path):
    _, before = export(tmp_path, "relu", MODEL)
    gelu, after = export(tmp_path, "gelu", MODEL.replace("torch.relu(h)", "torch.nn.functional.gelu(h)"))
    diff = compare(graph_json(str(before), None), graph_json(str(after), None))
    old, new = ops(before), ops(after)
    assert old - new == {"Relu": 1} and new - old == {"Gelu": 1}  # what the two models hold, by onnx
    summary = {row["op"]: (row["before"], row["after"]) for row in diff["summary"]}
    assert summary == {op: (old[op], new[op]) for op in old | new}
    assert diff["summary"][:2] == [{"op": "Gelu", "before": 0, "after": 1}, {"op": "Relu", "before": 1, "after": 0}]
    (added,) = [n for n in diff["after"]["nodes"] if n["diff"] == "added"]
    (removed,) = [n for n in diff["before"]["nodes"] if n["diff"] == "removed"]
    assert (added["op"], added["source"]["path"]) == ("Gelu", str(gelu))
    assert added["source"]["line"] == line_of(gelu, "# the activation")
    assert removed["op"] == "Relu"
    assert {n["diff"] for n in diff["after"]["nodes"] if n is not added} == {"same"}
    assert (diff["added"], diff["removed"], diff["changed"]) == (1, 1, 0)


def test_a_line_inserted_above_moves_the_others_without_changing_them(tmp_path):
    _, before = export(tmp_path, "plain", MODEL)
    edited = MODEL.replace("        h = self.fc1(x)", "        x = x * 2  # a new line\n        h = self.fc1(x)")
    doubled, after = export(tmp_path, "doubled", edited)
    diff = compare(graph_json(str(before), None), graph_json(str(after), None))
    assert ops(after) - ops(before) == {"Mul": 1}
    added = [n for n in diff["after"]["nodes"] if n["diff"] == "added"]
    assert [(n["op"], n["source"]["line"]) for n in added] == [("Mul", line_of(doubled, "# a new line"))]
    assert all(n["diff"] == "same" for n in diff["before"]["nodes"])
    moved = [n for n in diff["after"]["nodes"] if n["op"] == "Relu"]
    assert [n["source"]["line"] for n in moved] == [line_of(doubled, "# the activation")]  # one line lower, same op


def test_a_layers_new_width_changes_its_ops(tmp_path):
    _, before = export(tmp_path, "narrow", MODEL)
    _, after = export(tmp_path, "wide", MODEL.replace("Linear(16, 4)", "Linear(16, 6)"))
    diff = compare(graph_json(str(before), None), graph_json(str(after), None))
    changed = [n for n in diff["after"]["nodes"] if n["diff"] == "changed"]
    assert changed and {n["module"] for n in changed} == {"fc2"}
    assert all(n["outputs"][0]["shape"][-1] == 6 for n in changed)
    assert (diff["added"], diff["removed"]) == (0, 0)
    assert all(row["before"] == row["after"] for row in diff["summary"])


def test_another_exporters_file_aligns_by_module(tmp_path):
    """onnxlens's export against torch.onnx's of the same model: no source lines on one side, so modules and ops
    align; the summary still counts both."""
    _, ours = export(tmp_path, "ours", MODEL)
    spec = importlib.util.spec_from_file_location("diff_theirs", tmp_path / "small.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    theirs = tmp_path / "theirs.onnx"
    torch.onnx.export(module.Small().eval(), (torch.randn(3, 8),), str(theirs), dynamo=False)
    diff = compare(graph_json(str(ours), None), graph_json(str(theirs), None))
    assert {row["op"]: (row["before"], row["after"]) for row in diff["summary"]} == {
        op: (ops(ours)[op], ops(theirs)[op]) for op in ops(ours) | ops(theirs)
    }
    assert {n["module"] for n in diff["after"]["nodes"]} == {"fc1", "fc2", ""}


def test_the_previous_model_is_kept_by_requests_that_race(tmp_path):
    """Two requests for one target keep its previous model at once (CI saw `SameFileError` from this):
    each leaves `<stem>.previous.onnx` holding the model, and nothing else beside it."""
    from concurrent.futures import ThreadPoolExecutor

    from onnxlens_server.commands import _keep_previous
    from onnxlens_server.graph_diff import previous_path

    model = tmp_path / "m.t.onnx"
    model.write_bytes(b"model bytes")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: _keep_previous(str(model)), range(200)))
    assert pathlib.Path(previous_path(str(model))).read_bytes() == b"model bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.t.onnx", "m.t.previous.onnx"]
