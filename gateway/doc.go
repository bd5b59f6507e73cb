// Package gateway is the agent-facing side of Switchboard: one Streamable HTTP MCP
// endpoint per MCPServer, at /mcp/namespaces/{namespace}/servers/{name} on the
// catalogue's address, and one per MCPToolset, at
// /mcp/namespaces/{namespace}/toolsets/{name} (internal/gatewaypath), through which
// agents call tools with nothing but their own Kubernetes token. The manager serves its
// Handler beside the catalogue's on one listener.
//
// The package owns:
//   - the endpoint: go-sdk's StreamableServerTransport per client session, behind the
//     front-door checks of internal/mcphttp;
//   - who may call: the caller's bearer token (an identity.Authenticator, shared with the
//     catalogue; the caller is an identity.Caller, and the connector's caller is derived
//     from it by upstreamCaller alone) and a SubjectAccessReview for verb "use" on the
//     MCPServer by name, cached briefly;
//   - the relay: each client session gets an upstream session of its own from the
//     connector (connector.Pool.OpenUpstream) and relay.Relay moves every message between
//     them; policy is the relay's hook: spec.tools filters tools/list answers and refuses
//     filtered tools/call requests, spec.tools.pinnedDigest refuses every tools/call while
//     the published tools differ from it; one decision (judgePin, pin.go) judges the
//     tools every upstream connection serves against the pin, for sessions, sessionless
//     requests and toolsets alike;
//   - the one decision (decision.go): every front door (sessions, sessionless requests,
//     toolsets in both discovery modes) asks decide about a tools/call, resources/read or
//     prompts/get, and judgeList about a tools/list answer; they run the same checks in
//     the same order (the server exists, spec.tools, the pin, then the MCPAccessPolicies
//     of the endpoint through policy.Decide and policy.Listable, which the gateway holds
//     compiled per generation: accesspolicy.go), ask the caller's user when a policy
//     requires approval, and record the audit line, span and metric of the verdict;
//   - toolsets: each client session of a toolset gets a go-sdk mcp.Server of its own
//     whose tools are the toolset's exposed tools (internal/toolsets decides the names, as
//     it does for the toolset's status) of the origin servers the caller may use (verb
//     "use" on the toolset and on each origin); its upstream sessions, one per origin,
//     open on the first tools/list or tools/call and close with it, and each tools/call
//     passes the same policy, pin, rate and audit checks as the server endpoint's;
//     elicitation and sampling requests of an origin go to the client on the stream of
//     the call they belong to; changes of the origins' tools, the toolset or the
//     caller's access reach the client as notifications/tools/list_changed; in Search
//     mode the session serves find_tools (ranked by Options.NewToolIndex: in the manager
//     the catalogue's ranking) and call_tool instead of the whole list;
//   - limits: sessions per replica and per server, requests per second per caller and
//     server, message size, calls in flight per session, idle sessions;
//   - the audit log (one line per session start and end, per withheld tools list and per
//     tools/call, every value a caller or server chooses clipped: audit.go) and the
//     gateway's metrics;
//   - its traces (tracing.go): a server span per client request, in the trace of the
//     request's params._meta or else its HTTP headers (read from the one decoding the
//     decisions are made on), with the front door's authentication and authorization,
//     the policy decision and the upstream request as children; the upstream request
//     carries the client span's context in _meta and (through the connector) its headers.
//
// It must not: build HTTP clients, attach credentials or judge egress (the connector does,
// in one place, for the operator's sessions and the gateway's alike); forward anything
// of the caller's request but its JSON-RPC messages (never its Authorization header or
// cookies: the MCP specification forbids token passthrough); frame JSON-RPC or Streamable
// HTTP itself; log arguments, results, header values, tokens or query strings; or import
// the catalogue (what it needs of it, the tool ranking and the resource metadata
// challenge, comes through ToolIndex and ResourceMetadata, wired by the manager).
package gateway
