"""Fake mode: export without weight memory, then save with the real weights as external data."""

from __future__ import annotations

import io
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import safetensors.torch
import torch

import exporter
import exporter.output.program as exporter_output


class MyModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)

    def forward(self, x):
        out = self.linear(x)
        return out


def seed_fake_export():
    """The seed document's fake-mode example."""
    with exporter.enable_fake_mode() as fake_context:
        my_nn_module = MyModel()
        arg1 = torch.randn(2, 2, 2)  # positional input 1
    export_options = exporter.ExportOptions(fake_context=fake_context)
    return exporter.dynamo_export(my_nn_module, arg1, export_options=export_options)


def run_saved(path, feeds: dict) -> list[np.ndarray]:
    model = onnx.load(path)  # loads the external data too
    onnx.checker.check_model(model)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def shape_constants(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """The initializers that are the graph's own small int64 constants (e.g. the shapes of the reshapes
    around a Gemm), stored in the model whatever happens to the weights."""
    return [
        t
        for t in model.graph.initializer
        if t.data_type == onnx.TensorProto.INT64 and np.prod(t.dims) <= 8 and "." not in t.name
    ]


def test_seed_example_without_initializers(tmp_path):
    export_output = seed_fake_export()
    export_output.save(tmp_path / "my_model_without_initializers.onnx")
    model = onnx.load(tmp_path / "my_model_without_initializers.onnx")
    assert shape_constants(model) == list(model.graph.initializer)  # no weight, only the graph's own shapes
    assert [i.name for i in model.graph.input] == ["x", "linear.weight", "linear.bias"]
    assert os.listdir(tmp_path) == ["my_model_without_initializers.onnx"]


@pytest.mark.parametrize("form", ["dict", "pt", "safetensors"])
def test_seed_example_with_initializers(tmp_path, form):
    export_output = seed_fake_export()
    real = MyModel()
    state = {
        "dict": lambda: real.state_dict(),
        "pt": lambda: torch.save(real.state_dict(), tmp_path / "ckpt.pt") or str(tmp_path / "ckpt.pt"),
        "safetensors": lambda: (
            safetensors.torch.save_file(real.state_dict(), tmp_path / "ckpt.safetensors")
            or str(tmp_path / "ckpt.safetensors")
        ),
    }[form]()
    export_output.save(tmp_path / "my_model_with_initializers.onnx", model_state_dict=state)
    assert sorted(os.listdir(tmp_path / "my_model_with_initializers_initializers")) == ["linear.bias", "linear.weight"]
    model = onnx.load(tmp_path / "my_model_with_initializers.onnx", load_external_data=False)
    assert [i.name for i in model.graph.input] == ["x"]
    external = [t.name for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert sorted(external) == ["linear.bias", "linear.weight"]
    assert len(shape_constants(model)) == len(model.graph.initializer) - 2  # the rest: the graph's own shapes
    x = torch.randn(2, 2, 2)
    (out,) = run_saved(tmp_path / "my_model_with_initializers.onnx", {"x": x.numpy()})
    np.testing.assert_allclose(out, real(x).detach().numpy(), atol=1e-6)


@pytest.mark.parametrize("loader", ["torch.load", "safetensors"])
def test_checkpoints_loaded_in_fake_mode_are_fake_and_remembered(tmp_path, loader):
    real = MyModel()
    if loader == "torch.load":
        path = tmp_path / "ckpt.pt"
        torch.save(real.state_dict(), path)
    else:
        path = tmp_path / "ckpt.safetensors"
        safetensors.torch.save_file(real.state_dict(), path)
    with exporter.enable_fake_mode() as ctx:
        model = MyModel()
        state = torch.load(path) if loader == "torch.load" else safetensors.torch.load_file(path)
        assert all(isinstance(t, torch._subclasses.fake_tensor.FakeTensor) for t in state.values())
        model.load_state_dict(state)
        x = torch.randn(3, 2)
    assert ctx.state_dict_paths == (str(path),)
    export_output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(fake_context=ctx))
    export_output.save(tmp_path / "m.onnx")  # uses the remembered checkpoint
    x = torch.randn(3, 2)
    (out,) = run_saved(tmp_path / "m.onnx", {"x": x.numpy()})
    np.testing.assert_allclose(out, real(x).detach().numpy(), atol=1e-6)


class Wrapped(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.transformer = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))

    def forward(self, x):
        return self.transformer(x)


def test_prefix_differences_and_views_are_handled(tmp_path):
    with exporter.enable_fake_mode() as ctx:
        model, x = Wrapped(), torch.randn(2, 4)
    export_output = exporter.dynamo_export(model, x, export_options=exporter.ExportOptions(fake_context=ctx))
    real = Wrapped()
    big = torch.randn(10, 10)
    big[:6, :4] = real.transformer[0].weight.detach()
    state = {f"model.{k}": v for k, v in real.state_dict().items()}  # an extra prefix, as in HF checkpoints
    state["model.transformer.0.weight"] = big[:6, :4]  # a view into a larger storage
    export_output.save(tmp_path / "m.onnx", model_state_dict=state)
    assert os.path.getsize(tmp_path / "m_initializers" / "transformer.0.weight") == 6 * 4 * 4
    x = torch.randn(2, 4)
    (out,) = run_saved(tmp_path / "m.onnx", {"x": x.numpy()})
    np.testing.assert_allclose(out, real(x).detach().numpy(), atol=1e-6)


