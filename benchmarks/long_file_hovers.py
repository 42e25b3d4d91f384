"""Hover latency while the code lenses of a long model file are computed, as when it is edited.

    python benchmarks/long_file_hovers.py [--lines 10000] [--rounds 20]

Each round edits the file (a new text: its targets are discovered again), asks for its lenses and at
once for a hover, and times the hover's answer from when the lenses were asked for; then the same
hover alone, as many times, for the ratio.
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

BLOCK = """\
class Block{i}(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 32)

    def forward(self, x):
        return torch.relu(self.linear(x))[:, :8] + x.sum(dim=-1, keepdim=True)


@exporter.export_target
def block{i}():
    return Block{i}(), (torch.randn(2, 16),)


"""


def long_source(lines: int) -> str:
    return "import torch\nfrom torch import nn\nimport exporter\n\n\n" + "".join(
        BLOCK.format(i=i) for i in range(lines // BLOCK.count("\n"))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    root = pathlib.Path(tempfile.mkdtemp())
    path = root / "long.py"
    text = long_source(args.lines)
    path.write_text(text)
    uri = path.as_uri()
    client = StdioClient(cwd=REPO)
    client.initialize(root)
    export = {"command": "onnxlens.server.export", "arguments": [{"uri": uri, "target": "block0"}]}
    (job,) = client.request("workspace/executeCommand", export, timeout=600).result["jobs"]  # warm: the fork server
    if job["status"] != "ok":  # imports torch meanwhile
        raise RuntimeError(f"the warm-up export failed: {job}")
    client.notify(
        "textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}
    )
    hover = {"textDocument": {"uri": uri}, "position": {"line": 5, "character": 0}}
    hovers, lenses = [], []
    for version in range(2, args.rounds + 2):
        client.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": f"{text}# {version}\n"}]},
        )
        lens_id = client.send_request("textDocument/codeLens", {"textDocument": {"uri": uri}})
        hover_id = client.send_request("textDocument/hover", hover)
        lens = client.wait(lens_id, timeout=60)
        hovers.append(client.wait(hover_id, timeout=60).arrived - lens.sent)  # from when the lenses were asked for
        lenses.append(lens.seconds)
        time.sleep(0.2)
    idle = []  # the same hover without lenses to compute, in this run: the baseline
    for _ in range(args.rounds):
        idle.append(client.request("textDocument/hover", hover, timeout=60).seconds)
        time.sleep(0.2)
    client.close()
    lines = len(text.splitlines())
    print(f"{lines} lines, {text.count('@exporter.export_target')} targets, {args.rounds} edits")
    print(f"lenses: median {statistics.median(lenses) * 1000:.0f} ms, max {max(lenses) * 1000:.0f} ms")
    print(f"hover asked with them: median {statistics.median(hovers) * 1000:.0f} ms, max {max(hovers) * 1000:.0f} ms")
    print(
        f"hover alone: median {statistics.median(idle) * 1000:.0f} ms, max {max(idle) * 1000:.0f} ms; "
        f"ratio of the medians (with lenses / alone) {statistics.median(hovers) / statistics.median(idle):.1f}"
    )


if __name__ == "__main__":
    main()
