#!/usr/bin/env bash
# Installs the third-party MCP servers and bridges the tests run against into a cache
# folder outside the repo and prints the path of the server-everything entry point (a
# Node.js script). With --supergateway it prints the entry point of the npm supergateway
# bridge instead, the peer the bridge benchmark compares against. With --filesystem it
# prints the entry point of the npm reference filesystem server (run it with the folders
# it may serve as arguments), which the shared-mode tests use. With --conformance it
# installs Node 22 and the official MCP conformance suite (which needs Node 22) and prints
# the path of a wrapper script that runs the suite with that Node. With --conformance-2026
# it does the same for the suite's 2026-07-28 release (installed beside the first, same
# Node 22; run it with --requirements 2026-07-28). With --thv it builds
# ToolHive's thv from the Go module proxy (minutes the first time) and prints the binary,
# the peer the gateway benchmark compares against (with SWITCHBOARD_NO_BUILD=1 it only
# prints an installed one, and exits 3 when there is none). With --download it installs
# every npm package above and fetches into the Go module cache what building thv needs,
# prints nothing and builds nothing (.ci/run does that in the background while other steps
# compile). Idempotent: an installed version is printed at once.
#
#   node "$(hack/test-servers.sh)" streamableHttp   # PORT=... selects the port
#   node "$(hack/test-servers.sh --supergateway)" --stdio "CMD" --outputTransport streamableHttp
#   node "$(hack/test-servers.sh --filesystem)" DIR...
#   "$(hack/test-servers.sh --conformance)" server --url http://127.0.0.1:PORT/mcp
#   "$(hack/test-servers.sh --conformance-2026)" server --url URL --requirements 2026-07-28
#   "$(hack/test-servers.sh --thv)" proxy NAME --host 127.0.0.1 --port P --target-uri URL
#
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail

SERVER_EVERYTHING_VERSION="${SERVER_EVERYTHING_VERSION:-2026.8.31}"
SUPERGATEWAY_VERSION="${SUPERGATEWAY_VERSION:-4.0.0}"
SERVER_FILESYSTEM_VERSION="${SERVER_FILESYSTEM_VERSION:-2026.8.31}"
CONFORMANCE_VERSION="${CONFORMANCE_VERSION:-0.1.16}"
CONFORMANCE_2026_VERSION="${CONFORMANCE_2026_VERSION:-0.2.0-alpha.12}"
CONFORMANCE_NODE_VERSION="${CONFORMANCE_NODE_VERSION:-22}"
THV_VERSION="${THV_VERSION:-v0.47.0}"
# ToolHive's go.mod asks for Go 1.26.0, so it builds with the Go this project uses and
# shares its build cache (a second toolchain would download and compile everything again).
THV_GOTOOLCHAIN="${THV_GOTOOLCHAIN:-local}"
THV_PACKAGE=github.com/stacklok/toolhive/cmd/thv
CACHE_ROOT="${SWITCHBOARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/switchboard}"

log() { printf 'test-servers: %s\n' "$*" >&2; }

