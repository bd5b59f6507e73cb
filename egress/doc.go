// Package egress decides where MCP connections may go. It compiles MCPEgressPolicy objects
// into matchers and answers, for a server and a destination, whether a dial or a redirect
// hop is allowed and why not; it also renders the NetworkPolicy for stdio server pods.
//
// Decisions are pure data: egress does no I/O (no DNS, no network, no Kubernetes client).
// The connector asks it at dial time, with the address actually being dialed, and on every
// redirect hop; the controllers feed it the policies.
//
// The flow is: Compile turns the policies and the manager's Defaults into a PolicySet,
// reporting each invalid policy separately; PolicySet.ForServer gives the ServerRules of
// one MCPServer; ServerRules.DecideDial, ServerRules.DecideRedirect and
// ServerRules.NetworkPolicy answer for that server. SameOrigin tells the connector whether
// configured headers may go to a URL. Everything compiled is immutable and safe for
// concurrent use; a policy change means compiling a new PolicySet.
//
// Semantics, as in NetworkPolicy: once any policy selects a server, only what some rule of
// a selecting policy allows is allowed (the union of allows); a server no policy selects
// follows the default posture (public, all or none). Link-local, cloud metadata,
// unspecified, multicast and broadcast addresses are denied whatever a policy says, also
// in their IPv4-mapped, NAT64 (well-known and local-use), 6to4 and IPv4-compatible forms
// (AlwaysDenied).
package egress
