"""The graph view's timings in Chromium: first render, and expanding one group; and the server's side of a
7B-class decoder's graph (time, peak memory, weight bytes read: none).

    python benchmarks/graph_view.py [--repeats 3] [--keep FOLDER] [--editor]

Exports the seed MLP, a tiny 12-layer GPT-2 (transformers `GPT2Config(n_layer=12, n_embd=64, n_head=4,
vocab_size=1000)`, default options: ~500 nodes) and a 24-layer one unoptimized with dynamic shapes
(~3,200 nodes, as the e2e test's `gpt2_model.py`) with `exporter.dynamo_export`, converts each with the graph command's
`onnxlens_server.graph.graph_json`, then runs `benchmarks/graph_view.mjs`: the extension's webview bundle
(`vscode-extension/dist/webview/graph.js`, build it first: `cd vscode-extension && npm run build`) in
Debian's Chromium through playwright-core (from `.tools/`, `scripts/setup-e2e.sh`), fed the JSON as the
extension posts it. Prints, per model, nodes, the layout and render time of the first (collapsed) view, of
expanding the largest collapsed group the moment the view is drawn (its contents laid out by ELK then) and of
expanding another as large once the view is idle (laid out ahead), the median over `--repeats` fresh pages (the
models alternate, page by page), the webview's JS heap and the ELK worker's, and the bundle's size.

The LLaMA-2-7B-sized decoder (32 layers, `fake_mode_large.LLAMA_7B`) is exported under fake mode and saved with
its 27 GB of weights as external data in a sparse file (`fake_llama`). The server's side runs in a fresh process
(`server_side`): importing the graph reader, `graph_json` (the time and peak RSS the editor's first picture waits
for), then `tensor_json` of one weight. Bytes of weights read are measured with inotify on the external data file:
every open and read of it, by any process, is an event (a read through mmap needs an open first), so no event
while the graph is made means no byte read; `tensor_json` reports the bytes it read, and its events are counted.

With `--editor`, `benchmarks/graph_view_editor.mjs` then opens the 7B decoder's .onnx in the real editor
(code-server with `vscode-extension/dist/onnxlens.vsix`: `npm run package` first), after the MLP's to start the
extension and its server: the extension host's and the language server's memory (/proc), the ELK worker's heap
(CDP), and the times the view logs; the weights file's opens and reads meanwhile (inotify) are counted too.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import torch

import exporter
from onnxlens_server.graph import graph_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def gpt2(layers: int) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=layers, n_embd=64, n_head=4, vocab_size=1000, n_positions=64)
    return GPT2LMHeadModel(config).eval(), (torch.randint(0, 1000, (1, 16)),)


def fake_llama(path: str, sizes: dict) -> dict:
    """A LLaMA decoder of `sizes` exported under fake mode, saved at `path` with its weights as external data in
    one sparse file (``<stem>_initializers/weights.bin``: each weight's offset and length as a real save writes
    them, no bytes on disk: the view never reads them, which the benchmark checks). Returns the export's figures."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from exporter.output.external_data import WEIGHT_META

    start = time.perf_counter()
    with exporter.enable_fake_mode() as ctx:
        model = LlamaForCausalLM(LlamaConfig(**sizes, use_cache=False)).eval()
        input_ids = torch.randint(0, sizes["vocab_size"], (1, 16))
    output = exporter.dynamo_export(model, input_ids, export_options=exporter.ExportOptions(fake_context=ctx))
    weights = {v.name for v in output.model.graph.inputs if v.meta.get(WEIGHT_META)}
    proto = output.model_proto
    folder = os.path.splitext(os.path.basename(path))[0] + "_initializers"
    os.makedirs(os.path.join(os.path.dirname(path), folder), exist_ok=True)
    offset = 0
    for value in [i for i in proto.graph.input if i.name in weights]:
        tensor = onnx.TensorProto(name=value.name, data_type=value.type.tensor_type.elem_type)
        tensor.dims.extend(d.dim_value for d in value.type.tensor_type.shape.dim)
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        length = int(np.prod(tensor.dims, dtype=np.int64)) * itemsize
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, text in (("location", f"{folder}/weights.bin"), ("offset", str(offset)), ("length", str(length))):
            tensor.external_data.add(key=key, value=text)
        proto.graph.initializer.append(tensor)
        offset += (length + 4095) // 4096 * 4096  # aligned, as onnx's own external data writer can
    kept = [i for i in proto.graph.input if i.name not in weights]
    del proto.graph.input[:]
    proto.graph.input.extend(kept)
    with open(os.path.join(os.path.dirname(path), folder, "weights.bin"), "wb") as f:
        f.truncate(offset)  # sparse: the size a real save writes, no blocks
    onnx.save_model(proto, path)
    return {"export_s": round(time.perf_counter() - start, 1), "weights": len(weights), "weight_bytes": offset}


