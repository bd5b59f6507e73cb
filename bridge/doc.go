// Package bridge serves a stdio MCP server over Streamable HTTP. In PerSession mode every
// client session gets its own subprocess running the server's command, and the bridge
// relays JSON-RPC messages between the session's HTTP requests and the subprocess's stdin
// and stdout. In Shared mode one long-lived subprocess serves every session: the bridge
// initializes it once and multiplexes the sessions over it (see sharedProcess). It is
// what `switchboard bridge` runs inside the pod of an MCPServer with spec.stdio.
//
// The package owns:
//   - the MCP endpoint (/mcp), the probes (/healthz, /readyz) and the metrics (/metrics)
//     of the bridge's HTTP server;
//   - the session table: session IDs, idle reaping, and the --max-sessions limit, at which
//     a new session evicts the least recently used session with no request in flight
//     (most clients never send DELETE, so a limit that only refused would lock every
//     later client out);
//   - the subprocesses: one process group each, started per session (or ahead of it, as
//     a warm spare) or once for Shared mode (restarted with backoff when it dies),
//     stopped by closing stdin, then a grace period, then SIGTERM and a second later
//     SIGKILL to the whole group, and always reaped, so that no zombie is left;
//   - the startup watch (Options.StartupWindow): a first process that cannot be started
//     or exits on its own at once ends Serve with a CommandError naming the command, so
//     that a pod whose command fails shows it (exit status, log) instead of looking ready;
//   - bounds: message size in both directions, stderr line length and log rate;
//   - its traces (tracing.go): a span per relayed client call, continuing the call's
//     trace and handing it to the subprocess in params._meta, and one per process start.
//
// In PerSession mode it relays messages without interpreting MCP (Shared mode must route
// them, which sharedProcess documents): go-sdk's StreamableServerTransport frames
// the HTTP side and its IOTransport frames the stdio side, and package relay moves
// jsonrpc.Message values between the two Connections (the loop it shares with the
// gateway). The bridge's policy is relay hooks, and the only messages they look at are
// the ones it must route: an initialize request starts a session, and a response settles
// the request it answers (so that a dying subprocess fails exactly the calls it still owed).
//
// Requests of the sessionless era (MCP 2026-07-28 and later: no session, every request
// naming its protocol version) are served apart, in both modes, by statelessFront: one
// process of their own, started on the first such request, spoken to by a go-sdk client
// session, many requests at once; go-sdk's stateless handler and a go-sdk server are the
// front door, whose middleware relays each request (the era needs header checks and
// server/discover answered by an MCP server, so this path does interpret messages). A
// command that speaks only sessions gets no such process: its sessionless requests are
// answered UnsupportedProtocolVersion with the versions it speaks, and clients fall back
// to initialize. Bridging the eras is the gateway's work.
//
// What relaying sessions through go-sdk's transports implies, and clients should know:
//   - sessions are stateful (Mcp-Session-Id);
//   - notifications and requests from the subprocess (progress, logging, sampling) travel
//     on the session's standalone SSE stream (the client's GET), since the bridge cannot
//     tie them to the HTTP request they relate to, or on a subscriptions/listen stream
//     when the client opened one: in a session older than that method (2026-07-28) the
//     bridge holds such a call open itself rather than pass it to the subprocess, so that
//     a client that cannot open the GET (the gateway's upstream) still receives them;
//   - a client request must use a method MCP defines: the transport refuses others.
//
// It must not: hand-roll JSON-RPC or Streamable HTTP framing, proxy sessions through an
// mcp.Server (which would re-interpret messages), know about Kubernetes objects, or log what could be
// a secret (session IDs are bearer tokens; the bridge logs a sequence number instead).
package bridge
