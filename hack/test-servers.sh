#!/usr/bin/env bash
# Installs the third-party MCP servers and bridges the tests run against into a cache
# folder outside the repo and prints the path of the server-everything entry point (a
# Node.js script). With --supergateway it prints the entry point of the npm supergateway
# bridge instead, the peer the bridge benchmark compares against. Idempotent: an installed
# version is printed at once.
#
#   node "$(hack/test-servers.sh)" streamableHttp   # PORT=... selects the port
#   node "$(hack/test-servers.sh --supergateway)" --stdio "CMD" --outputTransport streamableHttp
#
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail

SERVER_EVERYTHING_VERSION="${SERVER_EVERYTHING_VERSION:-2026.8.31}"
SUPERGATEWAY_VERSION="${SUPERGATEWAY_VERSION:-4.0.0}"
CACHE_ROOT="${SWITCHBOARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/switchboard}"

log() { printf 'test-servers: %s\n' "$*" >&2; }

# install NAME PACKAGE VERSION installs PACKAGE@VERSION under its own prefix in the cache
# (unless already there) and sets PACKAGE_DIR to the installed package's folder.
install() {
  local name="$1" package="$2" version="$3"
  local prefix="${CACHE_ROOT}/npm/${name}-${version}"
  PACKAGE_DIR="${prefix}/node_modules/${package}"
  if [ ! -f "${PACKAGE_DIR}/package.json" ]; then
    command -v npm >/dev/null || { log "npm is required"; exit 1; }
    log "installing ${package}@${version}"
    mkdir -p "${prefix}"
    npm install --prefix "${prefix}" --no-audit --no-fund --loglevel=error \
      "${package}@${version}" >&2
  fi
}

entry_point() {
  # The package's "bin" names its entry point; read it rather than guess the file name.
  node -e '
    const dir = process.argv[1];
    const pkg = require(dir + "/package.json");
    const bin = typeof pkg.bin === "string" ? pkg.bin : Object.values(pkg.bin || {})[0];
    if (!bin) { process.exit(1); }
    console.log(require("path").resolve(dir, bin));
  ' "$1"
}

case "${1:-}" in
  "")
    install server-everything @modelcontextprotocol/server-everything "${SERVER_EVERYTHING_VERSION}"
    server_everything="${PACKAGE_DIR}"
    install supergateway supergateway "${SUPERGATEWAY_VERSION}"
    entry_point "${server_everything}"
    ;;
  --supergateway)
    install supergateway supergateway "${SUPERGATEWAY_VERSION}"
    entry_point "${PACKAGE_DIR}"
    ;;
  *)
    log "usage: $0 [--supergateway]"
    exit 2
    ;;
esac
