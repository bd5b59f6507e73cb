#!/usr/bin/env bash
# Builds Jaeger v2 (github.com/jaegertracing/jaeger/cmd/jaeger, an OpenTelemetry Collector
# distribution with an in-memory trace store and the query API) from the Go module proxy
# into a cache folder outside the repo and prints the binary's path. The tracing tests
# start it with a config of their own that binds its OTLP receiver and query API to
# loopback ports (its defaults listen on every interface).
# Built from the module's own folder in the module cache, with the module's go.mod and
# go.sum, so our go.mod neither constrains nor records it (`go install pkg@version` refuses
# the module: its go.mod has a replace directive).
# With SWITCHBOARD_NO_BUILD=1 it only prints an installed binary and exits 3 when there is
# none. Idempotent: an installed version is printed at once.
#
#   "$(hack/jaeger.sh)" --config file:jaeger.yaml
#
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail

# v1.75.0 is the Jaeger v2 release this project's module proxy list approves (v2.12.0 of
# Jaeger's own numbering; the v1.x module tags carry the v2 binaries).
JAEGER_VERSION="${JAEGER_VERSION:-v1.75.0}"
CACHE_ROOT="${SWITCHBOARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/switchboard}"
dir="${CACHE_ROOT}/jaeger-${JAEGER_VERSION}"

log() { printf 'jaeger: %s\n' "$*" >&2; }

if [ ! -x "${dir}/jaeger" ]; then
  if [ -n "${SWITCHBOARD_NO_BUILD:-}" ]; then
    log "Jaeger ${JAEGER_VERSION} is not built: run $0"
    exit 3
  fi
  command -v go >/dev/null || { log "go is required"; exit 1; }
  log "building Jaeger ${JAEGER_VERSION} from the Go module proxy (several minutes on two cores)"
  mkdir -p "${CACHE_ROOT}"
  work="$(mktemp -d "${CACHE_ROOT}/jaeger-build.XXXXXX")"
  trap 'rm -rf "${work}"' EXIT
  export GOWORK=off GOFLAGS=-mod=readonly
  src="$(cd "${work}" && go mod download -json "github.com/jaegertracing/jaeger@${JAEGER_VERSION}" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -d "${src}" ] || { log "the module github.com/jaegertracing/jaeger@${JAEGER_VERSION} was not downloaded"; exit 1; }
  (cd "${src}" && CGO_ENABLED=0 go build -trimpath -o "${work}/jaeger" ./cmd/jaeger) >&2
  mkdir -p "${dir}"
  mv "${work}/jaeger" "${dir}/jaeger"
fi
echo "${dir}/jaeger"
