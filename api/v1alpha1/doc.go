// Package v1alpha1 holds the Switchboard API, group mcp.switchboard.dev: the MCPServer,
// MCPEgressPolicy, MCPToolset, MCPIdentityProvider and MCPAccessPolicy kinds, their validation (OpenAPI bounds and CEL rules, enforced by the API
// server at admission), and the condition types and reasons every controller reports.
//
// The package is types only: no I/O, no client, no controller logic. Everything a user
// can get wrong in a manifest is rejected here, at admission, with a message that names
// the field and says what is allowed.
//
// +kubebuilder:object:generate=true
// +groupName=mcp.switchboard.dev
package v1alpha1
