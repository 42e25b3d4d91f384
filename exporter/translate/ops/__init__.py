"""ONNX functions for operators torchlib does not translate (registered as defaults beside torchlib's)."""
