"""Translate: FX nodes → ONNX through the registry (torchlib, the project's own ops, the user's functions)."""
