#!/usr/bin/env bash
# Makes kube-apiserver and etcd available for envtest and prints the folder that holds
# them (use it as KUBEBUILDER_ASSETS). Idempotent: a folder that already holds the
# binaries is printed at once. It also builds kube-controller-manager, which envtest does
# not run but the tests that need garbage collection start themselves.
#
# Where ENVTEST_ASSETS_TARBALL_URL names a tarball of prebuilt binaries (the layout
# setup-envtest uses: controller-tools/envtest/{kube-apiserver,etcd}), it is downloaded.
# Otherwise both binaries are built from the Go module proxy, which is the only network
# this project can count on: kube-apiserver from k8s.io/kubernetes with every staging
# module replaced by its published version, etcd from go.etcd.io/etcd/server/v3. The
# first build takes about ten minutes on two cores; later runs reuse the Go build cache.
#
# Progress goes to stderr; stdout carries only the folder, so
#   export KUBEBUILDER_ASSETS="$(hack/envtest-assets.sh)"
# works. With --control-plane-only it makes sure of kube-apiserver and etcd alone, which
# is all `make dev` runs; a first `make dev` is then a few minutes shorter. With --node it
# also builds kube-scheduler, kubelet and kube-proxy, the rest of the real node that
# hack/node.sh starts, into the same folder and from the same release. With --download it
# only fetches into the Go module cache what building any of them needs, prints nothing
# and builds nothing (.ci/run does that in the background while other steps compile).
set -euo pipefail

# The Kubernetes binaries wanted besides etcd.
KUBE_BINARIES=(kube-apiserver kube-controller-manager)
DOWNLOAD_ONLY=""
case "${1:-}" in
  --control-plane-only) KUBE_BINARIES=(kube-apiserver) ;;
  --node) KUBE_BINARIES+=(kube-scheduler kubelet kube-proxy) ;;
  --download) DOWNLOAD_ONLY=1 KUBE_BINARIES+=(kube-scheduler kubelet kube-proxy) ;;
  "") ;;
  *) printf 'usage: %s [--control-plane-only|--node|--download]\n' "$0" >&2; exit 2 ;;
esac

KUBERNETES_VERSION="${ENVTEST_KUBERNETES_VERSION:-1.37.2}"
ETCD_VERSION="${ENVTEST_ETCD_VERSION:-v3.6.16}"
GOOS="$(go env GOOS)"
GOARCH="$(go env GOARCH)"
CACHE_ROOT="${SWITCHBOARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/switchboard}"
ASSETS_DIR="${CACHE_ROOT}/envtest/k8s-${KUBERNETES_VERSION}-etcd-${ETCD_VERSION}-${GOOS}-${GOARCH}"

log() { printf 'envtest-assets: %s\n' "$*" >&2; }

have_kube_binaries() {
  local bin
  for bin in "${KUBE_BINARIES[@]}"; do
    [ -x "${ASSETS_DIR}/${bin}" ] || return 1
  done
}

have_assets() {
  [ -x "${ASSETS_DIR}/etcd" ] && have_kube_binaries
}

# Binaries cached before the release version was stamped in say v0.0.0-master, which
# kubectl and Helm cannot parse; they are built again.
if [ -x "${ASSETS_DIR}/kube-apiserver" ] &&
  ! "${ASSETS_DIR}/kube-apiserver" --version 2>/dev/null | grep -qF "v${KUBERNETES_VERSION}"; then
  log "cached Kubernetes binaries carry no release version; building them again"
  rm -f "${ASSETS_DIR}"/kube-* "${ASSETS_DIR}/kubelet"
fi

if have_assets; then
  [ -n "${DOWNLOAD_ONLY}" ] || printf '%s\n' "${ASSETS_DIR}"
  exit 0
fi

mkdir -p "${ASSETS_DIR}"
if [ -n "${DOWNLOAD_ONLY}" ]; then
  # No lock: the downloads go to a work folder of their own, and the Go module cache
  # takes its own locks.
  WORK_DIR="$(mktemp -d "${CACHE_ROOT}/envtest/download.XXXXXX")"
  trap 'rm -rf "${WORK_DIR}"' EXIT
else
  # One build at a time: a run started while another builds (parallel test packages, a
  # second terminal) waits for it and then finds its binaries, instead of building them
  # again beside it on the same cores.
  exec 9>"${ASSETS_DIR}.lock"
  if ! flock -n 9; then
    log "waiting for another run that is building the binaries"
    flock 9
  fi
  if have_assets; then
    printf '%s\n' "${ASSETS_DIR}"
    exit 0
  fi

  # A private work folder per run, so two concurrent runs never share half-built state.
  WORK_DIR="$(mktemp -d "${CACHE_ROOT}/envtest/build.XXXXXX")"
  trap 'rm -rf "${WORK_DIR}"' EXIT
fi

download_assets() {
  local url="$1"
  log "downloading ${url}"
  curl -fsSL --retry 2 --connect-timeout 10 "${url}" | tar -xz -C "${WORK_DIR}"
  local bin
  for bin in kube-apiserver etcd; do
    local found
    found="$(find "${WORK_DIR}" -type f -name "${bin}" | head -n 1)"
    [ -n "${found}" ] || { log "tarball has no ${bin}"; return 1; }
    install -m 0755 "${found}" "${ASSETS_DIR}/${bin}.tmp"
    mv -f "${ASSETS_DIR}/${bin}.tmp" "${ASSETS_DIR}/${bin}"
  done
}

