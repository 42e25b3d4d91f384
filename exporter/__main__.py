"""``python -m exporter``: the ``onnxlens-export`` command (`exporter.cli`)."""

from exporter.cli import main

main()
