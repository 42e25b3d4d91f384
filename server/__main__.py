"""``onnxlens-server``: the language server over stdio."""

from __future__ import annotations

import os
import sys

from onnxlens_server.framing import CheckedStdin


def main() -> None:
    _leave_the_workspace()
    # JSON-RPC gets private copies of the real stdin and stdout, which no process the server starts
    # inherits: fd 0 becomes /dev/null, and fd 1 (print, C/C++ output of torch and of user code)
    # goes to stderr, which the editor logs.
    rpc_in, rpc_out = os.dup(0), os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from onnxlens_server.server import server

    stdin = CheckedStdin(rpc_in)
    server.start_io(stdin, rpc_out)
    if stdin.error:  # the stream is out of step: a new server starts clean
        sys.exit(
            f"onnxlens-server: bad message from the client: {stdin.error}; exiting (the client restarts the server)"
        )


def _leave_the_workspace() -> None:
    """Work from the folder holding this package: ``python -m`` put the working directory (the editor's
    workspace) first on sys.path, and the processes the server starts would inherit it. No module of
    the workspace may shadow one the server or its helpers import (user code runs only in exports)."""
    cwd, here = os.getcwd(), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [os.path.abspath(p or cwd) for p in sys.path]
    sys.path[:] = [p for p in paths if p != cwd or cwd == here]
    os.chdir(here)


if __name__ == "__main__":
    main()
