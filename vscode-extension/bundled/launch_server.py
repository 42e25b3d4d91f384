"""Start the onnxlens language server with this interpreter (shipped inside the .vsix).

torch, onnx, onnxscript, pygls and onnxlens itself come from the interpreter the extension uses:
``python -m pip install "onnxlens[server]"``. ``--check`` reports what is there, as JSON.
"""

import importlib.util
import json
import sys


def check() -> dict:
    missing = [name for name in ("exporter", "onnxlens_server", "pygls", "torch") if importlib.util.find_spec(name) is None]
    return {"ok": not missing, "missing": missing, "python": sys.executable, "netron": importlib.util.find_spec("netron") is not None}


if __name__ == "__main__":
    status = check()
    if "--check" in sys.argv:
        print(json.dumps(status))
        sys.exit(0)
    if not status["ok"]:
        sys.stderr.write(f"onnxlens cannot start: {', '.join(status['missing'])} not installed in {sys.executable}\n")
        sys.exit(3)
    from onnxlens_server.__main__ import main

    main()
