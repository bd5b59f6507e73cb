#!/usr/bin/env bash
# Raises a Go module to the project's version of every module both use, and tidies it:
#
#   hack/go-share-versions.sh DIR
#       the module in DIR (a folder with a go.mod);
#   hack/go-share-versions.sh --tools DIR MODULE@VERSION PACKAGE...
#       first writes into DIR a module that requires MODULE@VERSION and names its commands
#       PACKAGE... as tools, so that `go build -o OUT PACKAGE...` in DIR builds them.
#
# The asset scripts build Kubernetes, etcd, thv, zitadel's example OpenID provider,
# containerd and CoreDNS from the module proxy, static and without build paths, as the
# project's release is built. Go reuses a compiled package only when it and everything below
# it are the same versions, so at their own versions none of those builds reused the
# project's client-go, gRPC or OpenTelemetry, nor one another's: each compiled them again.
# At the project's versions (never lower than their own: hack/newerversions keeps only the
# raises) they share them, which on a new two-core machine is minutes of compile work
# less. What is built this way runs under the tests that use it. Where one of a module's own
# dependencies does not build at them, its script first moves that one to a release that
# does (kube-network-policies' network-policy-api, hack/node.sh).
set -euo pipefail

usage() {
  printf 'usage: %s DIR | --tools DIR MODULE@VERSION PACKAGE...\n' "$0" >&2
  exit 2
}
root="$(cd "$(dirname "$0")/.." && pwd)"
export GOWORK=off GOFLAGS=-mod=mod LC_ALL=C

if [ "${1:-}" = "--tools" ]; then
  [ $# -ge 4 ] || usage
  dir="$2" module="${3%@*}" version="${3#*@}"
  shift 3
  mkdir -p "${dir}"
  {
    printf 'module switchboard.local/%s\n\ngo %s\n\n' "$(basename "${dir}")" "$(go env GOVERSION | sed 's/^go//')"
    printf 'tool %s\n' "$@"
    printf '\nrequire %s %s\n' "${module}" "${version}"
  } >"${dir}/go.mod"
  set -- "${dir}"
fi
[ $# -eq 1 ] && [ -f "$1/go.mod" ] || usage

# The modules both build lists hold, raised to the project's version where that is newer.
# Only those: requiring one the other module does not use could make an import ambiguous (a
# package that moved into a module of its own is then found in both). Never lowered:
# `go mod edit -require` sets the version outright, and a module built below a version it
# asks for may not build or behave as released.
(cd "$1" && go mod tidy)
requires="$(join \
  <(cd "$1" && go list -m -f '{{if not .Main}}{{if or (not .Replace) .Replace.Version}}{{.Path}} {{.Version}}{{end}}{{end}}' all | sort -u) \
  <(cd "${root}" && GOFLAGS=-mod=readonly go list -m -f '{{if and (not .Main) (not .Replace)}}{{.Path}} {{.Version}}{{end}}' all | sort -u) |
  (cd "${root}" && GOFLAGS=-mod=readonly CGO_ENABLED=0 go run -trimpath ./hack/newerversions))"
[ -z "${requires}" ] || (cd "$1" && xargs go mod edit <<<"${requires}" && go mod tidy)
