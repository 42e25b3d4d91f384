"""Passes on the translated ONNX model (onnx_ir passes): inlining, optimization, fusions, finalization."""
