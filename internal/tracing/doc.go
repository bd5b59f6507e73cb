// Package tracing is Switchboard's OpenTelemetry tracing: the tracer provider the
// manager, the bridge and `switchboard dev` install (Setup, configured by the standard
// OTEL_* environment variables and off when no exporter is configured), the W3C trace
// context and baggage propagation through HTTP headers and MCP's params._meta (SEP-414),
// and the names of the span attributes the MCP and GenAI semantic conventions give.
//
// Propagation rules every caller of this package keeps:
//   - a caller's trace context is untrusted input: a malformed traceparent is ignored as
//     if it were absent, and a request with none that is valid starts a new trace; it is
//     never an error;
//   - where both the HTTP traceparent header and params._meta carry one and they differ,
//     _meta wins (MetaContext after HeaderContext);
//   - baggage is passed through as received, never added to;
//   - outgoing requests carry the context of the span that makes them, in the HTTP
//     headers (Transport) and in params._meta (InjectMeta), so that a traced MCP server
//     continues the trace.
//
// It must not: record arguments, results, header values, tokens, claims beyond a
// username, or query strings in span names, attributes or events (the helpers here take
// none), nor judge a client's message: _meta's trace context arrives as what the caller
// already decoded (mcpmsg's reading, or go-sdk's), and MetaParams only splices the
// trace context into params that reading has checked.
package tracing
