package gateway

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/identity"
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
	caller  *identity.Caller
	session string // what mcp.session.id records: tracing.SessionID of the client session's id
	version string // the protocol version, when known
}

// startServerSpan starts the server span of a client's request: its parent is the
// trace context of the message's _meta, else of the HTTP request's headers, else none
// (a new trace); malformed ones are ignored. It starts when the HTTP request arrived,
// and the front door's authentication and authorization become its first children.
// The span is named after the method alone until nameTool adds the tool.
func (g *Gateway) startServerSpan(ctx context.Context, header http.Header, meta tracing.Meta, method string, id jsonrpc.ID, t target) (context.Context, trace.Span) {
	ctx, span, rec := g.startCallSpan(ctx, header, meta, method, id, t, "", false)
	if rec != nil {
		rec.recordFront(ctx)
		rec.setOn(span)
	}
	return ctx, span
}

// startCallSpan is startServerSpan for a call whose tool, if any, is known before it
// is judged: the span is named after the tool at once when the server publishes it.
// Its attributes and its children (the front door's work, and the policy's that
// spanRecord.decided adds) are gathered in the record it returns, and recorded by
// endCallSpan; the record is nil when the span does not record.
func (g *Gateway) startCallSpan(ctx context.Context, header http.Header, meta tracing.Meta, method string, id jsonrpc.ID, t target, tool string, published bool) (context.Context, trace.Span, *spanRecord) {
	ctx = meta.Context(tracing.HeaderContext(ctx, header))
	ft := g.fronts.of(header)
	if !id.IsValid() && ft != nil {
		id = ft.id
	}
	// A session's client may send any method: the span's name and attributes quote it
	// clipped (a tool's name only when the server publishes it).
	method = tracing.Clip(method)
	name := method
	if tool != "" && published {
		name = method + " " + tool
	}
	opts := serverKind
	if ft != nil {
		opts = []trace.SpanStartOption{serverKind[0], trace.WithTimestamp(ft.start)}
	}
	ctx, span := tracer.Start(ctx, name, opts...)
	if !span.IsRecording() {
		return ctx, span, nil
	}
	rec := newSpanRecord()
	rec.front = ft
	rec.attrs = append(rec.attrs,
		tracing.MCPMethodName.String(method),
		tracing.NetworkTransport.String("tcp"),
		tracing.Namespace.String(t.key.Namespace),
	)
	if t.toolset {
		rec.attrs = append(rec.attrs, tracing.Toolset.String(t.key.Name))
	} else {
		rec.attrs = append(rec.attrs, tracing.Server.String(t.key.Name))
	}
	if op := tracing.OperationName(method); op != "" {
		rec.attrs = append(rec.attrs, tracing.GenAIOperationName.String(op))
	}
	if id.IsValid() {
		rec.attrs = append(rec.attrs, tracing.JSONRPCRequestID.String(idText(id)))
	}
	if t.caller != nil {
		rec.attrs = append(rec.attrs, tracing.UserName.String(tracing.ClipText(t.caller.Username)))
	}
	if t.session != "" {
		rec.attrs = append(rec.attrs, tracing.MCPSessionID.String(t.session))
	}
	if t.version != "" {
		// The version a session's server answered initialize with: the server's choice.
		rec.attrs = append(rec.attrs, tracing.MCPProtocolVersion.String(tracing.Clip(t.version)))
	}
	if tool != "" {
		rec.attrs = append(rec.attrs, tracing.GenAIToolName.String(tracing.Clip(tool)))
	}
	return ctx, span, rec
}

