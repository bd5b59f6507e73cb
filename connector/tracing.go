package connector

import (
	"context"
	"net/url"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// tracer makes the connector's spans: connect, discovery and probe of a server's
// session, and token acquisition; the HTTP requests of each carry its context.
var tracer = tracing.NewTracer("github.com/switchboard-mcp/switchboard/connector")

// noSpan is what the span helpers return while tracing is off: ending it ends nothing.
var noSpan = noop.Span{}

// tokenParent remembers the span of the request that last asked the stack for a bearer
// token, so that a token request made for it (client credentials, an exchange, a
// jwt-bearer grant) is that span's child: the token sources take no context of the
// request. Concurrent requests may hang a shared token's request under either of them.
func (s *httpStack) noteTokenParent(ctx context.Context) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		s.tokenParent.Store(&sc)
	}
}

// startTokenSpan starts the span of one token request to tokenURL (its origin alone is
// recorded) with the grant named, under the request that needed it.
func (s *httpStack) startTokenSpan(ctx context.Context, grant string, tokenURL *url.URL) (context.Context, trace.Span) {
	if !tracing.Enabled() {
		return ctx, noSpan
	}
	if s != nil {
		if sc := s.tokenParent.Load(); sc != nil {
			ctx = trace.ContextWithSpanContext(ctx, *sc)
		}
	}
	attrs := []attribute.KeyValue{tracing.Grant.String(grant)}
	if tokenURL != nil {
		attrs = append(attrs, attribute.String("server.address", tokenURL.Hostname()))
	}
	return tracer.Start(ctx, "token "+grant, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endTokenSpan ends a token request's span with its failure's reason, if any.
func endTokenSpan(span trace.Span, e *Error) { endSpan(span, e) }

// startSpan starts a span of the session's own work (connect, discover, probe), a new
// trace unless ctx holds one, named op and carrying the server's key, which links it to
// the server's reconciles.
func (s *session) startSpan(ctx context.Context, op string) (context.Context, trace.Span) {
	if !tracing.Enabled() {
		return ctx, noSpan
	}
	return tracer.Start(ctx, op, trace.WithAttributes(
		tracing.Namespace.String(s.key.Namespace), tracing.Server.String(s.key.Name)))
}

// endSpan ends a span of the session's work with its failure's reason, if any.
func endSpan(span trace.Span, e *Error) {
	if e != nil && span.IsRecording() {
		tracing.Fail(span, e.Reason)
	}
	span.End()
}