def test_missing_weights_fail_before_anything_is_written(tmp_path):
    export_output = seed_fake_export()
    with pytest.raises(ValueError, match="no tensor for 1 weights of the model: linear.bias"):
        export_output.save(tmp_path / "m.onnx", model_state_dict={"linear.weight": torch.randn(2, 2)})
    assert os.listdir(tmp_path) == []


def test_wrong_shape_is_a_clear_error(tmp_path):
    export_output = seed_fake_export()
    with pytest.raises(
        ValueError, match=r"linear.weight: the state dict holds shape \[3, 2\], the model expects \[2, 2\]"
    ):
        export_output.save(
            tmp_path / "m.onnx", model_state_dict={"linear.weight": torch.randn(3, 2), "linear.bias": torch.randn(2)}
        )
    assert os.listdir(tmp_path) == []


def test_stream_destination_with_state_dict_is_rejected():
    with pytest.raises(ValueError, match="needs a file path destination"):
        seed_fake_export().save(io.BytesIO(), model_state_dict=MyModel().state_dict())


def test_mixing_real_and_fake_tensors_says_what_to_do():
    with exporter.enable_fake_mode() as ctx:
        model = MyModel()
    with pytest.raises(exporter.OnnxExporterError, match="are real tensors, but fake mode is enabled"):
        exporter.dynamo_export(model, torch.randn(2, 2), export_options=exporter.ExportOptions(fake_context=ctx))
    with exporter.enable_fake_mode():
        fake_model, fake_x = MyModel(), torch.randn(2, 2)
    with pytest.raises(
        exporter.OnnxExporterError, match=r"are fake tensors: export them with ExportOptions\(fake_context=ctx\)"
    ):
        exporter.dynamo_export(fake_model, fake_x)


def test_models_over_2gib_go_to_external_data(tmp_path, monkeypatch):
    monkeypatch.setattr(exporter_output, "TWO_GIB", 1024)  # the threshold, scaled down for the test
    model, x = torch.nn.Linear(64, 64), torch.randn(2, 64)
    export_output = exporter.dynamo_export(model, x)
    export_output.save(tmp_path / "big.onnx")
    assert sorted(os.listdir(tmp_path)) == ["big.onnx", "big.onnx.data"]
    (out,) = run_saved(tmp_path / "big.onnx", {"input": x.numpy()})
    np.testing.assert_allclose(out, model(x).detach().numpy(), atol=1e-5)


def test_hugging_face_decoder_under_fake_mode(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    with exporter.enable_fake_mode() as ctx:
        fake_model = LlamaForCausalLM(config).eval()
        input_ids = torch.randint(0, 128, (1, 6))
    export_output = exporter.dynamo_export(
        fake_model, input_ids, export_options=exporter.ExportOptions(fake_context=ctx)
    )
    weights = set(fake_model.state_dict())
    assert not weights & {t.name for t in export_output.model_proto.graph.initializer}  # no weight data
    assert weights <= {i.name for i in export_output.model_proto.graph.input} | {
        "lm_head.weight"
    }  # tied to the embedding

    torch.manual_seed(1)
    real = LlamaForCausalLM(config).eval()
    state = {**real.state_dict(), **dict(real.named_buffers())}  # inv_freq is a non-persistent buffer
    export_output.save(tmp_path / "llama.onnx", model_state_dict=state)
    ids = torch.randint(0, 128, (1, 6))
    with torch.no_grad():
        expected = export_output.adapt_torch_outputs_to_onnx(real(ids))
    outputs = run_saved(tmp_path / "llama.onnx", {"input_ids": ids.numpy()})
    assert len(outputs) == len(expected)
    for actual, want in zip(outputs, expected):
        np.testing.assert_allclose(actual, want.numpy(), atol=1e-4, rtol=1e-3)


class Tagger(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(30, 8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, tokens):
        return torch.softmax(self.head(self.embedding(tokens)), dim=-1)


def test_op_level_debug_under_fake_mode_uses_valid_random_inputs():
    with exporter.enable_fake_mode() as ctx:
        model, tokens = Tagger(), torch.randint(0, 30, (2, 5))
    options = exporter.ExportOptions(fake_context=ctx, op_level_debug=True)
    diagnostics = exporter.dynamo_export(model, tokens, export_options=options).diagnostic_context.diagnostics
    checks = [d for d in diagnostics if d.rule.id == "FXE0013"]
    assert any("random inputs" in d.message for d in checks)
    ops = {o["fxTarget"]: o for d in checks for o in d.properties.get("ops", [])}
    assert {"aten.embedding.default", "aten.linear.default", "aten.softmax.int"} <= set(ops)
    assert all(o["ok"] and "skipped" not in o for o in ops.values()), ops
