// Package chart tests the Helm chart in charts/switchboard with the pinned Helm v3
// binary: it lints, it renders with several value sets, its CRDs and RBAC rules equal
// the generated ones in config/, its values schema rejects invalid values with a clear
// message, and every object it renders is accepted by a real API server where the
// manager's ServiceAccount gets exactly the access it needs, and where its admission
// policy rejects an MCPServer whose author lacks the rights it checks. The package holds
// tests only.
package chart
