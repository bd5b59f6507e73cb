package controllers

import "github.com/switchboard-mcp/switchboard/connector"

// HoldsRecordsOf reports whether r holds, for the server key, a record of its own last
// write; for the tests that a settled server costs none.
func (r *MCPServerReconciler) HoldsRecordsOf(key connector.Key) (written bool) {
	_, written = r.written.Load(key)
	return written
}

// ObserveConfigs makes r call f with every config it hands the pool, so a test sees what
// a spec resolved to (the pool keeps its configs to itself).
func (r *MCPServerReconciler) ObserveConfigs(f func(connector.Key, connector.Config)) {
	r.handedToPool = f
}
