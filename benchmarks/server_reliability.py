"""The language server under load: hover latency, memory, and bursts of export requests.

    python benchmarks/server_reliability.py [--quick] [--exports 100] [--json OUT]

Drives ``python -m onnxlens_server`` over stdio, as an editor would, and measures in one run:

1. hover latency (p50 / p95 / max) on a traced line of an open document, hovers sent every 20 ms:
   idle; during a burst of export requests for several targets; while the fork server the export
   workers come from is restarted (SIGKILLed, then an export requested);
2. the RSS of the server and of its fork server after 5 and after `--exports` sequential exports;
3. a burst of export requests for one target sent back to back: the time until the last answer,
   how many ran to the end or were cancelled, and the ratio to one export.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import os
import pathlib
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from lsp_client import Response, StdioClient  # noqa: E402

EXECUTE = "workspace/executeCommand"
EXPORT = "onnxlens.server.export"  # onnxlens_server.protocol.EXPORT (not imported: it would import pygls here)
FORK_SERVER_MARKERS = ("multiprocessing.forkserver", "onnxlens_server.forkserver")
HOVER_INTERVAL = 0.02
TIMEOUT = 300.0  # seconds to wait for any one answer (the server's own export timeout)
BURST_TARGETS = ["mlp_1", "mlp_2", "mlp_3", "mlp_4"]  # appended to examples/mlp.py, whose `mlp` gets the traces
EXTRA_TARGET = """

@exporter.export_target
def {name}():
    return MLPModel(), (torch.rand(({batch}, 8), dtype=torch.float32),)
"""


@dataclasses.dataclass(frozen=True)
class Sizes:
    exports: int  # sequential exports for the memory figure
    burst_targets: int  # export requests of the hover burst, over BURST_TARGETS
    burst_one: int  # export requests of the one-target burst
    idle_seconds: float


FULL = Sizes(exports=100, burst_targets=40, burst_one=20, idle_seconds=3.0)
QUICK = Sizes(exports=10, burst_targets=12, burst_one=6, idle_seconds=1.0)


class Hovers:
    """Hover requests sent every `HOVER_INTERVAL` s from a thread, not waiting for answers (like a
    mouse moving over the editor), until `stop`."""

    def __init__(self, client: StdioClient, params: dict) -> None:
        self.client, self.params = client, params
        self.ids: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._send, daemon=True)
        self._thread.start()

    def _send(self) -> None:
        while not self._stop.is_set():
            start = time.perf_counter()
            self.ids.append(self.client.send_request("textDocument/hover", self.params))
            self._stop.wait(max(0.0, HOVER_INTERVAL - (time.perf_counter() - start)))

    def stop(self) -> list[float]:
        """Stop sending; the latency (s) of every hover sent. Raises if one came back empty."""
        self._stop.set()
        self._thread.join(TIMEOUT)
        answers = [self.client.wait(i, TIMEOUT) for i in self.ids]
        if any(not a.result for a in answers):
            raise RuntimeError("a hover came back empty: the hovered line has no traces")
        return [a.seconds for a in answers]


def export_params(uri: str, target: str, options: dict | None = None) -> dict:
    return {"command": EXPORT, "arguments": [{"uri": uri, "target": target, "options": options or {}}]}


def statuses(answers: list[Response]) -> dict[str, int]:
    """How many jobs of these export answers ended with each status (ok, cancelled, ...)."""
    return dict(Counter(job["status"] for a in answers for job in a.result["jobs"]))


def latency_ms(seconds: list[float]) -> dict[str, float]:
    """n, p50, p95 (nearest rank) and max, in ms."""
    ms = sorted(s * 1000 for s in seconds)
    if not ms:
        return {"n": 0, "p50": math.nan, "p95": math.nan, "max": math.nan}
    return {"n": len(ms), "p50": statistics.median(ms), "p95": ms[math.ceil(0.95 * len(ms)) - 1], "max": ms[-1]}


def _children(pid: int) -> list[int]:
    """Children of any thread of `pid` (none if it is gone)."""
    try:
        return [
            int(c)
            for task in pathlib.Path(f"/proc/{pid}/task").iterdir()
            for c in (task / "children").read_text().split()
        ]
    except (FileNotFoundError, ProcessLookupError):
        return []


def _cmdline(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def fork_server_pid(server_pid: int) -> int | None:
    """The fork server: the descendant of the server nearest to it whose command line names a fork
    server (the export workers it forks inherit that command line, so the search stops there)."""
    level = [server_pid]
    while level:
        below = []
        for pid in level:
            for child in _children(pid):
                if any(marker in _cmdline(child) for marker in FORK_SERVER_MARKERS):
                    return child
                below.append(child)
        level = below
    return None


def rss_mib(pid: int | None) -> float:
    """VmRSS of `pid` in MiB (nan if there is no such process)."""
    with contextlib.suppress(FileNotFoundError, ProcessLookupError, TypeError):
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return math.nan


def wait_dead(pid: int, timeout: float = 10.0) -> None:
    """Until `pid` is gone or a zombie."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except (FileNotFoundError, ProcessLookupError):
            return
        time.sleep(0.01)
    raise TimeoutError(f"process {pid} still alive {timeout:g} s after SIGKILL")


