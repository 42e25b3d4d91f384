"""Passes over the FX graph (before translation) and the ONNX model (after)."""
