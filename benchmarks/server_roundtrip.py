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
import pathlib
import statistics
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from lsp_client import StdioClient  # noqa: E402


def round_trip(client: StdioClient, method: str, params: dict, notification: str) -> float:
    """Seconds from sending a request to the first `notification` after it (or to its answer, if none came)."""
    start = len(client.received)
    request_id = client.send_request(method, params)
    answer = client.wait(request_id, timeout=600)
    first = client.wait_for(lambda m: m.get("method") == notification or m.get("id") == request_id, 600, start)
    return first.arrived - answer.sent


def rss_mib(client: StdioClient) -> dict[str, float]:
    """The RSS of the server and of its worker fork server."""
    pid = client.process.pid
    pids = {"server": pid}
    tasks = pathlib.Path(f"/proc/{pid}/task").iterdir()  # children of any of its threads
    children = [child for task in tasks for child in (task / "children").read_text().split()]
    for child in children:  # the fork server (the resource tracker is the other child)
        cmdline = pathlib.Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        if "forkserver" in cmdline:
            pids["fork server"] = int(child)
    return {name: _rss(pid) for name, pid in pids.items()}


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

    client = StdioClient(cwd=REPO)
    client.initialize(root)
    execute = "workspace/executeCommand"
    client.request(execute, export, timeout=600)  # warm-up (starts the fork server)
    round_trips = [round_trip(client, execute, export, "textDocument/publishDiagnostics") for _ in range(10)]
    for _ in range(5 - 1 - 10 % 5):
        client.request(execute, export, timeout=600)
    memory_5 = rss_mib(client)
    for _ in range(args.exports - 15):
        client.request(execute, export, timeout=600)
    memory_n = rss_mib(client)

    # Hover latency while an op-level-debug export runs.
    debug = {
        "command": "onnxlens.server.export",
        "arguments": [{"uri": uri, "target": "mlp", "options": {"opLevelDebug": True}}],
    }
    client.request(execute, debug, timeout=600)
    export_id = client.send_request(execute, debug)
    hovers = []
    hover_params = {"textDocument": {"uri": uri}, "position": {"line": 17, "character": 10}}
    while not client.answered(export_id):
        hovers.append(client.request("textDocument/hover", hover_params, timeout=60).seconds)
        time.sleep(0.02)
    client.close()

    torch_seconds = torch_onnx_export_seconds(10)
    rt = statistics.median(round_trips)
    print(
        f"seed MLP warm round trip executeCommand→publishDiagnostics: median {rt * 1000:.0f} ms (min {min(round_trips) * 1000:.0f}, max {max(round_trips) * 1000:.0f}) over 10"
    )
    print(
        f"torch.onnx.export(dynamo=True) alone, warm, same model: median {torch_seconds * 1000:.0f} ms; ratio round trip / torch.onnx.export = {rt / torch_seconds:.2f}"
    )
    print(f"memory after 5 exports: {memory_5}; after {args.exports}: {memory_n} (MiB RSS)")
    print(
        f"hover latency during an export: median {statistics.median(hovers) * 1000:.1f} ms, max {max(hovers) * 1000:.1f} ms over {len(hovers)} hovers"
    )


if __name__ == "__main__":
    main()
