#!/usr/bin/env bash
# Run every test (after scripts/setup.sh): Python (exporter, SARIF, language server), then the
# extension's unit tests and its end-to-end tests in a real VS Code (code-server, installed on demand).
# pytest runs on every core (pytest-xdist); the tests of a module that share a module-scoped fixture stay
# on one worker (tests/conftest.py). Arguments go to pytest (`-n 0` runs it in one process).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -q -n auto --dist loadgroup "$@"
bash scripts/setup-e2e.sh
cd vscode-extension
npm run -s typecheck
npm run -s test:unit
ONNXLENS_PYTHON="$PWD/../.venv/bin/python" npm run -s test:e2e
