"""The graph of an exported model for the editor's view (`onnxlens_server.graph`, command
``onnxlens.server.graph``): real exports, checked against the ONNX model inlined by onnx itself and
against this file's own source lines."""

from __future__ import annotations

import asyncio
import collections
import json
import pathlib
import subprocess
import sys

import onnx
import onnx.inliner
import onnx_ir as ir
import onnxscript
import pytest
import torch
from lsprotocol import types
from onnxscript import opset18 as op
from pygls.exceptions import JsonRpcException
from test_server_reliability import ANSWER_TIMEOUT, export, model, server

import exporter
from onnxlens_server import sarif_log
from onnxlens_server.graph import graph_json, model_graph, tensor_json
from onnxlens_server.protocol import COMPARE_GRAPHS, GRAPH, GRAPH_FILE, TENSOR, ErrorCode


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(8, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
        self.head = torch.nn.Linear(256, 4)

    def forward(self, x):
        h = self.layers(x)  # the layers
        return torch.sigmoid(self.head(torch.relu(h)))  # the head


fault = onnxscript.values.Opset("onnxlens.test.fault", 1)


@onnxscript.script(fault)
def sigmoid_one_percent_high(x):
    return op.Mul(op.Sigmoid(x), op.CastLike(op.Constant(value_float=1.01), x))


def source_line(marker: str) -> int:
    """The 1-based line of this file that ends with `marker`."""
    (line,) = [i for i, text in enumerate(pathlib.Path(__file__).read_text().splitlines(), 1) if text.endswith(marker)]
    return line


def faulty_registry() -> exporter.OnnxRegistry:
    registry = exporter.OnnxRegistry()
    registry.register_op(sigmoid_one_percent_high, "aten", "sigmoid")
    return registry


def export_net(folder: pathlib.Path, **options) -> tuple[Net, pathlib.Path, dict]:
    """`Net` exported with `options` (op-level debug by default); its model and its graph (also of a
    failed export: its model is kept)."""
    torch.manual_seed(0)
    net = Net().eval()
    try:
        output = exporter.dynamo_export(
            net, torch.randn(3, 8), export_options=exporter.ExportOptions(**(options or {"op_level_debug": True}))
        )
    except exporter.OnnxExporterError as e:
        output = e.export_output
    output.save(str(folder / "net.onnx"))
    output.save_diagnostics(str(folder / "net.sarif"))
    return net, folder / "net.onnx", graph_json(str(folder / "net.onnx"), sarif_log.read(str(folder / "net.sarif")))


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Net, pathlib.Path, dict]:
    return export_net(tmp_path_factory.mktemp("net"))


def test_nodes_are_the_inlined_models_nodes(exported):
    _, path, graph = exported
    inlined = onnx.inliner.inline_local_functions(onnx.load(str(path)))
    assert len(graph["nodes"]) == len(inlined.graph.node)
    assert collections.Counter(n["op"] for n in graph["nodes"]) == collections.Counter(
        n.op_type for n in inlined.graph.node
    )
    assert len({n["id"] for n in graph["nodes"]}) == len(graph["nodes"])


def test_every_node_is_at_the_line_that_calls_its_layer(exported):
    _, _, graph = exported
    layers, head = source_line("# the layers"), source_line("# the head")
    for node in graph["nodes"]:
        expected = (
            layers if node["module"].startswith("layers") else head
        )  # the relu and sigmoid are on the head's line
        assert node["source"] == {"path": __file__, "line": expected, "function": "forward"}, node["id"]
        assert node["source"] in node["stack"]


def test_functions_are_groups_nested_as_the_modules(exported):
    net, _, graph = exported
    groups = {g["id"]: g for g in graph["groups"]}
    assert sorted(g["module"] for g in groups.values()) == sorted(name for name, _ in net.named_modules() if name)
    for group in groups.values():
        parent = groups.get(group["parent"])
        assert group["module"].rpartition(".")[0] == (parent["module"] if parent else "")
        assert group["class"] == type(net.get_submodule(group["module"])).__name__
    for node in graph["nodes"]:
        assert (groups[node["group"]]["module"] if node["group"] else "") == node["module"]
        assert node["id"].startswith(f"{node['group']}/" if node["group"] else "")


