"""The server's stdout carries nothing but JSON-RPC, even while torch and user code print."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import threading

SOURCE = pathlib.Path(__file__).parent / "server_workspace"


class StrictReader:
    """Reads LSP messages and fails on any byte that is not part of a well-formed message."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def read(self) -> dict:
        headers = {}
        while True:
            line = self.stream.readline()
            assert line, "server closed stdout"
            assert line.endswith(b"\r\n"), f"not a header line: {line!r}"
            if line == b"\r\n":
                break
            name, sep, value = line.decode("ascii").partition(":")
            assert sep and name in ("Content-Length", "Content-Type"), f"not a header: {line!r}"
            headers[name] = value.strip()
        body = self.stream.read(int(headers["Content-Length"]))
        message = json.loads(body)
        assert message.get("jsonrpc") == "2.0", message
        return message


def send(stdin, message: dict) -> None:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    stdin.flush()


def test_stdout_is_pure_json_rpc_while_user_code_prints(tmp_path):
    for f in [*SOURCE.glob("*.py"), SOURCE.parent / "fixtures" / "custom_ops.py"]:
        shutil.copy(f, tmp_path / f.name)
    process = subprocess.Popen([sys.executable, "-m", "onnxlens_server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stderr: list[bytes] = []
    threading.Thread(target=lambda: stderr.extend(process.stderr), daemon=True).start()
    reader = StrictReader(process.stdout)
    try:
        send(process.stdin, {"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}}})
        assert reader.read()["id"] == 1
        send(process.stdin, {"method": "initialized", "params": {}})
        uri = (tmp_path / "models.py").as_uri()
        send(process.stdin, {"id": 2, "method": "workspace/executeCommand",
                             "params": {"command": "onnxlens.server.export", "arguments": [{"uri": uri, "target": "mlp"}]}})
        seen, logged = [], []
        while True:
            message = reader.read()  # every message in between must be well-formed too
            seen.append(message.get("method"))
            if message.get("method") == "window/logMessage":
                logged.append((message["params"]["type"], message["params"]["message"]))
            if message.get("id") == 2:
                break
        assert message["result"]["jobs"][0]["status"] == "ok", message
        assert "textDocument/publishDiagnostics" in seen and "onnxlens/exportFinished" in seen
        send(process.stdin, {"id": 3, "method": "shutdown"})
        while (message := reader.read()).get("id") != 3:  # the worker's output is logged as it is read: maybe after the answer
            if message.get("method") == "window/logMessage":
                logged.append((message["params"]["type"], message["params"]["message"]))
        send(process.stdin, {"method": "exit"})
        process.wait(timeout=20)
    finally:
        process.kill()
    # What user code prints reaches the editor's log as information, not as an error on stderr.
    assert (3, "user code printing to stdout") in logged, logged
    assert b"user code printing to stdout" not in b"".join(stderr)
    assert not [text for kind, text in logged if kind <= 2 and "Warning" in text]  # library warnings are not warnings of the user's
