"""The language server, measured as an editor uses it.

    python benchmarks/server_roundtrip.py [--exports 50]

- warm round trip for the seed MLP: ``workspace/executeCommand`` sent → ``publishDiagnostics``
  received (median of 10), next to ``torch.onnx.export(dynamo=True)`` alone on the same model, warm,
  in this same run;
- the server's memory (RSS of the server process and of its worker fork server) after 5 and
  after `--exports` exports;
- hover latency while an export runs.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


class Client:
    """A minimal LSP client over the server's stdio (timestamps every message it receives)."""

    def __init__(self, root: pathlib.Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "onnxlens_server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO)
        self.messages: queue.Queue = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()
        self.request("initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": {}})
        self.notify("initialized", {})

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while (line := stream.readline()) not in (b"\r\n", b""):
                if line.startswith(b"Content-Length:"):
                    length = int(line.split(b":")[1])
            if length is None:
                return
            self.messages.put((time.perf_counter(), json.loads(stream.read(length))))

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        self.process.stdin.flush()

    def notify(self, method: str, params: dict) -> None:
        self.send({"method": method, "params": params})

    def request(self, method: str, params: dict, wait_for: str | None = None) -> tuple[float, dict]:
        """Send a request; wait for its response (or first for notification `wait_for`). Returns (seconds, message)."""
        self.next_id += 1
        request_id = self.next_id
        start = time.perf_counter()
        self.send({"id": request_id, "method": method, "params": params})
        first = None
        while True:
            at, message = self.messages.get(timeout=600)
            if wait_for and first is None and message.get("method") == wait_for:
                first = (at - start, message)
            if message.get("id") == request_id and "method" not in message:
                return first or (at - start, message)

    def rss_mib(self) -> dict[str, float]:
        pids = {"server": self.process.pid}
        tasks = pathlib.Path(f"/proc/{self.process.pid}/task").iterdir()  # children of any of its threads
        children = [pid for task in tasks for pid in (task / "children").read_text().split()]
        for pid in children:  # the fork server (the resource tracker is the other child)
            if "forkserver" in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                pids["fork server"] = int(pid)
        return {name: _rss(pid) for name, pid in pids.items()}

    def close(self) -> None:
        self.request("shutdown", {})
        self.notify("exit", {})
        self.process.wait(timeout=30)


def _rss(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def torch_onnx_export_seconds(repeats: int) -> float:
    sys.path.insert(0, str(REPO / "examples"))
    import torch

    from mlp import MLPModel

    model, x = MLPModel(), torch.rand((97, 8))
    torch.onnx.export(model, (x,), dynamo=True, verbose=False)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.onnx.export(model, (x,), dynamo=True, verbose=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports", type=int, default=50)
    args = parser.parse_args()
    root = pathlib.Path(tempfile.mkdtemp(prefix="onnxlens-bench-"))
    model_file = root / "mlp.py"
    model_file.write_text((REPO / "examples" / "mlp.py").read_text())
    uri = model_file.as_uri()
    export = {"command": "onnxlens.server.export", "arguments": [{"uri": uri, "target": "mlp"}]}

    client = Client(root)
    client.request("workspace/executeCommand", export)  # warm-up (starts the fork server)
    round_trips = [client.request("workspace/executeCommand", export, wait_for="textDocument/publishDiagnostics")[0] for _ in range(10)]
    for _ in range(5 - 1 - 10 % 5):
        client.request("workspace/executeCommand", export)
    memory_5 = client.rss_mib()
    for _ in range(args.exports - 15):
        client.request("workspace/executeCommand", export)
    memory_n = client.rss_mib()

    # Hover latency while an op-level-debug export runs.
    debug = {"command": "onnxlens.server.export", "arguments": [{"uri": uri, "target": "mlp", "options": {"opLevelDebug": True}}]}
    client.request("workspace/executeCommand", debug)
    client.next_id += 1
    export_id = client.next_id
    client.send({"id": export_id, "method": "workspace/executeCommand", "params": debug})
    hovers, done = [], False
    hover_params = {"textDocument": {"uri": uri}, "position": {"line": 17, "character": 10}}
    while not done:
        client.next_id += 1
        hover_id = client.next_id
        start = time.perf_counter()
        client.send({"id": hover_id, "method": "textDocument/hover", "params": hover_params})
        while True:
            at, message = client.messages.get(timeout=60)
            if message.get("id") == export_id and "method" not in message:
                done = True
            if message.get("id") == hover_id:
                hovers.append(at - start)
                break
        time.sleep(0.02)
    client.close()

    torch_seconds = torch_onnx_export_seconds(10)
    rt = statistics.median(round_trips)
    print(f"seed MLP warm round trip executeCommand→publishDiagnostics: median {rt * 1000:.0f} ms (min {min(round_trips) * 1000:.0f}, max {max(round_trips) * 1000:.0f}) over 10")
    print(f"torch.onnx.export(dynamo=True) alone, warm, same model: median {torch_seconds * 1000:.0f} ms; ratio round trip / torch.onnx.export = {rt / torch_seconds:.2f}")
    print(f"memory after 5 exports: {memory_5}; after {args.exports}: {memory_n} (MiB RSS)")
    print(f"hover latency during an export: median {statistics.median(hovers) * 1000:.1f} ms, max {max(hovers) * 1000:.1f} ms over {len(hovers)} hovers")


if __name__ == "__main__":
    main()
