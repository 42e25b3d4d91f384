"""The outcome of an export as the editor receives it (`EXPORT`'s jobs, as `EXPORT_FINISHED` sends them): a
typed field with the exporter's one rule's kind, headline, severity and fixed dims, for each kind; the
extension never parses a message to find it."""

from __future__ import annotations

import pathlib

import onnx
import pytest
from test_server_reliability import export, server
from test_server_verify import graph_of

pytestmark = pytest.mark.asyncio

MODELS = """\
import os
import torch
import exporter


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


class FloorDivides(torch.nn.Module):
    def forward(self, counts):
        return counts // 0.1  # PyTorch floors 1 / 0.1 to 9, onnxruntime to 10


class FixesEveryDim(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x).reshape(8)  # 2 * 4 = 8 fixes the batch; the weight fixes the width


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


@exporter.export_target
def raises():
    raise ValueError("no model today")


@exporter.export_target
def crashes():
    os._exit(3)
"""


@pytest.fixture
def models(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


async def test_a_plain_export_is_exported(models: pathlib.Path):
    async with server(models.parent) as client:
        job = await export(client, models, target="mlp")
    assert job["outcome"] == {"kind": "exported", "headline": "Exported mlp", "severity": "info", "fixedDims": []}


async def test_a_verified_export_is_verified_with_how_close_it_is(models: pathlib.Path):
    async with server(models.parent) as client:
        job = await export(client, models, target="mlp", options={"verify": True})
    assert (job["outcome"]["kind"], job["outcome"]["severity"]) == ("verified", "info")
    verified = "Exported mlp, verified in onnxruntime: 1 output matches (max abs error "
    assert job["outcome"]["headline"].startswith(verified)


async def test_a_diverging_model_is_wrong_and_its_graph_is_the_model_kept(models: pathlib.Path):
    line = 1 + next(i for i, text in enumerate(MODELS.splitlines()) if "return counts // 0.1" in text)
    async with server(models.parent) as client:
        job = await export(client, models, target="divides", options={"verify": True})
        graph = await graph_of(client, models, "divides")
    assert job["outcome"] == {
        "kind": "wrong",
        "severity": "error",
        "fixedDims": [],
        "headline": f"divides's model is wrong: output 0 diverges at models.py:{line} (floor_divide)",
    }
    assert job["onnx"] is not None and graph["path"] == job["onnx"] and graph["outcome"] == job["outcome"]
    assert job["summary"] is None  # the export stopped at the verification: no size counted (null, not {})


async def test_dynamic_shapes_that_all_came_out_static_are_degraded_with_the_fixed_dims(models: pathlib.Path):
    async with server(models.parent) as client:
        job = await export(client, models, target="dyn")
    (graph_input,) = onnx.load(job["onnx"]).graph.input
    sizes = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]  # what the model accepts, read from it
    assert (job["outcome"]["kind"], job["outcome"]["severity"]) == ("degraded", "warning")
    assert job["outcome"]["fixedDims"] == [{"input": "x", "dim": dim, "size": size} for dim, size in enumerate(sizes)]
    assert "all static" in job["outcome"]["headline"]


async def test_the_quick_fixs_static_dim_makes_the_follow_up_export_degraded_naming_it(models: pathlib.Path):
    fixed = '@exporter.export_target(dynamic_shapes={"x": {0: 2}})\ndef mlp'  # torch's "batch = 2", applied
    models.write_text(MODELS.replace("@exporter.export_target\ndef mlp", fixed))
    async with server(models.parent) as client:
        job = await export(client, models, target="mlp")
    assert job["outcome"]["kind"] == "degraded" and job["outcome"]["fixedDims"] == [{"input": "x", "dim": 0, "size": 2}]
    assert job["outcome"]["headline"] == "Exported mlp, but the graph accepts only these sizes: x dim 0 = 2"


@pytest.mark.parametrize(
    "target, status, reason",
    [
        ("raises", "failed", "ValueError: no model today"),
        (
            "crashes",
            "crashed",
            "The export process exited with code 3 without a result",
        ),  # no outcome sent: the server's
    ],
)
async def test_an_export_without_a_model_failed(models: pathlib.Path, target: str, status: str, reason: str):
    async with server(models.parent) as client:
        job = await export(client, models, target=target)
    assert job["status"] == status and job["onnx"] is None
    assert (job["outcome"]["kind"], job["outcome"]["severity"]) == ("failed", "error")
    assert job["outcome"]["headline"].startswith(f"Export of {target} failed: {reason}")
