"""onnxruntime sessions over an in-memory ONNX IR model, without copying its weights into a protobuf.

The initializers are serialized as external-data references and handed to onnxruntime as
`OrtValue`s over the tensors' own memory (``SessionOptions.add_external_initializers``): no
protobuf holds the weights (which also lifts its 2 GiB limit), and the model is left as it was.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

_INLINE_BYTES = 1024  # smaller initializers stay in the protobuf
_PLACEHOLDER = "onnxlens-in-memory-weights"  # the external-data location onnxruntime never reads


def session(model: ir.Model, config: dict[str, str] | None = None):
    """An onnxruntime CPU session over `model` (its weights shared, not copied), with session `config` entries."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: onnxruntime's warnings (e.g. what it cannot fold) are not the user's
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    originals: dict[ir.Value, ir.TensorProtocol] = {}
    weights: list = []
    try:
        for value in model.graph.initializers.values():
            array = _array(value.const_value)
            if array is None:
                continue
            originals[value] = value.const_value
            value.const_value = ir.ExternalTensor(
                _PLACEHOLDER, 0, array.nbytes, value.const_value.dtype, shape=value.const_value.shape, name=value.name
            )
            weights.append((value.name, ort.OrtValue.ortvalue_from_numpy(array)))
        proto = ir.serde.serialize_model(model).SerializeToString()
    finally:
        for value, tensor in originals.items():
            value.const_value = tensor
    if weights:
        options.add_external_initializers([name for name, _ in weights], [v for _, v in weights])
    result = ort.InferenceSession(proto, options, providers=["CPUExecutionProvider"])
    result.onnxlens_weights = weights  # onnxruntime reads them for as long as the session lives
    return result


def _array(tensor: ir.TensorProtocol | None) -> np.ndarray | None:
    """The tensor's memory as a C-contiguous numpy array, for the dtypes numpy and onnxruntime share."""
    if tensor is None or tensor.nbytes < _INLINE_BYTES or isinstance(tensor, ir.ExternalTensor):
        return None
    array = tensor.numpy()
    if array.dtype.kind not in "fiub":  # e.g. ml_dtypes' bfloat16
        return None
    return np.ascontiguousarray(array)
