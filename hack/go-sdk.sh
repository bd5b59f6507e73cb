#!/usr/bin/env bash
# Writes third_party/go-sdk: go-sdk at the version below, as the Go module proxy serves
# it, with the patches in third_party/go-sdk-patches applied in order (git format-patch
# files, one change each, ready for `git am` upstream). go.mod replaces the module with
# it. See third_party/README.md for why, and for when the copy can go.
#
#   hack/go-sdk.sh           write the copy anew
#   hack/go-sdk.sh --verify  fail unless the copy is exactly that (make verify runs it)
#
# The copy keeps go-sdk's own tests and their testdata, and `make test` runs them
# against the patched code (cd third_party/go-sdk && go test ./...).
set -euo pipefail

version=v1.8.0
module=github.com/modelcontextprotocol/go-sdk
# The packages Switchboard builds (its imports, and the conformance server go.mod lists
# as a tool) with what they import from the module, each with its tests and testdata;
# no examples or docs.
dirs=(auth conformance/everything-server internal jsonrpc mcp oauthex)
# Files of the module's root: its go.mod, go.sum and LICENSE, and its one test (every Go
# file carries go-sdk's copyright header).
root_files=(go.mod go.sum LICENSE copyright_test.go)
# Upstream tests left out, each with why:
#   internal/docs/toc_test.go checks the table of contents of go-sdk's markdown docs
#   (docs/*.md), which the copy does not carry; no patch touches them.
excluded=(internal/docs/toc_test.go)

cd "$(dirname "$0")/.."
src=$(GOFLAGS=-mod=mod go mod download -json "$module@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "go mod download did not give $module@$version" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/go-sdk
mkdir -p "$out"
for f in "${root_files[@]}"; do cp "$src/$f" "$out/"; done
for dir in "${dirs[@]}"; do
	(cd "$src" && find "$dir" -type f -print0) |
		while IFS= read -r -d '' f; do
			mkdir -p "$out/$(dirname "$f")"
			cp "$src/$f" "$out/$f"
		done
done
for f in "${excluded[@]}"; do rm "$out/$f"; done
chmod -R u+w "$out"
for patch in "$PWD"/third_party/go-sdk-patches/*.patch; do
	(cd "$out" && git apply "$patch") || { echo "$(basename "$patch") does not apply to go-sdk $version" >&2; exit 1; }
done

if [ "${1:-}" = --verify ]; then
	if ! diff -r "$out" third_party/go-sdk >/dev/null; then
		echo "third_party/go-sdk is not go-sdk $version with third_party/go-sdk-patches; run hack/go-sdk.sh" >&2
		diff -r "$out" third_party/go-sdk | head -20 >&2
		exit 1
	fi
	exit 0
fi
rm -rf third_party/go-sdk
cp -r "$out" third_party/go-sdk
