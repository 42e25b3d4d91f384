"""Every code example of the seed document (PyTorch 2.1 docs), with `torch.onnx.` → `exporter.`."""

from __future__ import annotations

import io
from typing import Dict, Tuple

import numpy as np
import onnx
import torch
import torch.nn as nn
from helpers import assert_matches_eager, run_onnx, run_onnx_feeds

import exporter


class MLPModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc0 = nn.Linear(8, 8, bias=True)
        self.fc1 = nn.Linear(8, 4, bias=True)
        self.fc2 = nn.Linear(4, 2, bias=True)
        self.fc3 = nn.Linear(2, 2, bias=True)

    def forward(self, tensor_x: torch.Tensor):
        tensor_x = self.fc0(tensor_x)
        tensor_x = torch.sigmoid(tensor_x)
        tensor_x = self.fc1(tensor_x)
        tensor_x = torch.sigmoid(tensor_x)
        tensor_x = self.fc2(tensor_x)
        tensor_x = torch.sigmoid(tensor_x)
        output = self.fc3(tensor_x)
        return output


class MyModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)

    def forward(self, x, bias=None):
        out = self.linear(x)
        out = out + bias
        return out


class MyLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)

    def forward(self, x):
        out = self.linear(x)
        return out


def test_mlp_example(tmp_path):
    model = MLPModel()
    tensor_x = torch.rand((97, 8), dtype=torch.float32)
    export_output = exporter.dynamo_export(model, tensor_x)
    assert isinstance(export_output.model_proto, onnx.ModelProto)
    export_output.save(tmp_path / "mlp.onnx")
    onnx.checker.check_model(onnx.load(tmp_path / "mlp.onnx"))
    assert_matches_eager(export_output, model, (tensor_x,))


def test_kwargs_example():
    model = MyModel()
    kwargs = {"bias": 3.0}
    args = (torch.randn(2, 2, 2),)
    export_output = exporter.dynamo_export(model, *args, **kwargs)
    assert_matches_eager(export_output, model, args, kwargs)


def test_dynamic_shapes_example(tmp_path):
    model = MyModel()
    kwargs = {"bias": 3.0}
    args = (torch.randn(2, 2, 2),)
    export_options = exporter.ExportOptions(dynamic_shapes=True)
    export_output = exporter.dynamo_export(model, *args, **kwargs, export_options=export_options)
    export_output.save(tmp_path / "my_dynamic_model.onnx")
    graph_input = export_output.model_proto.graph.input[0]
    dims = graph_input.type.tensor_type.shape.dim
    # The seed printed arg0_dim_0..2; the last dim feeds Linear(2, 2), so it is really fixed at 2.
    assert [d.dim_param for d in dims[:2]] == ["x_dim_0", "x_dim_1"]
    assert dims[2].dim_value == 2
    other = (torch.randn(5, 3, 2),)
    assert_matches_eager(export_output, model, args, kwargs, run_args=other)


def test_nested_input_example():
    def func_with_nested_input_structure(
        x_dict: Dict[str, torch.Tensor], y_tuple: Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]
    ):
        if "a" in x_dict:
            x = x_dict["a"]
        elif "b" in x_dict:
            x = x_dict["b"]
        else:
            x = torch.randn(3)
        y1, (y2, y3) = y_tuple
        return x + y1 + y2 + y3

    x_dict = {"a": torch.tensor(1.0)}
    y_tuple = (torch.tensor(2.0), (torch.tensor(3.0), torch.tensor(4.0)))
    export_output = exporter.dynamo_export(func_with_nested_input_structure, x_dict, y_tuple)
    adapted = export_output.adapt_torch_inputs_to_onnx(x_dict, y_tuple)
    assert [float(t) for t in adapted] == [1.0, 2.0, 3.0, 4.0]
    assert_matches_eager(export_output, func_with_nested_input_structure, (x_dict, y_tuple))


def test_tuple_output_example():
    def func_returning_tuples(x, y, z):
        x = x + y
        y = y + z
        z = x + y
        return (x, (y, z))

    x, y, z = torch.tensor(1.0), torch.tensor(2.0), torch.tensor(3.0)
    export_output = exporter.dynamo_export(func_returning_tuples, x, y, z)
    pt_output = func_returning_tuples(x, y, z)
    assert [float(t) for t in export_output.adapt_torch_outputs_to_onnx(pt_output)] == [3.0, 5.0, 8.0]
    assert [float(v) for v in run_onnx(export_output, x, y, z)] == [3.0, 5.0, 8.0]


def test_custom_serializer_example(tmp_path):
    class ProtobufExportOutputSerializer:
        def serialize(self, export_output: exporter.ExportOutput, destination: io.BufferedIOBase) -> None:
            destination.write(export_output.model_proto.SerializeToString())

    model = MyLinear()
    arg1 = torch.randn(2, 2, 2)
    exporter.dynamo_export(model, arg1).save(
        destination=str(tmp_path / "exported_model.onnx"), serializer=ProtobufExportOutputSerializer()
    )
    loaded = onnx.load(tmp_path / "exported_model.onnx")
    onnx.checker.check_model(loaded)
    (out,) = run_onnx_feeds(loaded, {"x": arg1.numpy()})
    np.testing.assert_allclose(out, model(arg1).detach().numpy(), atol=1e-6, rtol=1e-5)
