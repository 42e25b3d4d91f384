"""Imported once by the worker fork server, so every export starts warm.

torch, onnxscript's torchlib and the exporter's default registry are loaded here; each export is
then a fork of this process, which picks up the user's current code and dies with it.
"""

import exporter  # noqa: F401  (torch, onnx, onnxscript come with it)
from exporter.api import default_registry

default_registry().supported_targets()  # builds torchlib's table and its operator lookup