def measure(client: StdioClient, uri: str, hover_line: int, sizes: Sizes) -> dict[str, Any]:
    """Every figure, one phase after the other (each waits for all its answers)."""
    server = client.process.pid
    client.request(EXECUTE, export_params(uri, "mlp", {"opLevelDebug": True}))  # traces for the hovered line
    hover = {"textDocument": {"uri": uri}, "position": {"line": hover_line, "character": 8}}
    if not client.request("textDocument/hover", hover).result:
        raise RuntimeError(f"no hover on line {hover_line} after an op-level debug export")

    # 2. Memory after 5 and after N sequential exports of one target (whose median is "one export").
    memory, times = {}, []
    for i in range(1, sizes.exports + 1):
        times.append(client.request(EXECUTE, export_params(uri, "mlp_1")).seconds)
        if i in (5, sizes.exports):
            memory[i] = {"server": rss_mib(server), "fork server": rss_mib(fork_server_pid(server))}

    # 1a. Hovers while idle.
    hovers = Hovers(client, hover)
    time.sleep(sizes.idle_seconds)
    idle = hovers.stop()

    # 3. A burst for one target, sent back to back.
    ids = [client.send_request(EXECUTE, export_params(uri, "mlp_1")) for _ in range(sizes.burst_one)]
    one = [client.wait(i, TIMEOUT) for i in ids]
    one_seconds = max(a.arrived for a in one) - min(a.sent for a in one)

    # 1b. Hovers during a burst for several targets.
    hovers = Hovers(client, hover)
    targets = itertools.islice(itertools.cycle(BURST_TARGETS), sizes.burst_targets)
    ids = [client.send_request(EXECUTE, export_params(uri, target)) for target in targets]
    burst = [client.wait(i, TIMEOUT) for i in ids]
    burst_hovers = hovers.stop()

    # 1c. Hovers while the fork server restarts: SIGKILL it, then ask for an export.
    killed = fork_server_pid(server)
    if killed is None:
        raise RuntimeError(
            f"no fork server among the descendants of the server ({server}); looked for {FORK_SERVER_MARKERS}"
        )
    killed_cmdline = _cmdline(killed)
    os.kill(killed, signal.SIGKILL)
    wait_dead(killed)
    hovers = Hovers(client, hover)
    restart = client.request(EXECUTE, export_params(uri, BURST_TARGETS[1]))
    restart_hovers = hovers.stop()

    single = statistics.median(times)
    return {
        "hover_ms": {
            "idle": latency_ms(idle),
            "export burst": latency_ms(burst_hovers),
            "fork server restart": latency_ms(restart_hovers),
        },
        "memory_mib": memory,
        "single_export_s": {"median": single, "min": min(times), "max": max(times), "n": len(times)},
        "one_target_burst": {
            "requests": sizes.burst_one,
            "seconds": one_seconds,
            "ratio_to_single": one_seconds / single,
            "statuses": statuses(one),
        },
        "export_burst": {
            "requests": sizes.burst_targets,
            "targets": BURST_TARGETS,
            "seconds": max(a.arrived for a in burst) - min(a.sent for a in burst),
            "statuses": statuses(burst),
        },
        "restart": {
            "killed_pid": killed,
            "new_pid": fork_server_pid(server),
            "export_s": restart.seconds,
            "statuses": statuses([restart]),
            "killed_cmdline": killed_cmdline,
        },
    }


