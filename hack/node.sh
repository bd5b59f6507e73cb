#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, for the node tests
# (`make test-node`) and for trying Switchboard as it runs in production: its own pods,
# stdio servers as pods of their own images, Services, DNS and enforced NetworkPolicies.
#
#   hack/node.sh up      builds what is missing, starts the cluster, loads the images and
#                        prints the admin kubeconfig's path on stdout (progress on stderr)
#   hack/node.sh images  prints the loaded image references, one a line; a stdio server
#                        image's line is followed by a tab and the command that starts it
#   hack/node.sh down    stops everything `up` started and removes its processes, mounts,
#                        network interfaces, firewall rules and state
#   hack/node.sh build   builds what `up` would build and starts nothing
#   hack/node.sh download  fetches the Go modules those builds need and builds nothing
#
# Every part is upstream software built from the Go module proxy or taken from Debian:
#   control plane  etcd, kube-apiserver, kube-controller-manager, kube-scheduler
#                  (k8s.io/kubernetes v1.37.2, built by hack/envtest-assets.sh --node)
#   node           kubelet and kube-proxy (same release), containerd v2 with its runc shim,
#                  runc (github.com/opencontainers/runc, with seccomp), Debian's CNI plugins
#                  (bridge, host-local, portmap), CoreDNS as pods in kube-system,
#                  sigs.k8s.io/kube-network-policies v0.8.0 (patched, see below)
#
# runc is built rather than taken from Debian: bookworm's runc 1.1.5 cannot start the
# sandboxes containerd v2.4 asks for ("can't get final child's PID from pipe: EOF").
#   images         built without Docker by hack/node-images (go-containerregistry) and
#                  imported into containerd's k8s.io namespace; nothing is ever pulled
#
# NetworkPolicies are enforced by sigs.k8s.io/kube-network-policies, the implementation
# kind ships, as a host process. It sends the first packet of each connection to or from a
# pod a policy selects to itself through an nfnetlink queue and accepts or drops it there.
# Upstream queues with the nftables `queue` statement (nft_queue), which kernels built
# without CONFIG_NFT_QUEUE, like the ones this runs on, refuse. Those kernels have
# nft_compat and the xtables NFQUEUE target, the rule `iptables-nft -j NFQUEUE` creates, so
# hack/node/kube-network-policies-nfqueue-compat.patch makes it use that target, in the
# same place and to the same queue, where the kernel refuses `queue` (and gives it a
# --kubeconfig flag); the patch's header says what and why in full.
#
# The cluster reaches nothing outside the machine: the API server, kubelet and pods live on
# the bridge network 10.244.0.0/24 (the node is 10.244.0.1), Services on 10.96.0.0/16 and
# CoreDNS answers only cluster names. Everything runs as root (the kubelet and containerd
# need it); state lives under SWITCHBOARD_NODE_DIR (default /var/lib/switchboard-node),
# binaries and images under ~/.cache/switchboard/node.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STATE="${SWITCHBOARD_NODE_DIR:-/var/lib/switchboard-node}"
CACHE_ROOT="${SWITCHBOARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/switchboard}"
NODE_CACHE="${CACHE_ROOT}/node"

CONTAINERD_VERSION=v2.4.2
COREDNS_VERSION=v1.15.0
KUBE_NETWORK_POLICIES_VERSION=v0.8.0
NETWORK_POLICY_API_VERSION=v0.3.1 # kube-network-policies' own does not build with our client-go
RUNC_VERSION=v1.5.3

NODE_NAME=switchboard-node
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
NFT_TABLE=switchboard-node
KUBERNETES_SERVICE_IP=10.96.0.1
DNS_SERVICE_IP=10.96.0.10
BRIDGE=sbnode0
SANDBOX_IMAGE=registry.k8s.io/pause:3.10.2 # containerd v2.4's default; ours is built here

