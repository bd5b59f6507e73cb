#!/usr/bin/env bash
# Installs the third-party MCP servers the tests run against into a cache folder outside
# the repo and prints the path of the server-everything entry point (a Node.js script).
# Idempotent: an installed version is printed at once.
#
#   node "$(hack/test-servers.sh)" streamableHttp   # PORT=... selects the port
#
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail

SERVER_EVERYTHING_VERSION="${SERVER_EVERYTHING_VERSION:-2026.8.31}"
CACHE_ROOT="${SWITCHBOARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/switchboard}"
PREFIX="${CACHE_ROOT}/npm/server-everything-${SERVER_EVERYTHING_VERSION}"
PACKAGE_DIR="${PREFIX}/node_modules/@modelcontextprotocol/server-everything"

log() { printf 'test-servers: %s\n' "$*" >&2; }

entry_point() {
  # The package's "bin" names its entry point; read it rather than guess the file name.
  node -e '
    const dir = process.argv[1];
    const pkg = require(dir + "/package.json");
    const bin = typeof pkg.bin === "string" ? pkg.bin : Object.values(pkg.bin || {})[0];
    if (!bin) { process.exit(1); }
    console.log(require("path").resolve(dir, bin));
  ' "${PACKAGE_DIR}"
}

if [ ! -f "${PACKAGE_DIR}/package.json" ]; then
  command -v npm >/dev/null || { log "npm is required"; exit 1; }
  log "installing @modelcontextprotocol/server-everything@${SERVER_EVERYTHING_VERSION}"
  mkdir -p "${PREFIX}"
  npm install --prefix "${PREFIX}" --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/server-everything@${SERVER_EVERYTHING_VERSION}" >&2
fi
entry_point
