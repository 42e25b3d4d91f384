"""``onnxlens-server``: the language server over stdio."""

from __future__ import annotations

import os
import sys


def main() -> None:
    _forget_working_directory()
    # JSON-RPC gets a private copy of the real stdout; fd 1 (print, C/C++ output of torch and of
    # user code, inherited by worker processes) goes to stderr, which the editor logs.
    rpc_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from onnxlens_server.server import server

    server.start_io(sys.stdin.buffer, rpc_out)


def _forget_working_directory() -> None:
    """``python -m`` puts the working directory (the editor's workspace) first on sys.path: take it off,
    so no module of the workspace shadows one the server imports (user code runs only in exports)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != cwd or cwd == here]


if __name__ == "__main__":
    main()
