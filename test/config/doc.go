// Package config tests what `kubectl apply -k config/default` installs: it renders the
// kustomize tree with kustomize/api and checks the properties an operator of the operator
// relies on (namespace and names, a hardened manager with leader election, Services and a
// NetworkPolicy that match the manager's ports, least-privilege RBAC, metrics only for
// authorized scrapers). The admission policy is tested on a real API server, with users
// who have and who lack the rights it checks. test/install applies the same render to a
// real API server.
//
// Test code only.
package config