CONTAINERD_DIR="${NODE_CACHE}/containerd-${CONTAINERD_VERSION}"
CONTAINERD_COMMANDS=(github.com/containerd/containerd/v2/cmd/{containerd,containerd-shim-runc-v2,ctr})
# The plugins the node's Corefile (apply_cluster_objects) uses, and the only ones the
# node's CoreDNS is built with: CoreDNS's own main links all of its plugins and the cloud
# SDKs some of them need, 1,409 packages against these 799 (a quarter less build time).
COREDNS_PLUGINS=(errors health ready kubernetes cache loop loadbalance)
COREDNS_DIR="${NODE_CACHE}/coredns-${COREDNS_VERSION}-$(printf '%s\n' "${COREDNS_PLUGINS[@]}" | sha256sum | cut -c1-12)"
KUBE_NETWORK_POLICIES_PATCH="${ROOT}/hack/node/kube-network-policies-nfqueue-compat.patch"
KUBE_NETWORK_POLICIES_DIR="${NODE_CACHE}/kube-network-policies-${KUBE_NETWORK_POLICIES_VERSION}-${NETWORK_POLICY_API_VERSION}-$(sha256sum "${KUBE_NETWORK_POLICIES_PATCH}" | cut -c1-12)"
RUNC_DIR="${NODE_CACHE}/runc-${RUNC_VERSION}"
IMAGES_DIR="${NODE_CACHE}/images"
CONTAINERD_SOCK="${STATE}/containerd/containerd.sock"
KUBECONFIG_ADMIN="${STATE}/pki/admin.kubeconfig"

