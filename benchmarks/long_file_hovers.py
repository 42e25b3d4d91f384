"""Hover latency while the code lenses of a long model file are computed, as when it is edited.

    python benchmarks/long_file_hovers.py [--lines 10000] [--rounds 20]

Each round edits the file (a new text: its targets are discovered again), asks for its lenses and at
once for a hover, and times the hover's answer from when the lenses were asked for.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import tempfile
import time

from server_roundtrip import Client

BLOCK = '''\
class Block{i}(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 32)

    def forward(self, x):
        return torch.relu(self.linear(x))[:, :8] + x.sum(dim=-1, keepdim=True)


@exporter.export_target
def block{i}():
    return Block{i}(), (torch.randn(2, 16),)


'''


def long_source(lines: int) -> str:
    return "import torch\nfrom torch import nn\nimport exporter\n\n\n" + "".join(BLOCK.format(i=i) for i in range(lines // BLOCK.count("\n")))


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
    client = Client(root)
    while "Export workers warm" not in str(client.messages.get(timeout=600)[1]):  # not while the fork server imports torch
        pass
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}})
    hovers, lenses = [], []
    for version in range(2, args.rounds + 2):
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": f"{text}# {version}\n"}]})
        client.next_id += 1
        lens_id, start = client.next_id, time.perf_counter()
        client.send({"id": lens_id, "method": "textDocument/codeLens", "params": {"textDocument": {"uri": uri}}})
        client.next_id += 1
        client.send({"id": client.next_id, "method": "textDocument/hover", "params": {"textDocument": {"uri": uri}, "position": {"line": 5, "character": 0}}})
        answered = {}
        while len(answered) < 2:
            at, message = client.messages.get(timeout=60)
            if message.get("id") in (lens_id, client.next_id) and "method" not in message:
                answered[message["id"]] = at - start
        hovers.append(answered[client.next_id])
        lenses.append(answered[lens_id])
        time.sleep(0.2)
    client.close()
    lines = len(text.splitlines())
    print(f"{lines} lines, {text.count('@exporter.export_target')} targets, {args.rounds} edits")
    print(f"lenses: median {statistics.median(lenses) * 1000:.0f} ms, max {max(lenses) * 1000:.0f} ms")
    print(f"hover asked with them: median {statistics.median(hovers) * 1000:.0f} ms, max {max(hovers) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