# build_binary MODULE_DIR OUTPUT_NAME: builds the module's main package into the cache,
# through a temporary name so an interrupted build never leaves a broken binary behind.
build_binary() {
  local dir="$1" name="$2" pkg="${3:-.}" ldflags="-s -w ${4:-}" started
  started=$(date +%s)
  log "building ${name} (the first build takes several minutes; Go caches it afterwards)"
  (cd "${dir}" && CGO_ENABLED=0 go build -trimpath -ldflags="${ldflags}" -o "${ASSETS_DIR}/${name}.tmp" "${pkg}")
  mv -f "${ASSETS_DIR}/${name}.tmp" "${ASSETS_DIR}/${name}"
  log "built ${name} in $(( $(date +%s) - started ))s"
}

# kube_main NAME prints the main package of one Kubernetes command: the upstream main, which
# cannot be imported, restated around the command's own app package.
kube_main() {
  local import constructor context_import=""
  case "$1" in
    kube-apiserver) import=k8s.io/kubernetes/cmd/kube-apiserver/app constructor='app.NewAPIServerCommand()' ;;
    kube-controller-manager) import=k8s.io/kubernetes/cmd/kube-controller-manager/app constructor='app.NewControllerManagerCommand()' ;;
    kube-scheduler) import=k8s.io/kubernetes/cmd/kube-scheduler/app constructor='app.NewSchedulerCommand()' ;;
    kubelet) import=k8s.io/kubernetes/cmd/kubelet/app constructor='app.NewKubeletCommand(context.Background())' context_import='"context"' ;;
    kube-proxy) import=k8s.io/kubernetes/cmd/kube-proxy/app constructor='app.NewProxyCommand()' ;;
  esac
  cat <<GO
// Command $1 is the upstream $1, built from the module proxy.
package main

import (
	${context_import}
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"${import}"
)

func main() {
	os.Exit(cli.Run(${constructor}))
}
GO
}

# build_kubernetes builds the missing Kubernetes binaries from one throwaway module.
build_kubernetes() {
  local dir="${WORK_DIR}/kubernetes"
  mkdir -p "${dir}"
  log "resolving k8s.io/kubernetes v${KUBERNETES_VERSION} and its staging modules"
  # k8s.io/kubernetes points its staging modules at ./staging; a module that requires it
  # has to replace each of them with the published v0.x.y of the same release. The list
  # is read from the release's own go.mod so it never goes stale.
  local kube_gomod
  kube_gomod="$(cd "${dir}" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v${KUBERNETES_VERSION}" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [ -f "${kube_gomod}" ] || { log "could not download the k8s.io/kubernetes go.mod"; return 1; }
  local staging_version="v0.${KUBERNETES_VERSION#1.}"
  {
    echo "module switchboard.local/envtest/kubernetes"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//')"
    echo
    echo "require k8s.io/kubernetes v${KUBERNETES_VERSION}"
    echo
    echo "replace ("
    grep -Eo '^[[:space:]]*k8s\.io/[a-z0-9.-]+ => \./staging/src/k8s\.io/[a-z0-9.-]+' "${kube_gomod}" |
      awk -v v="${staging_version}" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } > "${dir}/go.mod"
  local bin
  for bin in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
    mkdir -p "${dir}/${bin}"
    kube_main "${bin}" > "${dir}/${bin}/main.go"
  done
  # At the project's versions of the modules both use (client-go, gRPC, OpenTelemetry,
  # golang.org/x/...), so that the build reuses the packages the project's own static
  # build compiled instead of compiling them again.
  "$(dirname "$0")/go-share-versions.sh" "${dir}" >&2
  [ -z "${DOWNLOAD_ONLY}" ] || return 0
  # The version a release build stamps in, which clients read: kubectl and Helm parse the
  # server's version, and the kubelet reports its own on the Node.
  local minor="${KUBERNETES_VERSION#1.}" version_flags="" pkg
  minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    version_flags+=" -X ${pkg}.gitVersion=v${KUBERNETES_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
    version_flags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  done
  for bin in "${KUBE_BINARIES[@]}"; do
    [ -x "${ASSETS_DIR}/${bin}" ] || build_binary "${dir}" "${bin}" "./${bin}" "${version_flags}"
  done
}

build_etcd() {
  local dir="${WORK_DIR}/etcd"
  mkdir -p "${dir}"
  cat > "${dir}/go.mod" <<GOMOD
module switchboard.local/envtest/etcd

go $(go env GOVERSION | sed 's/^go//')

require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
GOMOD
  cat > "${dir}/main.go" <<'GO'
// Command etcd is the upstream etcd server, built for envtest.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
GO
  log "resolving go.etcd.io/etcd/server/v3 ${ETCD_VERSION}"
  "$(dirname "$0")/go-share-versions.sh" "${dir}" >&2
  [ -z "${DOWNLOAD_ONLY}" ] || return 0
  build_binary "${dir}" etcd
}

if [ -n "${ENVTEST_ASSETS_TARBALL_URL:-}" ] && [ -z "${DOWNLOAD_ONLY}" ]; then
  download_assets "${ENVTEST_ASSETS_TARBALL_URL}" || log "download failed; building instead"
fi
# Whatever is still missing (a tarball holds no kube-controller-manager) is built.
[ -x "${ASSETS_DIR}/etcd" ] || build_etcd
have_kube_binaries || build_kubernetes
[ -z "${DOWNLOAD_ONLY}" ] || exit 0

have_assets || { log "etcd or one of ${KUBE_BINARIES[*]} is missing from ${ASSETS_DIR}"; exit 1; }
log "ready: ${ASSETS_DIR}"
printf '%s\n' "${ASSETS_DIR}"
