#!/usr/bin/env bash
# Writes third_party/go-sdk: go-sdk at the version below, as the Go module proxy serves
# it, with third_party/go-sdk.patch applied. go.mod replaces the module with it. See
# third_party/README.md for why, and for when the copy can go.
#
#   hack/go-sdk.sh           write the copy anew
#   hack/go-sdk.sh --verify  fail unless the copy is exactly that (make verify runs it)
set -euo pipefail

version=v1.8.0
module=github.com/modelcontextprotocol/go-sdk
# The packages Switchboard builds (its imports, and the conformance server go.mod lists
# as a tool) with what they import from the module; no tests, examples or docs.
dirs=(auth conformance/everything-server internal jsonrpc mcp oauthex)

cd "$(dirname "$0")/.."
src=$(GOFLAGS=-mod=mod go mod download -json "$module@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "go mod download did not give $module@$version" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/go-sdk
mkdir -p "$out"
cp "$src/go.mod" "$src/go.sum" "$src/LICENSE" "$out/"
for dir in "${dirs[@]}"; do
	(cd "$src" && find "$dir" -type f ! -name '*_test.go' ! -path '*/testdata/*' -print0) |
		while IFS= read -r -d '' f; do
			mkdir -p "$out/$(dirname "$f")"
			cp "$src/$f" "$out/$f"
		done
done
chmod -R u+w "$out"
patch=$PWD/third_party/go-sdk.patch
(cd "$out" && git apply "$patch")

if [ "${1:-}" = --verify ]; then
	if ! diff -r "$out" third_party/go-sdk >/dev/null; then
		echo "third_party/go-sdk is not go-sdk $version with third_party/go-sdk.patch; run hack/go-sdk.sh" >&2
		diff -r "$out" third_party/go-sdk | head -20 >&2
		exit 1
	fi
	exit 0
fi
rm -rf third_party/go-sdk
cp -r "$out" third_party/go-sdk
