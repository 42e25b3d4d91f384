#!/usr/bin/env bash
# Run every test (after scripts/setup.sh): ruff's lint and format check, Python (exporter, SARIF, language server), then the
# extension's unit tests and its end-to-end tests in a real VS Code (code-server, installed on demand).
# pytest runs on every core (pytest-xdist), one test file per worker at a time, in the file's order (its
# module-scoped servers and exports are set up once). Arguments go to pytest (`-n 0` runs it in one process).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -q -n auto --dist loadfile "$@"
bash scripts/setup-e2e.sh
cd vscode-extension
npm run -s typecheck
npm run -s test:unit
ONNXLENS_PYTHON="$PWD/../.venv/bin/python" npm run -s test:e2e
