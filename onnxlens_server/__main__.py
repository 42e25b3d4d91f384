"""``onnxlens-server``: the language server over stdio."""

from __future__ import annotations

import os
import sys

from onnxlens_server.framing import CheckedStdin


def main() -> None:
    # JSON-RPC gets a private copy of the real stdout; fd 1 (print, C/C++ output of torch and of
    # user code, inherited by worker processes) goes to stderr, which the editor logs.
    rpc_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from onnxlens_server.server import server

    stdin = CheckedStdin(sys.stdin.fileno())
    server.start_io(stdin, rpc_out)
    if stdin.error:  # the stream is out of step: a new server starts clean
        sys.exit(f"onnxlens-server: bad message from the client: {stdin.error}; exiting (the client restarts the server)")


if __name__ == "__main__":
    main()
