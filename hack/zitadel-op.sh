#!/usr/bin/env bash
# Builds zitadel/oidc's example OpenID provider (github.com/zitadel/oidc/v3/example/server,
# authorization code with a login page, opaque access tokens, introspection) into a cache
# folder outside the repo and prints the binary's path. The example's own main listens on
# every interface (":"+PORT); tests here bind loopback only, so the binary is a main of a
# dozen lines that serves the example's own OP (exampleop.SetupServer, storage) on
# 127.0.0.1 and is otherwise configured as the example is: PORT (default 0, any free
# port), REDIRECT_URI (comma-separated, for the clients "web", "api" and "native") and
# USERS_FILE (a JSON file of users, replacing the built-in ones, as the example's main
# reads it).
# The first line it writes to stdout is its issuer URL, http://127.0.0.1:PORT/. Users:
# test-user@127.0.0.1 and test-user2, password verysecure. Built outside any module so our
# go.mod neither constrains nor records it (it needs newer go-jose and oauth2 than ours).
# With SWITCHBOARD_NO_BUILD=1 it only prints an installed binary and exits 3 when there is
# none. Idempotent: an installed version is printed at once.
#
#   "$(hack/zitadel-op.sh)"   # prints http://127.0.0.1:PORT/ and serves
#
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail

ZITADEL_OIDC_VERSION="${ZITADEL_OIDC_VERSION:-v3.52.0}"
HACK_DIR="$(cd "$(dirname "$0")" && pwd)"
CACHE_ROOT="${SWITCHBOARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/switchboard}"
# The suffix counts changes of the main below, so that a cached older build is not used.
dir="${CACHE_ROOT}/zitadel-op-${ZITADEL_OIDC_VERSION}-2"

log() { printf 'zitadel-op: %s\n' "$*" >&2; }

if [ ! -x "${dir}/zitadel-op" ]; then
  if [ -n "${SWITCHBOARD_NO_BUILD:-}" ]; then
    log "the example OP ${ZITADEL_OIDC_VERSION} is not built: run $0"
    exit 3
  fi
  command -v go >/dev/null || { log "go is required"; exit 1; }
  log "building zitadel/oidc ${ZITADEL_OIDC_VERSION}'s example OP from the Go module proxy"
  mkdir -p "${CACHE_ROOT}"
  work="$(mktemp -d "${CACHE_ROOT}/zitadel-op-build.XXXXXX")"
  trap 'rm -rf "${work}"' EXIT
  cat >"${work}/main.go" <<'GO'
// Command zitadel-op serves zitadel/oidc's example OpenID provider on loopback.
package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "0"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	issuer := fmt.Sprintf("http://127.0.0.1:%d/", ln.Addr().(*net.TCPAddr).Port)
	var redirects []string
	if v := os.Getenv("REDIRECT_URI"); v != "" {
		redirects = strings.Split(v, ",")
	}
	// As the example's main does, with the issuer it listens on.
	storage.RegisterClients(
		storage.NativeClient("native", redirects...),
		storage.WebClient("web", "secret", redirects...),
		storage.WebClient("api", "secret", redirects...),
	)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// As the example's main does, USERS_FILE replaces the two built-in users.
	users := storage.NewUserStore(issuer)
	if path := os.Getenv("USERS_FILE"); path != "" {
		if users, err = storage.StoreFromFile(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	router := exampleop.SetupServer(issuer, storage.NewStorage(users), logger, false)
	fmt.Println(issuer)
	if err := http.Serve(ln, router); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
GO
  (
    cd "${work}"
    export GOFLAGS=-mod=mod GOWORK=off
    go mod init switchboard.test/zitadel-op >/dev/null 2>&1
    go get "github.com/zitadel/oidc/v3@${ZITADEL_OIDC_VERSION}" >/dev/null
    # At the project's versions of the modules both use, static: it reuses what the
    # project's build compiled (hack/go-share-versions.sh).
    "${HACK_DIR}/go-share-versions.sh" . >/dev/null
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o zitadel-op .
  ) >&2
  mkdir -p "${dir}"
  mv "${work}/zitadel-op" "${dir}/zitadel-op"
fi
echo "${dir}/zitadel-op"