# install NAME PACKAGE VERSION [FILE] installs PACKAGE@VERSION under its own prefix in the
# cache (unless FILE, by default its package.json, is already there) and sets PACKAGE_DIR
# to the installed package's folder.
install() {
  local name="$1" package="$2" version="$3"
  local prefix="${CACHE_ROOT}/npm/${name}-${version}"
  PACKAGE_DIR="${prefix}/node_modules/${package}"
  if [ ! -f "${PACKAGE_DIR}/${4:-package.json}" ]; then
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

# conformance VERSION installs Node 22 and release VERSION of the conformance suite, writes
# a wrapper script that runs the suite's entry point with that Node (the suite needs Node
# 22; the system one may be older) and prints the wrapper's path. Each release has its own
# prefix in the cache, so several live side by side.
conformance() {
  local version="$1"
  # The node package downloads the binary in a postinstall step: wait for bin/node, not
  # package.json, so an interrupted install is redone.
  install node node "${CONFORMANCE_NODE_VERSION}" bin/node
  local node="${PACKAGE_DIR}/bin/node"
  install conformance @modelcontextprotocol/conformance "${version}"
  local entry
  entry="$(entry_point "${PACKAGE_DIR}")"
  local wrapper="${CACHE_ROOT}/npm/conformance-${version}/conformance"
  if [ ! -x "${wrapper}" ]; then
    # Written beside and renamed, so a concurrent run never sees half a script.
    printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "${node}" "${entry}" >"${wrapper}.tmp"
    chmod +x "${wrapper}.tmp"
    mv "${wrapper}.tmp" "${wrapper}"
  fi
  echo "${wrapper}"
}

# thv builds ToolHive's thv with go install into its own folder in the cache (unless it is
# there) and prints the binary's path.
thv() {
  local dir="${CACHE_ROOT}/thv-${THV_VERSION}"
  if [ ! -x "${dir}/thv" ]; then
    if [ -n "${SWITCHBOARD_NO_BUILD:-}" ]; then
      log "thv ${THV_VERSION} is not built: run $0 --thv"
      exit 3
    fi
    command -v go >/dev/null || { log "go is required"; exit 1; }
    log "building thv ${THV_VERSION} from the Go module proxy (minutes the first time)"
    mkdir -p "${CACHE_ROOT}"
    local work
    work="$(mktemp -d "${CACHE_ROOT}/thv-build.XXXXXX")"
    # shellcheck disable=SC2064 # expanded now: work is local to this function
    trap "rm -rf '${work}'" EXIT
    # Built in a module of its own, so our go.mod neither constrains nor records it, at our
    # versions of the modules both use and static, so that it reuses what the project's
    # build compiled (hack/go-share-versions.sh); written into the work folder and moved,
    # so an interrupted build leaves no binary behind.
    GOTOOLCHAIN="${THV_GOTOOLCHAIN}" "$(dirname "$0")/go-share-versions.sh" --tools "${work}/thv" \
      "github.com/stacklok/toolhive@${THV_VERSION}" "${THV_PACKAGE}" >&2
    (cd "${work}/thv" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN="${THV_GOTOOLCHAIN}" \
      go build -trimpath -ldflags='-s -w' -o "${work}/thv.bin" "${THV_PACKAGE}") >&2
    mkdir -p "${dir}"
    mv "${work}/thv.bin" "${dir}/thv"
  fi
  echo "${dir}/thv"
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
  --filesystem)
    install server-filesystem @modelcontextprotocol/server-filesystem "${SERVER_FILESYSTEM_VERSION}"
    entry_point "${PACKAGE_DIR}"
    ;;
  --conformance)
    conformance "${CONFORMANCE_VERSION}"
    ;;
  --conformance-2026)
    conformance "${CONFORMANCE_2026_VERSION}"
    ;;
  --thv)
    thv
    ;;
  --download)
    install server-everything @modelcontextprotocol/server-everything "${SERVER_EVERYTHING_VERSION}"
    install supergateway supergateway "${SUPERGATEWAY_VERSION}"
    install server-filesystem @modelcontextprotocol/server-filesystem "${SERVER_FILESYSTEM_VERSION}"
    conformance "${CONFORMANCE_VERSION}" >/dev/null
    conformance "${CONFORMANCE_2026_VERSION}" >/dev/null
    # Resolving thv's module at our versions downloads what its build needs.
    if [ ! -x "${CACHE_ROOT}/thv-${THV_VERSION}/thv" ]; then
      work="$(mktemp -d)"
      trap 'rm -rf "${work}"' EXIT
      GOTOOLCHAIN="${THV_GOTOOLCHAIN}" "$(dirname "$0")/go-share-versions.sh" --tools "${work}/thv" \
        "github.com/stacklok/toolhive@${THV_VERSION}" "${THV_PACKAGE}"
    fi
    ;;
  *)
    log "usage: $0 [--supergateway | --filesystem | --conformance | --conformance-2026 | --thv | --download]"
    exit 2
    ;;
esac
