"""The server's stdout carries nothing but JSON-RPC, even while torch and user code print."""

from __future__ import annotations

import pathlib
import shutil

from lsp_client import StdioClient

SOURCE = pathlib.Path(__file__).parent / "server_workspace"


def test_stdout_is_pure_json_rpc_while_user_code_prints(tmp_path):
    for f in [*SOURCE.glob("*.py"), SOURCE.parent / "fixtures" / "custom_ops.py"]:
        shutil.copy(f, tmp_path / f.name)
    client = StdioClient()  # reads strictly: a byte outside a well-formed message fails every wait below
    try:
        client.initialize(tmp_path)
        uri = (tmp_path / "models.py").as_uri()
        answer = client.request(
            "workspace/executeCommand",
            {"command": "onnxlens.server.export", "arguments": [{"uri": uri, "target": "mlp"}]},
        )
        assert answer.result["jobs"][0]["status"] == "ok", answer.message
        seen = [r.message.get("method") for r in client.received]
        assert "textDocument/publishDiagnostics" in seen and "onnxlens/exportFinished" in seen
        # The worker's output is logged as it is read: maybe after the answer, surely before the shutdown's.
        assert client.close(timeout=20) == 0
        client.wait_closed(timeout=10)  # stdout read to its end, every byte of it framed
    finally:
        client.close()
    logged = [
        (r.message["params"]["type"], r.message["params"]["message"])
        for r in client.received
        if r.message.get("method") == "window/logMessage"
    ]
    # What user code prints reaches the editor's log as information, not as an error on stderr.
    assert (3, "user code printing to stdout") in logged, logged
    assert "user code printing to stdout" not in client.stderr_text()
    assert not [
        text for kind, text in logged if kind <= 2 and "Warning" in text
    ]  # library warnings are not warnings of the user's


def test_a_refused_request_is_one_line_of_the_log_not_an_error_with_a_traceback(tmp_path):
    (tmp_path / "m.py").write_text("import exporter\n\n\n@exporter.export_target\ndef t():\n    pass\n")
    client = StdioClient()
    try:
        client.initialize(tmp_path)
        arguments = [{"uri": (tmp_path / "m.py").as_uri(), "target": "t"}]
        command = {"command": "onnxlens.server.graph", "arguments": arguments}
        answer = client.request("workspace/executeCommand", command)
        assert client.close(timeout=20) == 0
        client.wait_closed(timeout=10)
    finally:
        client.close()
    assert answer.message["error"]["code"] == 1009  # NOT_EXPORTED
    logged = [
        (r.message["params"]["type"], r.message["params"]["message"])
        for r in client.received
        if r.message.get("method") == "window/logMessage"
    ]
    assert (3, f"Refused (1009): {answer.message['error']['message']}") in logged, logged  # 3: info
    assert "Traceback" not in client.stderr_text() and "Traceback" not in str(logged)
