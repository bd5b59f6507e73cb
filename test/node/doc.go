//go:build node && linux

// Package node tests Switchboard on a real single-node Kubernetes cluster, the one
// hack/node.sh starts: kube-apiserver, the kubelet, containerd and runc, kube-proxy,
// CoreDNS and kube-network-policies' NetworkPolicy enforcement, with images built here
// and imported into containerd. It installs the chart with Helm as
// docs/getting-started.md says, and config/default with kustomize, runs stdio MCP servers
// as pods of their own images, agents as pods with projected ServiceAccount tokens, and
// checks what a user would: pods that pass their probes, a Lease holder, tools in status,
// reasons when a pod cannot run, enforced egress, failover and an upgrade under load.
//
// The tests are behind the node build tag and need root and the node: run them with
// `make test-node`, which starts the node, runs them and stops it. They own no product
// code: a failure here is a bug in a product package, chart or manifest.
package node
