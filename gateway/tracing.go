package gateway

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// tracer makes the gateway's spans: a server span per request a client sends
// (`{mcp.method.name} {tool}`), with the front door's authentication and authorization,
// the policy decision and the upstream client request as its children.
var tracer = tracing.NewTracer("github.com/switchboard-mcp/switchboard/gateway")

// frontTrace is what the front door did for one HTTP request before its messages were
// read: when it arrived, and how long authenticating and authorizing the caller took.
// The request's spans start once a message says which trace they belong to (its _meta
// wins over the HTTP header), so these are recorded as times and become spans then.
type frontTrace struct {
	start, authenticated, authorized time.Time
	// reviewed is false when the access answer came from the cache; authorizing is
	// false with authorization off; denied when the caller may not use the object.
	reviewed, authorizing, denied bool
	// id is the JSON-RPC id of the request's one message, as the front door decoded it
	// (go-sdk does not hand it to its middleware).
	id jsonrpc.ID
}

// frontTraceKey carries a request's *frontTrace in its context, for the front door's
// checks to fill in.
type frontTraceKey struct{}

// frontTraces finds a request's frontTrace from what go-sdk hands a request's messages:
// the request's own header map (mcp.RequestExtra.Header), the one value that comes along
// from the HTTP request to the message, keyed by its identity.
type frontTraces struct{ m sync.Map }

func headerIdentity(h http.Header) uintptr { return reflect.ValueOf(h).Pointer() }

// begin records a request's arrival and returns r carrying its frontTrace, and end,
// which forgets it once the request is served. Both are no-ops while tracing is off.
func (f *frontTraces) begin(r *http.Request) (*http.Request, func()) {
	if !tracing.Enabled() {
		return r, func() {}
	}
	ft := &frontTrace{start: time.Now()}
	if r.Header == nil {
		r.Header = http.Header{}
	}
	id := headerIdentity(r.Header)
	f.m.Store(id, ft)
	return r.WithContext(context.WithValue(r.Context(), frontTraceKey{}, ft)), func() { f.m.Delete(id) }
}

// of returns the frontTrace of the request whose header map h is, or nil.
func (f *frontTraces) of(h http.Header) *frontTrace {
	if h == nil {
		return nil
	}
	v, ok := f.m.Load(headerIdentity(h))
	if !ok {
		return nil
	}
	return v.(*frontTrace)
}

func frontTraceOf(ctx context.Context) *frontTrace {
	ft, _ := ctx.Value(frontTraceKey{}).(*frontTrace)
	return ft
}

// requestHeader returns the HTTP header go-sdk attached to a message, or nil.
func requestHeader(extra any) http.Header {
	if e, ok := extra.(*mcp.RequestExtra); ok && e != nil {
		return e.Header
	}
	return nil
}

// target names what a server span is about, for its attributes and name.
type target struct {
	key     connector.Key
	toolset bool
	caller  *catalog.Identity
	session string // what mcp.session.id records: tracing.SessionID of the client session's id
	version string // the protocol version, when known
}

