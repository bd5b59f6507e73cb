// Package egress decides where MCP connections may go. It compiles MCPEgressPolicy objects
// into matchers and answers, for a server and a destination, whether a dial or a redirect
// hop is allowed and why not; it also renders the NetworkPolicy for stdio server pods.
//
// Decisions are pure data: egress does no I/O (no DNS, no network, no Kubernetes client).
// The connector asks it at dial time, with the address actually being dialed, and on every
// redirect hop; the controllers feed it the policies.
package egress