def test_other_functions_are_inlined_into_their_callers_group(exported):
    _, path, graph = exported
    model = ir.load(str(path))
    (key,) = [k for k, f in model.functions.items() if f.name == "Linear_layers_0"]
    function = model.functions.pop(key)
    function.domain = "pkg.other"  # a local function that is not a module's
    model.functions[function.identifier()] = function
    call = next(n for f in model.functions.values() for n in f if n.op_type == "Linear_layers_0")
    call.domain = "pkg.other"
    other = model_graph(model, {})
    assert [n["op"] for n in other["nodes"]] == [n["op"] for n in graph["nodes"]]
    (layers,) = [g["id"] for g in graph["groups"] if g["module"] == "layers"]
    first = other["nodes"][0]
    assert first["op"] == "Gemm" and first["group"] == layers and first["id"].startswith(f"{layers}/")
    assert "layers.0" not in {g["module"] for g in other["groups"]}


def test_edges_link_producers_to_consumers(exported):
    _, path, graph = exported
    ids = (
        {n["id"] for n in graph["nodes"]}
        | {f"input:{v['name']}" for v in graph["inputs"]}
        | {f"output:{v['name']}" for v in graph["outputs"]}
    )
    assert all(e["from"] in ids and e["to"] in ids for e in graph["edges"])
    nodes = {n["id"]: n for n in graph["nodes"]}
    for edge in graph["edges"]:  # the value goes out of one and into the other
        assert edge["from"].startswith("input:") or edge["value"] in [v["name"] for v in nodes[edge["from"]]["outputs"]]
        assert edge["to"].startswith("output:") or edge["value"] in [
            v["name"] for v in nodes[edge["to"]]["inputs"] if v
        ]
    inlined = onnx.inliner.inline_local_functions(onnx.load(str(path))).graph
    produced = {v for n in inlined.node for v in n.output} | {v.name for v in inlined.input}
    uses = sum(v in produced for n in inlined.node for v in n.input) + len(inlined.output)
    assert len(graph["edges"]) == uses
    gemms = [n for n in graph["nodes"] if n["op"] == "Gemm"]
    first = [e["from"] for e in graph["edges"] if e["to"] == gemms[0]["id"]]
    assert first == ["input:x"] and gemms[0]["inputs"][0] == {"name": "x", "dtype": "float32", "shape": [3, 8]}


def test_values_and_initializers_are_described_without_data(exported):
    net, path, graph = exported
    assert graph["inputs"] == [{"name": "x", "dtype": "float32", "shape": [3, 8]}]
    assert graph["outputs"][0]["shape"] == [3, 4]
    weights = {name: list(t.shape) for name, t in net.state_dict().items()}
    assert {i["name"]: i["shape"] for i in graph["initializers"]} == weights
    assert all(i["dtype"] == "float32" and not i["external"] for i in graph["initializers"])
    assert all(all(v["shape"] is not None for v in n["inputs"] + n["outputs"]) for n in graph["nodes"])
    assert {
        k: v for k, v in next(n for n in graph["nodes"] if n["op"] == "Gemm")["attributes"].items() if k == "transB"
    } == {"transB": "1"}
    text = json.dumps(graph)
    assert len(text) < 20_000 < path.stat().st_size // 10  # 67k float weights (270 kB) in the model, none in the JSON


def test_external_weights_are_not_read(exported, tmp_path):
    net, path, graph = exported
    proto = onnx.load(str(path))
    onnx.save(proto, str(tmp_path / "big.onnx"), save_as_external_data=True, location="big.data", size_threshold=4096)
    (tmp_path / "big.data").unlink()  # reading a weight would fail now
    external = graph_json(str(tmp_path / "big.onnx"), None)
    assert {i["name"] for i in external["initializers"] if i["external"]} == {
        k for k, t in net.state_dict().items() if t.nbytes >= 4096
    }
    assert [n["id"] for n in external["nodes"]] == [n["id"] for n in graph["nodes"]]


def test_op_level_debug_numbers_are_on_their_nodes(exported, tmp_path):
    _, _, graph = exported
    for node in graph["nodes"]:
        (check,) = node["checks"]
        assert check["rule"] == "FXE0013" and check["ok"] and 0 <= check["maxAbsError"] <= check["atol"]
    _, _, faulty = export_net(tmp_path, op_level_debug=True, onnx_registry=faulty_registry())
    failed = {n["op"] for n in faulty["nodes"] if not n["checks"][0]["ok"]}
    assert "Sigmoid" in failed and "Gemm" not in failed
    assert all(n["fxNode"] == "sigmoid" for n in faulty["nodes"] if not n["checks"][0]["ok"])
    sigmoid = next(n for n in faulty["nodes"] if n["op"] == "Sigmoid")
    assert sigmoid["checks"][0]["maxAbsError"] > sigmoid["checks"][0]["atol"]


