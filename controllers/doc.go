// Package controllers holds Switchboard's reconcilers: MCPServer, MCPEgressPolicy, MCPToolset
// and MCPIdentityProvider.
// They turn specs into connector sessions and workloads, and what the connector observes
// into status conditions and Events.
//
// Reconcilers never block on the network beyond a bounded timeout: the connector owns all
// MCP traffic and reports changes through a channel source.
package controllers