// Span start options that do not change, made once: options passed to a tracer escape.
var (
	serverKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	clientKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

// spanRecord is what a call's span records besides its start, gathered while the call
// is served and recorded when the span ends (endCallSpan): its attributes, and the
// children that stand for the front door's work and the policy's decision, with the
// times they happened. The SDK copies the attributes of each SetAttributes and grows
// the span's slice when more come later (the outcome comes last), so they are set once;
// and a batch span processor's goroutine is woken for a span that ends while it waits,
// so a call's spans end together, as one batch, once the call is answered. Records are
// used again: a slice passed through the span's interface would be made anew for every
// span.
type spanRecord struct {
	attrs []attribute.KeyValue
	// front is the front door's work on the call's HTTP request, nil for none.
	front *frontTrace
	// policed says the policy decided on the call, from policyStart to policyEnd,
	// against it when why is set.
	policed                bool
	policyStart, policyEnd time.Time
	why                    string
}

var spanRecords = sync.Pool{New: func() any { return &spanRecord{attrs: make([]attribute.KeyValue, 0, 16)} }}

func newSpanRecord() *spanRecord { return spanRecords.Get().(*spanRecord) }

// decided records the policy's decision on the call, made from start until now:
// allowed, or denied and why (the audit line's reason). A nil record records nothing.
func (r *spanRecord) decided(start time.Time, why string) {
	if r == nil {
		return
	}
	r.policed, r.policyStart, r.policyEnd, r.why = true, start, time.Now(), why
}

// recordFront records the front door's work as children of the span in ctx, now.
func (r *spanRecord) recordFront(ctx context.Context) {
	if r.front != nil {
		frontSpans(ctx, r.front)
		r.front = nil
	}
}

// setOn sets the record's attributes on span, which keeps a copy, and lets the record
// go.
func (r *spanRecord) setOn(span trace.Span) {
	span.SetAttributes(r.attrs...)
	clear(r.attrs)
	*r = spanRecord{attrs: r.attrs[:0]}
	spanRecords.Put(r)
}

// idText is what jsonrpc.request.id records of a request id: its number or its string,
// clipped.
func idText(id jsonrpc.ID) string {
	switch v := id.Raw().(type) {
	case int64:
		return strconv.FormatInt(v, 10)
	case string:
		return tracing.Clip(v)
	}
	return tracing.Clip(fmt.Sprint(id.Raw()))
}

// Attributes that do not change, made once: the SDK copies them into each span.
var (
	// authorizeAttrs are the authorize span's, by whether the answer came from the
	// cache and whether it denied.
	authorizeAttrs = [2][2][]attribute.KeyValue{
		{
			{tracing.AuthCached.Bool(false), tracing.Decision.String("allowed")},
			{tracing.AuthCached.Bool(false), tracing.Decision.String("denied")},
		},
		{
			{tracing.AuthCached.Bool(true), tracing.Decision.String("allowed")},
			{tracing.AuthCached.Bool(true), tracing.Decision.String("denied")},
		},
	}
	policyAllowed = []attribute.KeyValue{tracing.Decision.String("allowed")}
	// knownOutcomes are the outcome attributes of the outcomes the gateway records.
	knownOutcomes = map[string][]attribute.KeyValue{}
)

func init() {
	for _, o := range []string{outcomeOK, outcomeToolError, outcomeDenied, outcomeUpstreamError} {
		knownOutcomes[o] = makeOutcomeAttrs(o)
	}
}

// outcomeAttrs returns the attributes of a span's outcome: the outcome, and the error
// type of any but ok.
func outcomeAttrs(outcome string) []attribute.KeyValue {
	if kv, ok := knownOutcomes[outcome]; ok {
		return kv
	}
	return makeOutcomeAttrs(outcome)
}

func makeOutcomeAttrs(outcome string) []attribute.KeyValue {
	if outcome == outcomeOK {
		return []attribute.KeyValue{tracing.Outcome.String(outcome)}
	}
	return []attribute.KeyValue{tracing.Outcome.String(outcome), tracing.ErrorType.String(outcome)}
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
	cached, denied := 0, 0
	if !ft.reviewed {
		cached = 1
	}
	if ft.denied {
		denied = 1
	}
	_, authz := tracer.Start(ctx, "authorize", trace.WithTimestamp(ft.authenticated))
	authz.SetAttributes(authorizeAttrs[cached][denied]...)
	authz.End(trace.WithTimestamp(ft.authorized))
}

// policySpan records the gateway's decision on a tool call as a child of ctx's span:
// allowed, or denied and why (the audit line's reason).
func policySpan(ctx context.Context, start time.Time, why string) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	recordPolicy(ctx, start, time.Time{}, why)
}

// recordPolicy records the policy span of a decision made from start until end (now
// when zero) as a child of ctx's span.
func recordPolicy(ctx context.Context, start, end time.Time, why string) {
	_, p := tracer.Start(ctx, "policy", trace.WithTimestamp(start))
	if why == "" {
		p.SetAttributes(policyAllowed...)
	} else {
		p.SetAttributes(tracing.Decision.String("denied"), tracing.Reason.String(tracing.ClipText(why)))
	}
	if end.IsZero() {
		p.End()
	} else {
		p.End(trace.WithTimestamp(end))
	}
}

// startClientSpan starts the span of the request the gateway sends upstream for a
// client's call, a child of the server span in ctx, in the server's name.
func startClientSpan(ctx context.Context, method, tool string, key connector.Key) (context.Context, trace.Span) {
	ctx, span, rec := startUpstreamSpan(ctx, method, tool, key)
	if rec != nil {
		rec.setOn(span)
	}
	return ctx, span
}