def test_verification_numbers_are_on_their_nodes(tmp_path):
    _, _, graph = export_net(tmp_path, verify=True, onnx_registry=faulty_registry())  # fails: the sigmoid diverges
    checks = {n["fxNode"]: n["checks"] for n in graph["nodes"] if n["checks"]}
    assert {c["rule"] for cs in checks.values() for c in cs} == {"FXE0021"}
    assert not checks["sigmoid"][0]["ok"] and checks["sigmoid"][0]["maxAbsError"] > checks["sigmoid"][0]["atol"]
    assert all(c["ok"] for name, cs in checks.items() if name != "sigmoid" for c in cs) and "linear" in checks


class Attention(torch.nn.Module):
    """q, k, v from one projection by `split` (as GPT-2's), in two blocks."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).split(8, dim=-1)  # the split
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v


class TwoBlocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(Attention(), Attention())

    def forward(self, x):
        return self.blocks(x[:, : x.shape[1] - 1])  # a size torch.export asserts on (dynamic)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_node_the_optimizer_made_keeps_its_line_and_module(tmp_path, dynamic):
    """onnxscript's constant folder turns SplitToSequence + SequenceAt into a Split without metadata,
    and torch.export's own shape-assertion nodes name a placeholder module: neither may cut a module's
    group in two nor lose its line."""
    x = torch.randn(2, 5, 8)
    output = exporter.dynamo_export(
        TwoBlocks().eval(), x, export_options=exporter.ExportOptions(dynamic_shapes=dynamic)
    )
    output.save(str(tmp_path / "m.onnx"))
    graph = graph_json(str(tmp_path / "m.onnx"), None)
    (split,) = {n["source"]["line"] for n in graph["nodes"] if n["op"] == "Split" and n["source"]["path"] == __file__}
    assert split == source_line("# the split")
    assert sum(n["op"] == "Split" for n in graph["nodes"]) == 2
    top = [g["module"] for g in graph["groups"] if g["parent"] is None]
    assert top == ["blocks"]  # one call of the Sequential: not cut by the Splits, no placeholder module
    assert sorted(g["module"] for g in graph["groups"] if g["parent"] is not None and g["module"].count(".") == 1) == [
        "blocks.0",
        "blocks.1",
    ]


def test_a_missing_or_corrupt_model_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        graph_json(str(tmp_path / "gone.onnx"), None)
    (tmp_path / "bad.onnx").write_bytes(b"\xff" * 100)
    with pytest.raises(ValueError, match="is not a readable ONNX model"):
        graph_json(str(tmp_path / "bad.onnx"), None)


def test_the_server_loads_onnx_ir_only_for_the_command_and_never_torch():
    code = "import sys, onnxlens_server.server; a = 'onnx_ir' in sys.modules; import onnxlens_server.graph; print(a, 'torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]


async def graph_of(client, path: pathlib.Path, target: str) -> dict:
    return await asyncio.wait_for(
        client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=GRAPH, arguments=[{"uri": path.as_uri(), "target": target}])
        ),
        ANSWER_TIMEOUT,
    )


@pytest.mark.asyncio
async def test_server_gives_the_last_exports_graph(tmp_path: pathlib.Path):
    path = tmp_path / "small.py"
    path.write_text(model() + "\n\n@exporter.export_target\ndef never():\n    return Small(), (torch.randn(3, 4),)\n")
    line = 1 + path.read_text().splitlines().index("        return self.linear(x).relu()")
    async with server(tmp_path) as client:
        with pytest.raises(JsonRpcException) as not_yet:
            await graph_of(client, path, "t")
        job = await export(client, path)
        graph = await graph_of(client, path, "t")
        with pytest.raises(JsonRpcException) as never:
            await graph_of(client, path, "never")
        pathlib.Path(job["onnx"]).unlink()
        with pytest.raises(JsonRpcException) as gone:
            await graph_of(client, path, "t")
    assert job["status"] == "ok"
    assert graph["path"] == job["onnx"] and graph["inputs"][0]["shape"] == [3, 4]
    assert job["summary"]["functions"] > 0
    assert job["summary"]["nodes"] == len(graph["nodes"])  # the toast's count is the view's
    assert [g["module"] for g in graph["groups"]] == ["linear"]
    assert {n["source"]["line"] for n in graph["nodes"]} == {line} and {
        n["source"]["path"] for n in graph["nodes"]
    } == {str(path)}
    assert {n["op"] for n in graph["nodes"]} >= {"Relu"}
    assert not_yet.value.code == never.value.code == ErrorCode.NOT_EXPORTED
    assert never.value.message == "never (small.py) has not been exported in this session: export it first."
    assert gone.value.code == ErrorCode.UNREADABLE_MODEL and "does not exist" in gone.value.message


def test_a_tensor_is_read_only_when_asked_and_only_its_first_values(exported, tmp_path):
    net, path, graph = exported
    onnx.save(
        onnx.load(str(path)),
        str(tmp_path / "big.onnx"),
        save_as_external_data=True,
        location="big.data",
        size_threshold=0,
    )
    sizes = {i["name"]: i["bytes"] for i in graph_json(str(tmp_path / "big.onnx"), None)["initializers"]}
    assert sizes == {name: t.nbytes for name, t in net.state_dict().items()}  # from the types, nothing read
    weight = net.layers[2].weight.detach().flatten()
    tensor = tensor_json(str(tmp_path / "big.onnx"), "layers.2.weight")
    assert (tensor["shape"], tensor["bytes"], tensor["external"]["location"]) == ([256, 256], 256 * 256 * 4, "big.data")
    assert tensor["read"] == 16 * 4 and [float(v) for v in tensor["values"]] == pytest.approx(
        weight[:16].tolist(), rel=1e-5
    )
    inside = tensor_json(str(path), "head.bias")  # in the model itself
    assert inside["external"] is None and [float(v) for v in inside["values"]] == pytest.approx(
        net.head.bias.tolist(), rel=1e-5
    )
    with pytest.raises(KeyError, match="no initializer 'nope'"):
        tensor_json(str(path), "nope")


def test_shape_plumbing_is_marked(tmp_path):
    output = exporter.dynamo_export(
        TwoBlocks().eval(), torch.randn(2, 5, 8), export_options=exporter.ExportOptions(dynamic_shapes=True)
    )
    output.save(str(tmp_path / "m.onnx"))
    graph = graph_json(str(tmp_path / "m.onnx"), None)
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert all(n["plumbing"] for n in graph["nodes"] if n["op"] in ("Shape", "Constant"))
    assert not any(n["plumbing"] for n in graph["nodes"] if n["op"] in ("Slice", "MatMul", "Softmax", "Gemm", "Split"))
    for edge in graph["edges"]:  # what a graph input's values reach is never plumbing
        if (
            not edge["from"].startswith("input:")
            and not edge["to"].startswith("output:")
            and not nodes[edge["from"]]["plumbing"]
        ):
            assert not nodes[edge["to"]]["plumbing"], edge
    assert any(n["plumbing"] for n in graph["nodes"]) and not all(n["plumbing"] for n in graph["nodes"])


class Reshaped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x).reshape(8)  # fixes the batch


def test_nodes_at_a_specialized_dimensions_line_are_marked(tmp_path):
    output = exporter.dynamo_export(
        Reshaped().eval(), torch.randn(2, 4), export_options=exporter.ExportOptions(dynamic_shapes=True)
    )
    output.save(str(tmp_path / "r.onnx"))
    output.save_diagnostics(str(tmp_path / "r.sarif"))
    graph = graph_json(str(tmp_path / "r.onnx"), sarif_log.read(str(tmp_path / "r.sarif")))
    line = source_line("# fixes the batch")
    marked = [n for n in graph["nodes"] if n["marks"]]
    assert marked and all(n["source"]["line"] == line for n in marked)
    assert {m["rule"] for n in marked for m in n["marks"]} == {"FXE0020"}
    assert not any(n["marks"] for n in graph["nodes"] if n["source"] and n["source"]["line"] != line)


@pytest.mark.parametrize("dynamo", [True, False], ids=["torch.onnx-dynamo", "torch.onnx-torchscript"])
def test_another_producers_model_is_grouped_by_its_scopes(tmp_path, dynamo):
    net = Net().eval()
    torch.onnx.export(net, (torch.randn(3, 8),), str(tmp_path / "t.onnx"), dynamo=dynamo)
    graph = graph_json(str(tmp_path / "t.onnx"), None)
    groups = {g["id"]: g for g in graph["groups"]}
    assert {g["module"] for g in groups.values()} == {
        name for name, m in net.named_modules() if name and not isinstance(m, torch.nn.ReLU)
    } | ({"layers.1"} if any(n["op"] == "Relu" and n["module"] == "layers.1" for n in graph["nodes"]) else set())
    for group in groups.values():
        assert group["module"].rpartition(".")[0] == (groups[group["parent"]]["module"] if group["parent"] else "")
    gemms = sorted(n["module"] for n in graph["nodes"] if n["op"] == "Gemm")
    assert gemms == ["head", "layers.0", "layers.2"]
    assert all(groups[n["group"]]["module"] == n["module"] for n in graph["nodes"] if n["group"])


async def command(client, name: str, args: dict) -> dict:
    return await asyncio.wait_for(
        client.workspace_execute_command_async(types.ExecuteCommandParams(command=name, arguments=[args])),
        ANSWER_TIMEOUT,
    )


@pytest.mark.asyncio
async def test_server_shows_any_file_compares_with_the_previous_export_and_reads_a_tensor(tmp_path: pathlib.Path):
    path = tmp_path / "small.py"
    path.write_text(model())
    other = tmp_path / "other.onnx"
    onnx.save(
        onnx.helper.make_model(
            onnx.helper.make_graph(
                [onnx.helper.make_node("Relu", ["x"], ["y"], name="relu")],
                "g",
                [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
            ),
            producer_name="helper",
        ),
        str(other),
    )
    async with server(tmp_path) as client:
        first = await export(client, path)
        with pytest.raises(JsonRpcException) as no_previous:
            await command(client, COMPARE_GRAPHS, {"uri": path.as_uri(), "target": "t"})
        path.write_text(model().replace("self.linear(x).relu()", "self.linear(x).sigmoid()"))
        second = await export(client, path)
        diff = await command(client, COMPARE_GRAPHS, {"uri": path.as_uri(), "target": "t"})
        files = await command(
            client, COMPARE_GRAPHS, {"before": other.as_uri(), "after": pathlib.Path(second["onnx"]).as_uri()}
        )
        plain = await command(client, GRAPH_FILE, {"uri": other.as_uri()})
        ours = await command(client, GRAPH_FILE, {"uri": pathlib.Path(second["onnx"]).as_uri()})
        tensor = await command(client, TENSOR, {"uri": pathlib.Path(second["onnx"]).as_uri(), "name": "linear.weight"})
        with pytest.raises(JsonRpcException) as bad:
            await command(client, COMPARE_GRAPHS, {"before": other.as_uri()})
    assert first["onnx"] == second["onnx"] and no_previous.value.code == ErrorCode.NO_PREVIOUS
    assert {(n["op"], n["diff"]) for n in diff["after"]["nodes"] if n["diff"] != "same"} == {("Sigmoid", "added")}
    assert {(n["op"], n["diff"]) for n in diff["before"]["nodes"] if n["diff"] != "same"} == {("Relu", "removed")}
    assert files["before"]["producer"] == "helper"  # no sources there: nodes align by module and op
    assert [(n["op"], n["diff"]) for n in files["before"]["nodes"]] == [("Relu", "removed")]  # the second has a Sigmoid
    assert {r["op"]: (r["before"], r["after"]) for r in files["summary"]}["Sigmoid"] == (0, 1)
    assert [(n["op"], n["group"], n["source"]) for n in plain["nodes"]] == [("Relu", None, None)] and plain[
        "groups"
    ] == []
    assert [g["module"] for g in ours["groups"]] == ["linear"] and ours["path"] == second["onnx"]
    weight = onnx.numpy_helper.to_array(
        next(t for t in onnx.load(second["onnx"]).graph.initializer if t.name == "linear.weight")
    )
    assert (tensor["shape"], tensor["bytes"], tensor["external"]) == ([2, 4], 2 * 4 * 4, None)
    assert [float(v) for v in tensor["values"]] == pytest.approx(weight.flatten().tolist(), rel=1e-5)  # 6 digits shown
    assert bad.value.code == ErrorCode.INVALID_OPTIONS and "'before' and 'after'" in bad.value.message