log() { printf 'node: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------------------------------
# Building what is missing. Each part lands in a versioned folder of the cache through a
# temporary name, so an interrupted build is redone, never half used.

# go_install_into DIR PKG@VERSION...: installs Go commands into DIR, static unless
# CGO_ENABLED=1 and GO_TAGS say otherwise.
go_install_into() {
  local dir="$1" started pkg
  shift
  [ -d "${dir}" ] && return 0
  started=$(date +%s)
  rm -rf "${dir}.tmp" && mkdir -p "${dir}.tmp"
  for pkg in "$@"; do
    log "building ${pkg} (first build only)"
    CGO_ENABLED="${CGO_ENABLED:-0}" GOBIN="${dir}.tmp" GOFLAGS=-mod=mod \
      go install -trimpath -tags "${GO_TAGS:-}" -ldflags='-s -w' "${pkg}" >&2
  done
  mv "${dir}.tmp" "${dir}"
  log "built $(basename "${dir}") in $(( $(date +%s) - started ))s"
}

ensure_packages() {
  local missing=()
  [ -f /usr/include/seccomp.h ] || missing+=(libseccomp-dev)
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v nft >/dev/null || missing+=(nftables)
  command -v patch >/dev/null || missing+=(patch)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v gcc >/dev/null || missing+=(gcc libc6-dev)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  fi
}

ensure_binaries() {
  ensure_packages
  KUBE_DIR="$("${ROOT}/hack/envtest-assets.sh" --node)"
  build_containerd
  # runc's nsexec is C, and the RuntimeDefault seccomp profile needs libseccomp.
  CGO_ENABLED=1 GO_TAGS=seccomp go_install_into "${RUNC_DIR}" "github.com/opencontainers/runc@${RUNC_VERSION}"
  build_coredns
  build_kube_network_policies
}

# build_module_into DIR WHAT WRITE_MODULE OUTPUT PACKAGE...: runs WRITE_MODULE FOLDER to
# write a module into a temporary folder, builds PACKAGE... there, static and without build
# paths, into DIR.tmp/OUTPUT (the folder itself when OUTPUT is empty), and lands it in DIR.
build_module_into() {
  local dir="$1" what="$2" write_module="$3" started
  shift 3
  [ -d "${dir}" ] && return 0
  started=$(date +%s)
  log "building ${what} (first build only)"
  rm -rf "${dir}.tmp" "${dir}.mod" && mkdir -p "${dir}.tmp"
  "${write_module}" "${dir}.mod" >&2
  (cd "${dir}.mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags='-s -w' -o "${dir}.tmp/$1" "${@:2}") >&2
  rm -rf "${dir}.mod"
  mv "${dir}.tmp" "${dir}"
  log "built $(basename "${dir}") in $(( $(date +%s) - started ))s"
}

# containerd_module DIR writes into DIR a module that names containerd, its runc shim and
# ctr as tools, at the project's versions of the modules they share with it (gRPC,
# OpenTelemetry, protobuf, golang.org/x/...), so that they reuse what its build compiled.
containerd_module() {
  "${ROOT}/hack/go-share-versions.sh" --tools "$1" \
    "github.com/containerd/containerd/v2@${CONTAINERD_VERSION}" "${CONTAINERD_COMMANDS[@]}"
}

build_containerd() {
  build_module_into "${CONTAINERD_DIR}" "github.com/containerd/containerd/v2@${CONTAINERD_VERSION}" \
    containerd_module "" "${CONTAINERD_COMMANDS[@]}"
}

# download fetches into the Go module cache what building the node's missing binaries
# needs, and builds nothing: .ci/run runs it in the background while other steps compile.
download() {
  local fetch="${ROOT}/hack/go-download.sh"
  "${ROOT}/hack/envtest-assets.sh" --download
  # Resolving a module at the project's versions downloads what building it needs.
  local work
  work="$(mktemp -d)"
  # shellcheck disable=SC2064 # expanded now: work is local to this function
  trap "rm -rf '${work}'" EXIT
  [ -d "${CONTAINERD_DIR}" ] || containerd_module "${work}/containerd"
  [ -d "${RUNC_DIR}" ] || CGO_ENABLED=1 GOFLAGS=-tags=seccomp "${fetch}" "github.com/opencontainers/runc@${RUNC_VERSION}" .
  [ -d "${COREDNS_DIR}" ] || coredns_module "${work}/coredns"
  [ -d "${KUBE_NETWORK_POLICIES_DIR}" ] || kube_network_policies_module "${work}/kube-network-policies"
}

# module_source MODULE@VERSION DIR: a writable copy of the module's source in DIR (replacing
# whatever is there), to patch or add a main package to before building it.
module_source() {
  rm -rf "$2"
  (cd / && GOFLAGS=-mod=mod go mod download "$1")
  cp -r "$(go env GOMODCACHE)/$1" "$2"
  chmod -R u+w "$2"
}

# coredns_module DIR writes into DIR a module whose main package runs CoreDNS as its own main
# does (coremain.Run), linking only COREDNS_PLUGINS: a plugin registers itself when its
# package is linked, and the server accepts the directives of registered plugins alone, so
# a Corefile naming another one fails at start, saying which. The module is at the
# project's versions of the modules both use (client-go among them), so that the build
# reuses what the project's build compiled.
coredns_module() {
  local dir="$1" module="github.com/coredns/coredns" plugin
  mkdir -p "${dir}"
  printf 'module switchboard.local/node-coredns\n\ngo %s\n\nrequire %s %s\n' \
    "$(go env GOVERSION | sed 's/^go//')" "${module}" "${COREDNS_VERSION}" >"${dir}/go.mod"
  {
    printf 'package main\n\nimport (\n\t"%s/coremain"\n' "${module}"
    for plugin in "${COREDNS_PLUGINS[@]}"; do printf '\t_ "%s/plugin/%s"\n' "${module}" "${plugin}"; done
    printf ')\n\nfunc main() { coremain.Run() }\n'
  } >"${dir}/main.go"
  "${ROOT}/hack/go-share-versions.sh" "${dir}"
}

build_coredns() {
  build_module_into "${COREDNS_DIR}" \
    "github.com/coredns/coredns@${COREDNS_VERSION} with ${COREDNS_PLUGINS[*]}" coredns_module coredns .
}

# kube_network_policies_module DIR writes into DIR kube-network-policies' source with the
# patch applied, at the project's versions of the modules both use (client-go and the rest
# of Kubernetes' libraries, which it would otherwise compile once more). Its own
# sigs.k8s.io/network-policy-api, a client generated against client-go v0.32, does not
# build with the project's client-go (its fake clientset needs client-go/testing's
# TypeConverter, since removed), so it moves to NETWORK_POLICY_API_VERSION, generated
# against client-go v0.36; the AdminNetworkPolicy API it reads is the same v1alpha1, and the
# node leaves that API off (--admin-network-policy).
kube_network_policies_module() {
  module_source "sigs.k8s.io/kube-network-policies@${KUBE_NETWORK_POLICIES_VERSION}" "$1"
  patch -d "$1" -p1 -F0 -s <"${KUBE_NETWORK_POLICIES_PATCH}"
  (cd "$1" && go mod edit -require="sigs.k8s.io/network-policy-api@${NETWORK_POLICY_API_VERSION}")
  "${ROOT}/hack/go-share-versions.sh" "$1"
}

# build_kube_network_policies builds kube-network-policies and keeps it only once the
# patched package's own tests pass (they need root and run in network namespaces of their
# own). The tests build with the binary's flags so that they reuse its compiled packages
# instead of compiling them all again, and without go test's vet, which would analyse every
# dependency as well (the project's make test runs without it for the same reason).
build_kube_network_policies() {
  local dir="${KUBE_NETWORK_POLICIES_DIR}" started
  [ -d "${dir}" ] && return 0
  started=$(date +%s)
  log "building sigs.k8s.io/kube-network-policies@${KUBE_NETWORK_POLICIES_VERSION} with $(basename "${KUBE_NETWORK_POLICIES_PATCH}") (first build only)"
  rm -rf "${dir}.tmp" && mkdir -p "${dir}.tmp"
  kube_network_policies_module "${dir}.src" >&2
  (cd "${dir}.src" &&
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags='-s -w' -o "${dir}.tmp/kube-network-policies" ./cmd &&
    CGO_ENABLED=0 GOFLAGS=-mod=mod go test -trimpath -vet=off -count=1 ./pkg/networkpolicy/ | tail -n 1) >&2
  rm -rf "${dir}.src"
  mv "${dir}.tmp" "${dir}"
  log "built $(basename "${dir}") in $(( $(date +%s) - started ))s"
}

# ensure_images builds the switchboard binary from this checkout and every image the node
# runs; hack/node-images skips images whose inputs did not change.
ensure_images() {
  local started bin
  started=$(date +%s)
  bin="${NODE_CACHE}/switchboard"
  (cd "${ROOT}" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "${bin}.tmp" ./cmd/switchboard)
  mv -f "${bin}.tmp" "${bin}"
  # Static, as everything else it builds: it reuses their compiled packages.
  (cd "${ROOT}" && CGO_ENABLED=0 go run -trimpath ./hack/node-images \
    -out "${IMAGES_DIR}" \
    -switchboard "${bin}" \
    -coredns "${COREDNS_DIR}/coredns" \
    -server-everything "$("${ROOT}/hack/test-servers.sh")" >/dev/null)
  log "images ready in $(( $(date +%s) - started ))s"
}

# ---------------------------------------------------------------------------------------
# Certificates and kubeconfigs: one CA signs everything; each component has its own
# identity, the kubelet the Node authorizer's system:node:<name>.

# issue NAME CN ORG EXTENSIONS: a P-256 key and a certificate signed by the node's CA.
issue() {
  local name="$1" cn="$2" org="$3" ext="$4" subj="/CN=$2"
  [ -n "${org}" ] && subj="/O=${org}/CN=${cn}"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "${name}.key" \
    -subj "${subj}" -out "${name}.csr" 2>/dev/null
  printf '%s\n' "${ext}" > "${name}.ext"
  openssl x509 -req -in "${name}.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
    -extfile "${name}.ext" -out "${name}.crt" 2>/dev/null
  rm -f "${name}.csr" "${name}.ext"
}

# kubeconfig NAME: a kubeconfig for the client certificate NAME.crt.
kubeconfig() {
  cat > "$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ${NODE_NAME}
  cluster:
    server: https://${NODE_IP}:6443
    certificate-authority-data: $(base64 -w0 ca.crt)
users:
- name: $1
  user:
    client-certificate-data: $(base64 -w0 "$1.crt")
    client-key-data: $(base64 -w0 "$1.key")
contexts:
- name: ${NODE_NAME}
  context: {cluster: ${NODE_NAME}, user: $1}
current-context: ${NODE_NAME}
EOF
}

make_pki() {
  mkdir -p "${STATE}/pki" && cd "${STATE}/pki"
  local client="extendedKeyUsage=clientAuth"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt \
    -days 30 -subj "/CN=switchboard-node-ca" 2>/dev/null
  issue apiserver kube-apiserver "" "extendedKeyUsage=serverAuth
subjectAltName=IP:${NODE_IP},IP:${KUBERNETES_SERVICE_IP},DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  issue apiserver-kubelet-client kube-apiserver-kubelet-client system:masters "${client}"
  issue kubelet-serving "${NODE_NAME}" "" "extendedKeyUsage=serverAuth
subjectAltName=IP:${NODE_IP},DNS:${NODE_NAME}"
  issue admin kubernetes-admin system:masters "${client}"
  issue kubelet "system:node:${NODE_NAME}" system:nodes "${client}"
  issue controller-manager system:kube-controller-manager "" "${client}"
  issue scheduler system:kube-scheduler "" "${client}"
  issue kube-proxy system:kube-proxy "" "${client}"
  # kube-network-policies reads pods, namespaces and NetworkPolicies; a ClusterRole binds
  # it below.
  issue kube-network-policies system:kube-network-policies "" "${client}"
  local name
  for name in admin kubelet controller-manager scheduler kube-proxy kube-network-policies; do kubeconfig "${name}"; done
  # The service-account issuer's key (RS256, which every OpenID client accepts).
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  chmod 600 ./*.key
  cd - >/dev/null
}

# ---------------------------------------------------------------------------------------
# Processes. Each runs in a session of its own (Ctrl-C reaches `up`, whose trap stops them
# in order), logs to $STATE/logs and records its pid in $STATE/run.

start() {
  local name="$1"
  shift
  setsid "$@" >"${STATE}/logs/${name}.log" 2>&1 </dev/null &
  echo $! >"${STATE}/run/${name}.pid"
}

# wait_until WHAT SECONDS LOG COMMAND...: polls COMMAND until it succeeds.
wait_until() {
  local what="$1" limit="$2" logfile="$3" deadline
  shift 3
  deadline=$(($(date +%s) + limit))
  while [ "$(date +%s)" -lt "${deadline}" ]; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  log "${what} did not come up in ${limit}s; the end of ${logfile}:"
  tail -n 30 "${logfile}" >&2 || true
  return 1
}

kubectl_admin() { kubectl --kubeconfig "${KUBECONFIG_ADMIN}" "$@"; }

setup_network() {
  # Remember the sysctls this changes, so `down` puts them back.
  {
    echo "net.ipv4.ip_forward=$(sysctl -n net.ipv4.ip_forward)"
    echo "net.bridge.bridge-nf-call-iptables=$(sysctl -n net.bridge.bridge-nf-call-iptables)"
  } >"${STATE}/sysctl.orig"
  sysctl -qw net.ipv4.ip_forward=1
  # Bridged pod-to-pod packets go through netfilter, where kube-proxy and
  # kube-network-policies act.
  sysctl -qw net.bridge.bridge-nf-call-iptables=1
  # The bridge exists before the first pod, so the API server can listen on the node's IP.
  ip link add "${BRIDGE}" type bridge
  ip addr add "${NODE_IP}/24" dev "${BRIDGE}"
  ip link set "${BRIDGE}" up
  # Service addresses stay on the node: one kube-proxy has not programmed yet (a Service
  # created a moment ago) goes to the bridge, where nothing answers it, instead of off the
  # machine. (A blackhole or unreachable route would also fail this host's own connections
  # to programmed Services: the route is looked up before kube-proxy's DNAT.)
  ip route add "${SERVICE_CIDR}" dev "${BRIDGE}"
  # ... where nothing answers, not even ARP: a connection to a Service address that no
  # DNAT rule has rewritten would wait out the bridge's neighbour resolution (3 s) before
  # failing. kube-proxy rejects connections to a Service without endpoints, as in any
  # cluster, but only in its own chains, which a firewall rule that accepts pod traffic
  # before them would skip; this table rejects them first. A packet kube-proxy has rewritten to
  # a pod no longer has a Service address by then (DNAT comes before forward and after
  # output's routing), so only unprogrammed Service addresses are refused.
  nft -f - <<NFT
table ip ${NFT_TABLE} {
  chain forward {
    type filter hook forward priority -10; policy accept;
    ip daddr ${SERVICE_CIDR} meta l4proto tcp reject with tcp reset
    ip daddr ${SERVICE_CIDR} reject with icmp type port-unreachable
  }
  chain output {
    type filter hook output priority 10; policy accept;
    ip daddr ${SERVICE_CIDR} meta l4proto tcp reject with tcp reset
    ip daddr ${SERVICE_CIDR} reject with icmp type port-unreachable
  }
}
NFT
  mkdir -p "${STATE}/cni/net.d" "${STATE}/cni/ipam"
  cat >"${STATE}/cni/net.d/10-switchboard-node.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "switchboard-node",
  "plugins": [
    {
      "type": "bridge", "bridge": "${BRIDGE}", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "${STATE}/cni/ipam",
        "ranges": [[{"subnet": "${POD_CIDR}", "gateway": "${NODE_IP}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
}

start_control_plane() {
  local pki="${STATE}/pki"
  start etcd "${KUBE_DIR}/etcd" --data-dir "${STATE}/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster default=http://127.0.0.1:2380 --unsafe-no-fsync
  start kube-apiserver "${KUBE_DIR}/kube-apiserver" \
    --etcd-servers http://127.0.0.1:2379 \
    --bind-address "${NODE_IP}" --advertise-address "${NODE_IP}" --secure-port 6443 \
    --service-cluster-ip-range "${SERVICE_CIDR}" \
    --client-ca-file "${pki}/ca.crt" \
    --tls-cert-file "${pki}/apiserver.crt" --tls-private-key-file "${pki}/apiserver.key" \
    --kubelet-client-certificate "${pki}/apiserver-kubelet-client.crt" \
    --kubelet-client-key "${pki}/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "${pki}/ca.crt" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "${pki}/sa.pub" \
    --service-account-signing-key-file "${pki}/sa.key" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction
  wait_until "kube-apiserver" 90 "${STATE}/logs/kube-apiserver.log" \
    kubectl_admin get --raw /readyz
  start kube-controller-manager "${KUBE_DIR}/kube-controller-manager" \
    --kubeconfig "${pki}/controller-manager.kubeconfig" \
    --authentication-kubeconfig "${pki}/controller-manager.kubeconfig" \
    --authorization-kubeconfig "${pki}/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false \
    --use-service-account-credentials \
    --service-account-private-key-file "${pki}/sa.key" --root-ca-file "${pki}/ca.crt" \
    --cluster-signing-cert-file "${pki}/ca.crt" --cluster-signing-key-file "${pki}/ca.key" \
    --allocate-node-cidrs --cluster-cidr "${CLUSTER_CIDR}" --node-cidr-mask-size 24 \
    --service-cluster-ip-range "${SERVICE_CIDR}"
  start kube-scheduler "${KUBE_DIR}/kube-scheduler" \
    --kubeconfig "${pki}/scheduler.kubeconfig" \
    --authentication-kubeconfig "${pki}/scheduler.kubeconfig" \
    --authorization-kubeconfig "${pki}/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false
}

start_containerd() {
  mkdir -p "${STATE}/containerd"
  cat >"${STATE}/containerd/config.toml" <<EOF
version = 3
root = "${STATE}/containerd/root"
state = "${STATE}/containerd/state"

[grpc]
  address = "${CONTAINERD_SOCK}"
[ttrpc]
  address = "${CONTAINERD_SOCK}.ttrpc"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  # Every registry is a closed loopback port: a pull of an image that was not loaded
  # fails at once, and nothing leaves the machine.
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "${STATE}/containerd/certs.d"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "${SANDBOX_IMAGE}"

[plugins."io.containerd.cri.v1.runtime"]
  # Root here lacks CAP_SYS_RESOURCE, so no process may lower its oom_score_adj below
  # containerd's own (the kubelet asks -998 for sandboxes): keep them at or above it.
  restrict_oom_score_adj = true
  # Network namespaces under the state folder, so down finds and unmounts every one.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "${STATE}/cni/net.d"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "${RUNC_DIR}/runc"
        SystemdCgroup = false

[plugins."io.containerd.nri.v1.nri"]
  disable = true
EOF
  mkdir -p "${STATE}/containerd/certs.d/_default"
  cat >"${STATE}/containerd/certs.d/_default/hosts.toml" <<EOF
server = "http://127.0.0.1:9"
[host."http://127.0.0.1:9"]
  capabilities = ["pull", "resolve"]
EOF
  # The shim is found on PATH.
  PATH="${CONTAINERD_DIR}:${PATH}" start containerd "${CONTAINERD_DIR}/containerd" \
    --config "${STATE}/containerd/config.toml"
  wait_until "containerd" 30 "${STATE}/logs/containerd.log" \
    "${CONTAINERD_DIR}/ctr" --address "${CONTAINERD_SOCK}" version
}

load_images() {
  local started ref
  started=$(date +%s)
  for tarball in "${IMAGES_DIR}"/*.tar; do
    "${CONTAINERD_DIR}/ctr" --address "${CONTAINERD_SOCK}" -n k8s.io images import \
      --platform linux/amd64 "${tarball}" 2>&1 | grep -v 'DEPRECATION: The support for cgroup v1' >&2 || true
  done
  local loaded
  loaded="$("${CONTAINERD_DIR}/ctr" --address "${CONTAINERD_SOCK}" -n k8s.io images ls -q)"
  for ref in $(grep -v '^#' "${IMAGES_DIR}/images.txt" | cut -f1); do
    grep -qxF "${ref}" <<<"${loaded}" || die "image ${ref} is not in containerd after the import"
  done
  log "images loaded in $(( $(date +%s) - started ))s"
}

start_kubelet() {
  mkdir -p "${STATE}/kubelet" "${STATE}/pod-logs"
  cat >"${STATE}/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This VM mounts cgroup v1 only. The kubelet refuses cgroup v1 from 1.35 on unless told
# otherwise; v1 still works in 1.37 (cgroupfs driver), and the node is a test harness
# whose host we cannot move to cgroup v2.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://${CONTAINERD_SOCK}
address: ${NODE_IP}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
tlsCertFile: ${STATE}/pki/kubelet-serving.crt
tlsPrivateKeyFile: ${STATE}/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ${STATE}/pki/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: [${DNS_SERVICE_IP}]
# Pods resolve cluster names only; nothing is forwarded off the machine.
resolvConf: ""
podLogsDir: ${STATE}/pod-logs
failSwapOn: false
# A busy CI disk must not evict the test's pods.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
serializeImagePulls: false
EOF
  start kubelet "${KUBE_DIR}/kubelet" \
    --config "${STATE}/kubelet/config.yaml" \
    --kubeconfig "${STATE}/pki/kubelet.kubeconfig" \
    --root-dir "${STATE}/kubelet" \
    --hostname-override "${NODE_NAME}" --node-ip "${NODE_IP}"
}

start_node_networking() {
  local pki="${STATE}/pki"
  start kube-proxy "${KUBE_DIR}/kube-proxy" \
    --kubeconfig "${pki}/kube-proxy.kubeconfig" --hostname-override "${NODE_NAME}" \
    --proxy-mode iptables --cluster-cidr "${CLUSTER_CIDR}" \
    --bind-address "${NODE_IP}" --healthz-bind-address 127.0.0.1:10256 \
    --metrics-bind-address 127.0.0.1:10249
  # containerd runs without NRI: kube-network-policies' NRI plugin finds no socket, and pod
  # addresses come from the API server.
  start kube-network-policies "${KUBE_NETWORK_POLICIES_DIR}/kube-network-policies" \
    --kubeconfig "${pki}/kube-network-policies.kubeconfig" --hostname-override "${NODE_NAME}" \
    --metrics-bind-address 127.0.0.1:20244 --v=2
}

# apply_cluster_objects gives kube-network-policies and kube-proxy their rights and runs
# CoreDNS.
apply_cluster_objects() {
  local coredns_image
  coredns_image="$(awk -F'\t' '$1 ~ /\/coredns:/ {print $1}' "${IMAGES_DIR}/images.txt")"
  kubectl_admin apply -f - >&2 <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: switchboard-node:kube-proxy}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:node-proxier}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: system:kube-proxy}]
---
# The rights kube-network-policies' own install.yaml grants it.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: switchboard-node:kube-network-policies}
rules:
- apiGroups: [""]
  resources: [pods, namespaces]
  verbs: [list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: switchboard-node:kube-network-policies}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: switchboard-node:kube-network-policies}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: system:kube-network-policies}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: system:coredns}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: system:coredns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:coredns}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
        }
        cache 30
        loop
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      # Port 53 without root or capabilities (a sysctl the kubelet allows every pod).
      securityContext:
        sysctls: [{name: net.ipv4.ip_unprivileged_port_start, value: "0"}]
      containers:
      - name: coredns
        image: ${coredns_image}
        imagePullPolicy: Never
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        readinessProbe: {httpGet: {path: /ready, port: 8181}}
        livenessProbe: {httpGet: {path: /health, port: 8080}}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          runAsNonRoot: true
          capabilities: {drop: [ALL]}
        volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: ${DNS_SERVICE_IP}
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, targetPort: dns, protocol: UDP}
  - {name: dns-tcp, port: 53, targetPort: dns-tcp, protocol: TCP}
EOF
}

# build builds whatever of the node is missing: binaries and images.
build() {
  local started
  started=$(date +%s)
  ensure_binaries
  ensure_images
  log "binaries and images ready in $(( $(date +%s) - started ))s"
}

up() {
  [ "$(id -u)" = 0 ] || die "the node needs root (kubelet, containerd, network setup)"
  if [ -e "${STATE}" ]; then
    if node_alive; then
      log "${STATE} exists and its node is running; run '$0 down' first"
      exit 1
    fi
    # A machine that stopped (or a run that was killed) without 'down' leaves the state,
    # its mounts, bridge and firewall rules behind; nothing of it is running, so clear it.
    log "${STATE} was left by a node that is no longer running; clearing it"
    down
  fi
  build
  log "starting the node"
  local started
  started=$(date +%s)
  mkdir -p "${STATE}/logs" "${STATE}/run"
  trap 'log "interrupted; stopping the node"; down; exit 130' INT TERM
  trap 'status=$?; [ ${status} -eq 0 ] || { log "up failed; stopping the node (logs kept in a copy: ${STATE%/}.failed-logs)"; rm -rf "${STATE%/}.failed-logs"; cp -r "${STATE}/logs" "${STATE%/}.failed-logs" 2>/dev/null; down; }' EXIT
  make_pki
  setup_network
  start_control_plane
  start_containerd
  load_images
  start_kubelet
  apply_cluster_objects
  start_node_networking
  wait_until "the node" 120 "${STATE}/logs/kubelet.log" \
    kubectl_admin wait --for=condition=Ready "node/${NODE_NAME}" --timeout=1s
  wait_until "CoreDNS" 120 "${STATE}/logs/kubelet.log" \
    kubectl_admin -n kube-system rollout status deployment/coredns --timeout=1s
  trap - EXIT INT TERM
  log "node up in $(( $(date +%s) - started ))s"
  printf '%s\n' "${KUBECONFIG_ADMIN}"
}

# ---------------------------------------------------------------------------------------
# Stopping. Idempotent: it removes whatever of a node it finds, so it also cleans up after
# a crash or a half-finished up.

# running_as reports whether pid runs the program it was recorded for: after a machine
# restart a recorded pid may belong to something else, which must be neither counted nor
# killed.
running_as() {
  local name="$1" pid="$2"
  [ -r "/proc/${pid}/cmdline" ] && tr '\0' ' ' <"/proc/${pid}/cmdline" | grep -q -- "${name}"
}

# node_alive reports whether any process this node recorded still runs.
node_alive() {
  local pidfile
  for pidfile in "${STATE}"/run/*.pid; do
    [ -f "${pidfile}" ] || continue
    running_as "$(basename "${pidfile}" .pid)" "$(cat "${pidfile}")" && return 0
  done
  return 1
}

stop_pid() {
  local name="$1" pidfile="${STATE}/run/$1.pid" pid i
  [ -f "${pidfile}" ] || return 0
  pid="$(cat "${pidfile}")"
  if running_as "${name}" "${pid}"; then
    kill -TERM "${pid}" 2>/dev/null || true
    for ((i = 0; i < 40; i++)); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "${pid}" 2>/dev/null || true
  fi
  rm -f "${pidfile}"
}

# kill_containers kills every process in the kubelet's pod cgroups and the runc shims of
# this node's containerd, whose containers outlive containerd itself.
kill_containers() {
  local procs
  procs="$(cat /sys/fs/cgroup/pids/kubepods/cgroup.procs /sys/fs/cgroup/pids/kubepods/*/cgroup.procs \
    /sys/fs/cgroup/pids/kubepods/*/*/cgroup.procs /sys/fs/cgroup/pids/kubepods/*/*/*/cgroup.procs 2>/dev/null || true)"
  [ -z "${procs}" ] || kill -KILL ${procs} 2>/dev/null || true
  pkill -KILL -f "containerd-shim-runc-v2 .*-address ${CONTAINERD_SOCK}" 2>/dev/null || true
}

remove_cgroups() {
  local controller
  for controller in /sys/fs/cgroup/*/; do
    [ -d "${controller}kubepods" ] || continue
    find "${controller}kubepods" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

unmount_state() {
  local mountpoint
  # Deepest first; network namespaces and overlay roots included.
  awk -v s="${STATE}" '$5 == s || index($5, s "/") == 1 {print $5}' /proc/self/mountinfo | sort -r |
    while read -r mountpoint; do umount -l "${mountpoint}" 2>/dev/null || true; done
}

# clean_firewall removes the chains and rules kube-proxy and the kubelet added (all named
# KUBE-*), the nftables tables of kube-proxy and kube-network-policies (which deletes its
# own when it stops, unless it was killed) and the node's own, and leaves everything else
# on the host as it was.
clean_firewall() {
  local save restore
  for save in iptables-save ip6tables-save; do
    command -v "${save}" >/dev/null || continue
    restore="${save%-save}-restore"
    # grep reads all of it: with -q it would stop at the first match, and the save, cut off,
    # would fail the pipeline (pipefail) and leave the rules in place.
    if "${save}" 2>/dev/null | grep 'KUBE-' >/dev/null; then
      "${save}" | grep -v 'KUBE-' | "${restore}" || log "could not restore ${save%-save} without KUBE- rules"
    fi
  done
  nft list tables 2>/dev/null | awk -v own="${NFT_TABLE}" '$3 == "kube-proxy" || $3 == "kube-network-policies" || $3 == own {print $2, $3}' |
    while read -r family table; do nft delete table "${family}" "${table}" || true; done
}

down() {
  [ "$(id -u)" = 0 ] || die "stopping the node needs root"
  [ -d "${STATE}" ] || { log "no node at ${STATE}"; return 0; }
  local name
  for name in kube-network-policies kube-proxy kubelet; do stop_pid "${name}"; done
  kill_containers
  for name in containerd kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_pid "${name}"; done
  kill_containers
  unmount_state
  remove_cgroups
  ip link show "${BRIDGE}" >/dev/null 2>&1 && ip link delete "${BRIDGE}"
  clean_firewall
  if [ -f "${STATE}/sysctl.orig" ]; then sysctl -q -p "${STATE}/sysctl.orig" >/dev/null || true; fi
  rm -rf "${STATE}"
  log "node stopped"
}

images() {
  [ -f "${IMAGES_DIR}/images.txt" ] || die "no images yet; run '$0 up'"
  grep -v '^#' "${IMAGES_DIR}/images.txt"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  images) images ;;
  build) build ;;
  download) download ;;
  *) printf 'usage: %s up|images|down|build|download\n' "$0" >&2; exit 2 ;;
esac
