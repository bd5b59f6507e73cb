//go:build e2e && linux

// Package e2e tests Switchboard end to end the way a user runs it: a real kube-apiserver
// and etcd, the CRDs applied with kubectl, the switchboard binary running as the manager,
// real MCP servers (the npm reference server in Streamable HTTP, SSE and stdio modes),
// and every check made through kubectl, the catalogue's REST API and its MCP endpoint.
// TestAnyReplicaServesASessionlessClient runs two manager replicas behind a round-robin
// balancer and kills the leader under a 2026-07-28 client's stream of tool calls.
//
// The tests are behind the e2e build tag (and need Linux, for /proc and parent-death
// signals); run them with `make test-e2e`. They own no product code: a failure here is a
// bug in a product package, fixed and unit-tested there.
package e2e