class Inotify:
    """Counts opens and reads of one file by any process (Linux inotify through libc: IN_OPEN, IN_ACCESS)."""

    IN_ACCESS, IN_OPEN = 0x1, 0x20

    def __init__(self, path: str) -> None:
        import ctypes

        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK)
        if self.fd < 0 or self.libc.inotify_add_watch(self.fd, path.encode(), self.IN_ACCESS | self.IN_OPEN) < 0:
            raise OSError(ctypes.get_errno(), f"inotify on {path}")

    def events(self) -> dict[str, int]:
        """The opens and reads since the last call."""
        counts = {"opens": 0, "reads": 0}
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return counts
            offset = 0
            while offset < len(data):
                _, mask, _, length = struct.unpack_from("iIII", data, offset)
                counts["opens"] += bool(mask & self.IN_OPEN)
                counts["reads"] += bool(mask & self.IN_ACCESS)
                offset += 16 + length


# Peak memory from VmHWM (the process's own address space: ru_maxrss would carry over the forked parent's peak).
SERVER_SIDE = """
import json, re, sys, time
start = time.perf_counter()
from onnxlens_server import graph
imported = time.perf_counter()
result = graph.graph_json(sys.argv[1], None)
made = time.perf_counter()
text = json.dumps(result)
encoded = time.perf_counter()
peak = int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read())[1]) // 1024
print(json.dumps({"import_ms": round(1000 * (imported - start)), "graph_ms": round(1000 * (made - imported)),
                  "json_ms": round(1000 * (encoded - made)), "json_kib": len(text) // 1024,
                  "nodes": len(result["nodes"]), "peak_rss_mib": peak}), flush=True)
input()  # the weights' opens and reads so far are counted before the tensor is read
tensor = graph.tensor_json(sys.argv[1], sys.argv[2])
tensor_ms = round(1000 * (time.perf_counter() - encoded))
print(json.dumps({"tensor_ms": tensor_ms, "bytes": tensor["bytes"], "read": tensor["read"]}))
"""


def server_side(onnx_path: str, weights: str, tensor: str) -> dict:
    """The graph command's work on `onnx_path` in a fresh process, and the weights file's opens and reads meanwhile."""
    watch = Inotify(weights)
    command = [sys.executable, "-c", SERVER_SIDE, onnx_path, tensor]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    figures = json.loads(child.stdout.readline())
    figures["weights_while_drawing"] = watch.events()
    child.stdin.write("\n")
    child.stdin.flush()
    figures.update(json.loads(child.stdout.readline()))
    child.wait()
    figures["weights_when_inspected"] = watch.events()
    return figures


def mlp() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    from mlp import MLPModel

    return MLPModel(), (torch.randn(97, 8),)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", help="folder for the models and their graph JSON (default: a temporary one)")
    parser.add_argument(
        "--editor", action="store_true", help="also open the 7B decoder in code-server (needs the .vsix)"
    )
    options = parser.parse_args()
    folder = options.keep or tempfile.mkdtemp()
    graphs = []
    large = exporter.ExportOptions(optimize=False, dynamic_shapes=True)
    models = (
        ("mlp", mlp, None),
        ("gpt2-12", lambda: gpt2(12), None),
        ("gpt2-24-unoptimized-dynamic", lambda: gpt2(24), large),
    )
    for name, build, export_options in models:
        model, args = build()
        path = os.path.join(folder, f"{name}.onnx")
        exporter.dynamo_export(model, *args, export_options=export_options).save(path)
        graph = os.path.join(folder, f"{name}.json")
        with open(graph, "w", encoding="utf-8") as f:
            json.dump(graph_json(path, None), f)
        graphs.append(graph)
    llama = os.path.join(folder, "llama-7b-fake.onnx")
    if not os.path.exists(llama):
        from fake_mode_large import LLAMA_7B

        print("llama-7b export:", json.dumps(fake_llama(llama, LLAMA_7B)), flush=True)
    weights = os.path.join(folder, "llama-7b-fake_initializers", "weights.bin")
    for run in range(options.repeats):
        figures = server_side(llama, weights, "model.layers.0.self_attn.q_proj.weight")
        print(f"llama-7b server side, run {run + 1}:", json.dumps(figures), flush=True)
    graph = os.path.join(folder, "llama-7b-fake.json")
    with open(graph, "w", encoding="utf-8") as f:
        json.dump(graph_json(llama, None), f)
    graphs.append(graph)
    script = os.path.join(ROOT, "benchmarks", "graph_view.mjs")
    subprocess.run(["node", script, "--repeats", str(options.repeats), *graphs], check=True)
    if options.editor:
        watch = Inotify(weights)
        editor = os.path.join(ROOT, "benchmarks", "graph_view_editor.mjs")
        warm_up = os.path.join(folder, "mlp.onnx")
        subprocess.run(["node", editor, "--warm-up", warm_up, llama, sys.executable], check=True)
        print("weights file while the editor ran:", json.dumps(watch.events()))


if __name__ == "__main__":
    main()
