// Package controllers holds Switchboard's reconcilers: MCPServer and MCPEgressPolicy.
// They turn specs into connector sessions and workloads, and what the connector observes
// into status conditions and Events.
//
// Reconcilers never block on the network beyond a bounded timeout: the connector owns all
// MCP traffic and reports changes through a channel source.
package controllers

// The manager records Events on transitions and reads and updates Switchboard's kinds.
// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpservers;mcpegresspolicies,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpservers/status;mcpegresspolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpservers/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
