#!/usr/bin/env bash
# Builds Jaeger v2 (github.com/jaegertracing/jaeger/cmd/jaeger, an OpenTelemetry Collector
# distribution with an in-memory trace store and the query API) from the Go module proxy
# into a cache folder outside the repo and prints the binary's path. The tracing tests
# start it with a config of their own that binds its OTLP receiver and query API to
# loopback ports (its defaults listen on every interface).
# Built from a copy of the module's folder, with the module's go.mod and go.sum, so our
# go.mod neither constrains nor records it (`go install pkg@version` refuses the module:
# its go.mod has a replace directive). The copy is patched (hack/jaeger/memory-only.patch)
# to link the memory store and the components the tests configure, and none of the other
# storage backends: a third of the packages to compile.
# With SWITCHBOARD_NO_BUILD=1 it only prints an installed binary and exits 3 when there is
# none; with --download it only fetches into the Go module cache what the build needs, and
# prints nothing (.ci/run does that in the background while other steps compile).
# Idempotent: an installed version is printed at once.
#
#   "$(hack/jaeger.sh)" --config file:jaeger.yaml
#
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail

# v1.75.0 is the Jaeger v2 release this project's module proxy list approves (v2.12.0 of
# Jaeger's own numbering; the v1.x module tags carry the v2 binaries).
JAEGER_VERSION="${JAEGER_VERSION:-v1.75.0}"
CACHE_ROOT="${SWITCHBOARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/switchboard}"
JAEGER_PATCH="$(cd "$(dirname "$0")" && pwd)/jaeger/memory-only.patch"
dir="${CACHE_ROOT}/jaeger-${JAEGER_VERSION}-$(sha256sum "${JAEGER_PATCH}" | cut -c1-12)"

log() { printf 'jaeger: %s\n' "$*" >&2; }

# patched_source WORK copies the module's source into WORK/src and applies the patch.
patched_source() {
  local src
  src="$(cd "$1" && go mod download -json "github.com/jaegertracing/jaeger@${JAEGER_VERSION}" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -d "${src}" ] || { log "the module github.com/jaegertracing/jaeger@${JAEGER_VERSION} was not downloaded"; exit 1; }
  cp -r "${src}" "$1/src"
  chmod -R u+w "$1/src"
  patch -d "$1/src" -p1 -F0 -s <"${JAEGER_PATCH}"
}

if [ -x "${dir}/jaeger" ]; then
  [ "${1:-}" = --download ] || echo "${dir}/jaeger"
  exit 0
fi
if [ -n "${SWITCHBOARD_NO_BUILD:-}" ]; then
  log "Jaeger ${JAEGER_VERSION} is not built: run $0"
  exit 3
fi
command -v go >/dev/null || { log "go is required"; exit 1; }
command -v patch >/dev/null || { log "patch is required (Debian package patch)"; exit 1; }
mkdir -p "${CACHE_ROOT}"
work="$(mktemp -d "${CACHE_ROOT}/jaeger-build.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0
patched_source "${work}"
if [ "${1:-}" = --download ]; then
  (cd "${work}/src" && go list -e -deps ./cmd/jaeger >/dev/null)
  exit 0
fi
log "building Jaeger ${JAEGER_VERSION} from the Go module proxy (minutes on two cores)"
(cd "${work}/src" && go build -trimpath -o "${work}/jaeger" ./cmd/jaeger) >&2
mkdir -p "${dir}"
mv "${work}/jaeger" "${dir}/jaeger"
echo "${dir}/jaeger"
