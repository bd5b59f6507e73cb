// Package config tests what `kubectl apply -k config/default` installs, without an API
// server: it renders the kustomize tree with kustomize/api and checks the properties an
// operator of the operator relies on (namespace and names, a hardened manager with leader
// election, Services and a NetworkPolicy that match the manager's ports, and
// least-privilege RBAC). test/install applies the same render to a real API server.
//
// Test code only.
package config
