#!/usr/bin/env bash
# Run every test (after scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -q "$@"