def print_table(r: dict[str, Any]) -> None:
    print(f"{'hover latency (ms)':<32}{'n':>6}{'p50':>9}{'p95':>9}{'max':>9}")
    for name, h in r["hover_ms"].items():
        print(f"  {name:<30}{h['n']:>6}{h['p50']:>9.1f}{h['p95']:>9.1f}{h['max']:>9.1f}")
    print(f"\n{'memory (RSS MiB)':<32}{'server':>10}{'fork server':>13}")
    for exports, m in r["memory_mib"].items():
        print(f"  {f'after {exports} exports':<30}{m['server']:>10.0f}{m['fork server']:>13.0f}")
    s, one, burst, restart = r["single_export_s"], r["one_target_burst"], r["export_burst"], r["restart"]
    print(f"\none export (round trip): median {s['median']:.2f} s (min {s['min']:.2f}, max {s['max']:.2f}, n {s['n']})")
    print(
        f"burst of {one['requests']} requests for one target: {one['seconds']:.1f} s until the last answer "
        f"= {one['ratio_to_single']:.1f} x one export; jobs {one['statuses']}"
    )
    print(
        f"burst of {burst['requests']} requests over {len(burst['targets'])} targets (hovers above): "
        f"{burst['seconds']:.1f} s; jobs {burst['statuses']}"
    )
    print(
        f"fork server restart: SIGKILL {restart['killed_pid']}, next export answered in {restart['export_s']:.1f} s "
        f"(jobs {restart['statuses']}), fork server now {restart['new_pid']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"a short run: {QUICK}")
    parser.add_argument(
        "--exports",
        type=int,
        help=f"sequential exports for the memory figure (>= 5; {FULL.exports}, quick {QUICK.exports})",
    )
    parser.add_argument("--json", type=pathlib.Path, metavar="OUT", help="write every figure as JSON")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.exports is not None:
        sizes = dataclasses.replace(sizes, exports=max(5, args.exports))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still run `close` below

    root = pathlib.Path(tempfile.mkdtemp(prefix="onnxlens-reliability-"))
    model_file = root / "mlp.py"
    source = (REPO / "examples" / "mlp.py").read_text()
    source += "".join(EXTRA_TARGET.format(name=name, batch=16 * (i + 1)) for i, name in enumerate(BURST_TARGETS))
    model_file.write_text(source)
    uri = model_file.as_uri()
    hover_line = next(i for i, line in enumerate(source.splitlines()) if "self.fc0(tensor_x)" in line)

    log = root / "server.log"
    client = StdioClient(cwd=REPO, log=log)  # its own session: close() kills the server, fork server and workers
    try:
        client.initialize(root)
        client.notify(
            "textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": source}}
        )
        results = measure(client, uri, hover_line, sizes)
    except BaseException:
        print(f"stopped early; the server's log: {log}", file=sys.stderr)
        raise
    finally:
        client.close()
    shutil.rmtree(root)
    results["sizes"] = dataclasses.asdict(sizes)
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
