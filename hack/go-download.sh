#!/usr/bin/env bash
# Downloads into the Go module cache everything that building some packages of a module
# needs, and builds nothing:
#
#   hack/go-download.sh MODULE@VERSION PACKAGE...
#
# The asset scripts call it in their download mode, which .ci/run runs in the background
# while `make verify` compiles: on a new machine each build would otherwise wait for its
# own downloads with the cores idle. The packages' dependencies are listed under the
# module's own go.mod and go.sum (the versions `go install MODULE/PACKAGE@VERSION` and a
# build in the module's folder pick); CGO_ENABLED and GOFLAGS=-tags=... pass through, so
# the files listed are the ones the build compiles.
set -euo pipefail

[ $# -ge 2 ] || { printf 'usage: %s MODULE@VERSION PACKAGE...\n' "$0" >&2; exit 2; }
module_version="$1"
shift

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
export GOWORK=off
dir="$(cd "${work}" && GOFLAGS=-mod=mod go mod download -json "${module_version}" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[ -d "${dir}" ] || { printf 'go-download: %s was not downloaded\n' "${module_version}" >&2; exit 1; }
(cd "${dir}" && go list -mod=readonly -e -deps -test "$@" >/dev/null)