// startUpstreamSpan is startClientSpan with the span's attributes gathered in the
// record it returns, for endCallSpan to set with the outcome; the record is nil when
// the span does not record.
func startUpstreamSpan(ctx context.Context, method, tool string, key connector.Key) (context.Context, trace.Span, *spanRecord) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noop.Span{}, nil
	}
	method = tracing.Clip(method)
	name := method
	if tool != "" {
		name = method + " " + tool
	}
	ctx, span := tracer.Start(ctx, name, clientKind...)
	if !span.IsRecording() {
		return ctx, span, nil
	}
	rec := newSpanRecord()
	rec.attrs = append(rec.attrs, tracing.MCPMethodName.String(method), tracing.Namespace.String(key.Namespace),
		tracing.Server.String(key.Name))
	if tool != "" {
		rec.attrs = append(rec.attrs, tracing.GenAIToolName.String(tool))
	}
	if op := tracing.OperationName(method); op != "" {
		rec.attrs = append(rec.attrs, tracing.GenAIOperationName.String(op))
	}
	return ctx, span, rec
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
func endSpan(span trace.Span, outcome string, opts ...trace.SpanEndOption) {
	if !span.IsRecording() {
		span.End(opts...)
		return
	}
	span.SetAttributes(outcomeAttrs(outcome)...)
	if outcome != outcomeOK {
		span.SetStatus(codes.Error, outcome)
	}
	span.End(opts...)
}

// callSpans are a call's server span and the client span of its request upstream, nil
// while tracing is off or (client) until the call is sent, with what each records when
// it ends (endCallSpan): nil once recorded, or where the span does not record.
type callSpans struct {
	span, client         trace.Span
	record, clientRecord *spanRecord
}

// end ends the client span with clientOutcome at answered (now when zero), when the
// server answered, then the server span with outcome, now: a call's spans are recorded
// together, once it is answered.
func (c *callSpans) end(outcome, clientOutcome string, answered time.Time) {
	if c.client != nil {
		endCallSpan(c.client, c.clientRecord, clientOutcome, trace.WithTimestamp(answered))
		c.clientRecord = nil
	}
	if c.span != nil {
		endCallSpan(c.span, c.record, outcome)
		c.record = nil
	}
}

// toolCallTraceKey carries a *toolCallTrace in the context of a sessionless tools/call.
type toolCallTraceKey struct{}

// toolCallTrace is what the spans of a sessionless tools/call record besides their
// starts, gathered as a session call's are, and recorded together when the call ends
// (end): the call's spans, whether the server publishes the tool, and how the upstream
// request ended. Ending a span wakes the batch span processor's goroutine, once for each
// span that ends while it waits, which would otherwise happen while the call waits.
type toolCallTrace struct {
	callSpans
	published bool
	answered  time.Time // when the server answered, the client span's end
	outcome   string    // the client span's
}

func toolCallTraceOf(ctx context.Context) *toolCallTrace {
	t, _ := ctx.Value(toolCallTraceKey{}).(*toolCallTrace)
	return t
}

// end ends the call's server span, span (nil while tracing is off), with outcome, and
// its client span with its own. Without records (the span does not record) it ends span
// alone.
func (t *toolCallTrace) end(span trace.Span, outcome string) {
	switch {
	case span == nil:
	case t == nil:
		endSpan(span, outcome)
	default:
		t.callSpans.end(outcome, t.outcome, t.answered)
	}
}

// endCallSpan ends a span whose record gathered its attributes and children
// (startCallSpan, startUpstreamSpan): the children are recorded with the times they
// happened, and the attributes set with the outcome's. With rec nil it is endSpan.
func endCallSpan(span trace.Span, rec *spanRecord, outcome string, opts ...trace.SpanEndOption) {
	if rec == nil {
		endSpan(span, outcome, opts...)
		return
	}
	if rec.front != nil || rec.policed {
		ctx := trace.ContextWithSpan(context.Background(), span)
		rec.recordFront(ctx)
		if rec.policed {
			recordPolicy(ctx, rec.policyStart, rec.policyEnd, rec.why)
		}
	}
	rec.attrs = append(rec.attrs, outcomeAttrs(outcome)...)
	rec.setOn(span)
	if outcome != outcomeOK {
		span.SetStatus(codes.Error, outcome)
	}
	span.End(opts...)
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
	// The namespace is the request path's, not yet known to name anything.
	span.SetAttributes(tracing.NetworkTransport.String("tcp"), tracing.Namespace.String(tracing.Clip(r.PathValue("namespace"))),
		tracing.Outcome.String(outcomeDenied), tracing.ErrorType.String(why))
	span.SetStatus(codes.Error, why)
	frontSpans(ctx, ft)
	span.End()
}
