"""The graph view's timings in Chromium: first render, and expanding one group.

    python benchmarks/graph_view.py [--repeats 3] [--keep FOLDER]

Exports the seed MLP, a tiny 12-layer GPT-2 (transformers `GPT2Config(n_layer=12, n_embd=64, n_head=4,
vocab_size=1000)`, default options: ~500 nodes) and a 24-layer one unoptimized with dynamic shapes
(~3,200 nodes, as the e2e test's `gpt2_model.py`) with `exporter.dynamo_export`, converts each with the graph command's
`onnxlens_server.graph.graph_json`, then runs `benchmarks/graph_view.mjs`: the extension's webview bundle
(`vscode-extension/dist/webview/graph.js`, build it first: `cd vscode-extension && npm run build`) in
Debian's Chromium through playwright-core (from `.tools/`, `scripts/setup-e2e.sh`), fed the JSON as the
extension posts it. Prints, per model, nodes, the layout and render time of the first (collapsed) view
and of expanding the first collapsed group, the median over `--repeats` fresh pages (the models
alternate, page by page), and the bundle's size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

import exporter
from onnxlens_server.graph import graph_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))


def gpt2(layers: int) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=layers, n_embd=64, n_head=4, vocab_size=1000, n_positions=64)
    return GPT2LMHeadModel(config).eval(), (torch.randint(0, 1000, (1, 16)),)


def mlp() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    from mlp import MLPModel

    return MLPModel(), (torch.randn(97, 8),)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", help="folder for the models and their graph JSON (default: a temporary one)")
    options = parser.parse_args()
    folder = options.keep or tempfile.mkdtemp()
    graphs = []
    large = exporter.ExportOptions(optimize=False, dynamic_shapes=True)
    models = (("mlp", mlp, None), ("gpt2-12", lambda: gpt2(12), None), ("gpt2-24-unoptimized-dynamic", lambda: gpt2(24), large))
    for name, build, export_options in models:
        model, args = build()
        path = os.path.join(folder, f"{name}.onnx")
        exporter.dynamo_export(model, *args, export_options=export_options).save(path)
        graph = os.path.join(folder, f"{name}.json")
        with open(graph, "w", encoding="utf-8") as f:
            json.dump(graph_json(path, None), f)
        graphs.append(graph)
    script = os.path.join(ROOT, "benchmarks", "graph_view.mjs")
    subprocess.run(["node", script, "--repeats", str(options.repeats), *graphs], check=True)


if __name__ == "__main__":
    main()