// startServerSpan starts the server span of a client's request: its parent is the
// trace context of the message's _meta, else of the HTTP request's headers, else none
// (a new trace); malformed ones are ignored. It starts when the HTTP request arrived,
// and the front door's authentication and authorization become its first children.
// The span is named after the method alone until nameTool adds the tool.
func (g *Gateway) startServerSpan(ctx context.Context, header http.Header, meta tracing.Meta, method string, id jsonrpc.ID, t target) (context.Context, trace.Span) {
	ctx = meta.Context(tracing.HeaderContext(ctx, header))
	ft := g.fronts.of(header)
	if !id.IsValid() && ft != nil {
		id = ft.id
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	if ft != nil {
		opts = append(opts, trace.WithTimestamp(ft.start))
	}
	ctx, span := tracer.Start(ctx, method, opts...)
	if !span.IsRecording() {
		return ctx, span
	}
	attrs := append(make([]attribute.KeyValue, 0, 12),
		tracing.MCPMethodName.String(method),
		tracing.NetworkTransport.String("tcp"),
		tracing.Namespace.String(t.key.Namespace),
	)
	if t.toolset {
		attrs = append(attrs, tracing.Toolset.String(t.key.Name))
	} else {
		attrs = append(attrs, tracing.Server.String(t.key.Name))
	}
	if op := tracing.OperationName(method); op != "" {
		attrs = append(attrs, tracing.GenAIOperationName.String(op))
	}
	if id.IsValid() {
		attrs = append(attrs, tracing.JSONRPCRequestID.String(tracing.Clip(fmt.Sprint(id.Raw()))))
	}
	if t.caller != nil {
		attrs = append(attrs, tracing.UserName.String(t.caller.User.Username))
	}
	if t.session != "" {
		attrs = append(attrs, tracing.MCPSessionID.String(t.session))
	}
	if t.version != "" {
		attrs = append(attrs, tracing.MCPProtocolVersion.String(t.version))
	}
	span.SetAttributes(attrs...)
	if ft != nil {
		frontSpans(ctx, ft)
	}
	return ctx, span
}

// frontSpans records the front door's work as children of the server span in ctx.
func frontSpans(ctx context.Context, ft *frontTrace) {
	if ft.authenticated.IsZero() {
		return
	}
	_, authn := tracer.Start(ctx, "authenticate", trace.WithTimestamp(ft.start))
	authn.End(trace.WithTimestamp(ft.authenticated))
	if !ft.authorizing || ft.authorized.IsZero() {
		return
	}
	decision := "allowed"
	if ft.denied {
		decision = "denied"
	}
	_, authz := tracer.Start(ctx, "authorize", trace.WithTimestamp(ft.authenticated),
		trace.WithAttributes(tracing.AuthCached.Bool(!ft.reviewed), tracing.Decision.String(decision)))
	authz.End(trace.WithTimestamp(ft.authorized))
}

// policySpan records the gateway's decision on a tool call as a child of ctx's span:
// allowed, or denied and why (the audit line's reason).
func policySpan(ctx context.Context, start time.Time, why string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	_, p := tracer.Start(ctx, "policy", trace.WithTimestamp(start))
	if why == "" {
		p.SetAttributes(tracing.Decision.String("allowed"))
	} else {
		p.SetAttributes(tracing.Decision.String("denied"), tracing.Reason.String(why))
	}
	p.End()
}

// startClientSpan starts the span of the request the gateway sends upstream for a
// client's call, a child of the server span in ctx, in the server's name.
func startClientSpan(ctx context.Context, method, tool string, key connector.Key) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noop.Span{}
	}
	name := method
	if tool != "" {
		name = method + " " + tool
	}
	attrs := []attribute.KeyValue{tracing.MCPMethodName.String(method), tracing.Namespace.String(key.Namespace),
		tracing.Server.String(key.Name)}
	if tool != "" {
		attrs = append(attrs, tracing.GenAIToolName.String(tool))
	}
	if op := tracing.OperationName(method); op != "" {
		attrs = append(attrs, tracing.GenAIOperationName.String(op))
	}
	return tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// nameTool names a tools/call span after its tool, which the server's published list
// bounds: a name the list does not hold (the caller's own invention) stays out of it.
func nameTool(span trace.Span, method, tool string, published bool) {
	if tool == "" || !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.GenAIToolName.String(tracing.Clip(tool)))
	if published {
		span.SetName(method + " " + tool)
	}
}

// endSpan ends a span with the outcome the audit line records; an outcome other than
// ok is an error of that type.
func endSpan(span trace.Span, outcome string) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(tracing.Outcome.String(outcome))
	if outcome != outcomeOK {
		span.SetAttributes(tracing.ErrorType.String(outcome))
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

// publishes reports whether the server's published tools (status.tools) name tool.
func (s *server) publishes(tool string) bool {
	if s == nil || s.obj == nil {
		return false
	}
	for _, t := range s.obj.Status.Tools {
		if t.Name == tool {
			return true
		}
	}
	return false
}

// refusedSpan records a request the front door refused before reading it: a server span
// named after the HTTP method (no message was read to name it by), in the trace of the
// request's headers, with why as its error.type and the front door's work as children.
func refusedSpan(r *http.Request, ft *frontTrace, why string) {
	if ft == nil {
		return
	}
	ctx, span := tracer.Start(tracing.HeaderContext(r.Context(), r.Header), r.Method,
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(ft.start))
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(tracing.NetworkTransport.String("tcp"), tracing.Namespace.String(r.PathValue("namespace")),
		tracing.Outcome.String(outcomeDenied), tracing.ErrorType.String(why))
	span.SetStatus(codes.Error, why)
	frontSpans(ctx, ft)
	span.End()
}
