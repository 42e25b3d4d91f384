"""Verification in onnxruntime: whole-model accuracy (FXE0021), first-divergence bisection, op-level debug
(FXE0013), the second-size check of dynamic exports (FXE0020), and reproducers."""
