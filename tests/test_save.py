"""Saving with a state dict: one weights folder per model file, never shared; the state dict must
match the model's weights unless the caller opts into a partial one."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import exporter


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(3, 4)
        self.second = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


X = torch.randn(5, 3)


def _run(path) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: X.numpy()})[0]


def _eager(model) -> np.ndarray:
    with torch.no_grad():
        return model(X).numpy()


def test_models_whose_names_share_a_prefix_get_their_own_weights_folders(tmp_path):
    v1, v2 = TwoLayers(), TwoLayers()
    export_output = exporter.dynamo_export(TwoLayers(), X)
    export_output.save(tmp_path / "m.v1.onnx", model_state_dict=v1.state_dict())
    export_output.save(tmp_path / "m.v2.onnx", model_state_dict=v2.state_dict())
    assert (tmp_path / "m.v1_initializers").is_dir() and (tmp_path / "m.v2_initializers").is_dir()
    np.testing.assert_allclose(_run(tmp_path / "m.v1.onnx"), _eager(v1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_run(tmp_path / "m.v2.onnx"), _eager(v2), rtol=1e-5, atol=1e-6)


def test_a_weights_folder_another_model_reads_is_never_replaced(tmp_path):
    v1 = TwoLayers()
    export_output = exporter.dynamo_export(TwoLayers(), X)
    export_output.save(tmp_path / "m.onnx", model_state_dict=v1.state_dict())
    (tmp_path / "m.onnx").rename(tmp_path / "renamed.onnx")  # still reads m_initializers/
    with pytest.raises(FileExistsError, match="holds the weights of renamed.onnx"):
        export_output.save(tmp_path / "m.onnx", model_state_dict=TwoLayers().state_dict())
    np.testing.assert_allclose(_run(tmp_path / "renamed.onnx"), _eager(v1), rtol=1e-5, atol=1e-6)
    assert not (tmp_path / "m.onnx").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m_initializers", "renamed.onnx"]


def test_resaving_the_same_model_replaces_its_own_folder(tmp_path):
    export_output = exporter.dynamo_export(TwoLayers(), X)
    export_output.save(tmp_path / "m.onnx", model_state_dict=TwoLayers().state_dict())
    newer = TwoLayers()
    export_output.save(tmp_path / "m.onnx", model_state_dict=newer.state_dict())
    np.testing.assert_allclose(_run(tmp_path / "m.onnx"), _eager(newer), rtol=1e-5, atol=1e-6)


def test_missing_weights_are_an_error_unless_partial_is_asked_for(tmp_path):
    model = TwoLayers()
    export_output = exporter.dynamo_export(model, X)
    partial = {k: v for k, v in TwoLayers().state_dict().items() if k.startswith("first.")}
    with pytest.raises(
        ValueError, match=r"no tensor for 2 weights of the model: second\.weight, second\.bias.*strict=False"
    ):
        export_output.save(tmp_path / "m.onnx", model_state_dict=partial)
    assert list(tmp_path.iterdir()) == []

    export_output.save(tmp_path / "m.onnx", model_state_dict=partial, strict=False)
    mixed = TwoLayers()
    mixed.load_state_dict({**model.state_dict(), **partial})
    np.testing.assert_allclose(_run(tmp_path / "m.onnx"), _eager(mixed), rtol=1e-5, atol=1e-6)


def test_unknown_tensors_are_an_error_unless_partial_is_asked_for(tmp_path):
    model = TwoLayers()
    export_output = exporter.dynamo_export(model, X)
    with pytest.raises(
        ValueError, match=r"2 tensors that are not weights of the exported model: encoder\.w, encoder\.b"
    ):
        export_output.save(
            tmp_path / "m.onnx", model_state_dict={"encoder.w": torch.zeros(1), "encoder.b": torch.zeros(1)}
        )
    assert list(tmp_path.iterdir()) == []

    export_output.save(
        tmp_path / "m.onnx", model_state_dict={**model.state_dict(), "extra": torch.zeros(1)}, strict=False
    )
    np.testing.assert_allclose(_run(tmp_path / "m.onnx"), _eager(model), rtol=1e-5, atol=1e-6)
