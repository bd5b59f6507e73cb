// Package connector is the MCP client side of Switchboard. It owns one long-lived,
// health-checked MCP session per server: it picks the transport (Streamable HTTP or the
// legacy HTTP+SSE transport, or detects which one a server speaks), injects the
// configured headers, enforces egress and redirect decisions on every dial and every
// redirect hop, discovers what the server offers (tools, resources, resource templates,
// prompts), keeps that picture fresh on list_changed notifications, probes the session,
// reconnects with jittered exponential backoff and tells its caller when anything a user
// would notice has changed.
//
// The package speaks MCP only through github.com/modelcontextprotocol/go-sdk; it never
// frames JSON-RPC or the Streamable HTTP wire protocol itself. Even transport detection
// (Auto) is go-sdk's Streamable HTTP connect, falling back to its legacy SSE transport
// when the HTTP layer saw the POST answered 400, 404 or 405 without a JSON-RPC error.
// Its own HTTP code is the layer beneath go-sdk: the dialer, redirect checks, header
// injection and response limits. Servers whose connection settings and egress decisions
// are equal share one HTTP transport and its kept-alive connections; what is secret or
// per server (headers, tokens, the decider's verdict on each dial) stays per request.
// The pool's sessions share one go-sdk client, and hold a standalone GET stream only
// for servers that announce listChanged.
//
// OAuth client credentials ([OAuth2ClientCredentials]) are a token source inside the
// connector, one per server, shared by the pool's session and the gateway's Upstreams:
// discovery (RFC 9728 protected resource metadata, RFC 8414 or OpenID authorization
// server metadata) and the token request go through the session's own dialer, egress
// decider and redirect checks, with bounded responses; the client secret or signed
// assertion goes to the token endpoint only, over https (or plain http to loopback with
// AllowInsecureHTTP); tokens live in memory only and never appear in anything the
// connector emits. What judges the servers' words and builds the grants without I/O
// (the challenge parser, discovery's metadata checks, the canonical resource, the
// token requests and client assertions, the reading of token responses and token
// errors) is connector/oauth; the connector sends what it builds and holds the tokens;
// the
// transports and bounded bodies beneath the stack are internal/httpclient, which the
// identity package's issuer client uses too.
//
// Per-caller credentials ([PerCallerAuth]: an RFC 8693 token exchange, or SEP-990
// enterprise-managed authorization) give each gateway caller a token of its own for a
// server: [Pool.OpenUpstream] takes the caller, and the Upstream presents the token
// obtained by exchanging the caller's token, through the session's stack like every
// other OAuth request, never the operator's. Those tokens are cached per server config
// and caller in one bounded LRU per pool ([Options.MaxCallerTokens]), never past the
// caller's own token ([Pool.PresentCaller]), and scrubbed from what that caller's
// Upstream relays. The pool's own session never acts as a caller: without an operator
// credential it checks the server's metadata only ([Snapshot.ToolsPerCaller]).
//
// Traces (tracing.go): a span per connect (with its handshake's requests), discovery and
// probe, carrying the server's key, and per token request; every request it sends
// carries the trace context of the span in its context (an Upstream takes it from the
// context its Write is given) in its traceparent header, to the server's own origin
// only, with its DNS, dial, TLS and egress decision as that span's events.
//
// What it must not do:
//   - know about Kubernetes objects: callers hand it a plain [Config] with secrets
//     already resolved, and read back a plain [Snapshot];
//   - block its caller on the network: [Pool.Ensure], [Pool.Remove] and [Pool.Snapshot]
//     return at once, all I/O happens on per-session goroutines;
//   - leak secrets: header values and URL query strings never appear in errors,
//     snapshots, logs or metric labels, and configured headers are only ever sent to the
//     configured origin;
//   - trust the server: every response, event, list and description is bounded
//     ([Limits]), and a server that breaks a bound yields [ReasonLimitExceeded], never a
//     crash, a hang or unbounded memory.
//
// Changes reach the controllers through [Pool.Events], a channel of [Event] values that
// carry only the server's [Key]; the controller adapts it to a controller-runtime channel
// source and reads the details with [Pool.Snapshot].
package connector
