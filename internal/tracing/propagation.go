package tracing

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptrace"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The _meta keys (and HTTP headers) of W3C trace context and baggage (SEP-414).
const (
	TraceparentKey = "traceparent"
	TracestateKey  = "tracestate"
	BaggageKey     = "baggage"
)

// propagator is W3C trace context and baggage, whatever the global propagator is: the
// keys SEP-414 names in _meta are these.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Propagator returns the propagator Switchboard uses: W3C trace context and baggage.
func Propagator() propagation.TextMapPropagator { return propagator }

// HeaderContext returns ctx with the remote span context and baggage of an incoming
// request's headers; malformed ones are ignored.
func HeaderContext(ctx context.Context, h http.Header) context.Context {
	if len(h[traceparentHeader]) == 0 && len(h[baggageHeader]) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, headerCarrier(h))
}

// The canonical forms (http.CanonicalHeaderKey) of the trace context headers: the keys
// under which http.Header holds them.
const (
	traceparentHeader = "Traceparent"
	tracestateHeader  = "Tracestate"
	baggageHeader     = "Baggage"
)

// headerCarrier is propagation.HeaderCarrier (one value read, all values read, one
// value set; keys case-insensitive) without canonicalizing the propagator's own keys on
// every call, which costs an allocation each time: their canonical forms are constants.
type headerCarrier http.Header

// canonicalKey returns the canonical form of a propagator's key.
func canonicalKey(key string) string {
	switch key {
	case TraceparentKey:
		return traceparentHeader
	case TracestateKey:
		return tracestateHeader
	case BaggageKey:
		return baggageHeader
	}
	return http.CanonicalHeaderKey(key)
}

func (c headerCarrier) Get(key string) string {
	if v := c[canonicalKey(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c headerCarrier) Values(key string) []string { return c[canonicalKey(key)] }

func (c headerCarrier) Set(key, value string) { c[canonicalKey(key)] = []string{value} }

func (c headerCarrier) Keys() []string { return propagation.HeaderCarrier(c).Keys() }

// Meta is the trace context of a request's params._meta: its traceparent, tracestate
// and baggage members, empty where absent or not strings.
type Meta struct {
	Traceparent, Tracestate, Baggage string
}

// MetaOf reads Meta from a decoded _meta.
func MetaOf(meta map[string]any) Meta {
	str := func(k string) string {
		s, _ := meta[k].(string)
		return s
	}
	if len(meta) == 0 {
		return Meta{}
	}
	return Meta{Traceparent: str(TraceparentKey), Tracestate: str(TracestateKey), Baggage: str(BaggageKey)}
}

// Context returns ctx with m's remote span context and baggage, which win over ctx's
// (those of the HTTP headers): a valid traceparent replaces the span context, a valid
// baggage the baggage. Malformed values are ignored.
func (m Meta) Context(ctx context.Context) context.Context {
	if m.Traceparent == "" && m.Baggage == "" {
		return ctx
	}
	return propagator.Extract(ctx, metaCarrier(m))
}

// metaCarrier reads Meta as a TextMapCarrier.
type metaCarrier Meta

func (c metaCarrier) Get(key string) string {
	switch key {
	case TraceparentKey:
		return c.Traceparent
	case TracestateKey:
		return c.Tracestate
	case BaggageKey:
		return c.Baggage
	}
	return ""
}
func (metaCarrier) Set(string, string) {}
func (metaCarrier) Keys() []string     { return []string{TraceparentKey, TracestateKey, BaggageKey} }

// MetaOfContext returns the trace context to send in an outgoing request's _meta: that
// of ctx's span and baggage; empty fields where there is none.
func MetaOfContext(ctx context.Context) Meta {
	var m Meta
	propagator.Inject(ctx, (*metaSetter)(&m))
	return m
}

// metaSetter fills in Meta as a TextMapCarrier; the propagator sets no other key.
type metaSetter Meta

func (c *metaSetter) Get(key string) string { return metaCarrier(*c).Get(key) }
func (c *metaSetter) Set(key, value string) {
	switch key {
	case TraceparentKey:
		c.Traceparent = value
	case TracestateKey:
		c.Tracestate = value
	case BaggageKey:
		c.Baggage = value
	}
}
func (*metaSetter) Keys() []string { return []string{TraceparentKey, TracestateKey, BaggageKey} }

// InjectMeta returns meta with the trace context of ctx's span in place of the one meta
// carried: traceparent and tracestate are the span's, and baggage is ctx's (the caller's
// as it was parsed, passed through; none when it did not parse). Members that name a
// trace context key in another case are the caller's too, and go, as MetaParams takes
// them out: a reader that ignores case would find them. Without a span context in ctx
// (tracing off, and no caller context) meta comes back as it was, so that a caller's
// own context passes through. meta itself is not modified.
func InjectMeta(ctx context.Context, meta map[string]any) map[string]any {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return meta
	}
	out := MetaOfContext(ctx)
	next := make(map[string]any, len(meta)+3)
	for k, v := range meta {
		if !isTraceKey(k) {
			next[k] = v
		}
	}
	for k, v := range map[string]string{TraceparentKey: out.Traceparent, TracestateKey: out.Tracestate, BaggageKey: out.Baggage} {
		if v != "" {
			next[k] = v
		}
	}
	if len(next) == 0 {
		return nil
	}
	return next
}

// isTraceKey reports whether name is a trace context or baggage key of _meta in any
// case.
func isTraceKey(name string) bool {
	return strings.EqualFold(name, TraceparentKey) || strings.EqualFold(name, TracestateKey) ||
		strings.EqualFold(name, BaggageKey)
}

// InjectHeader sets the trace context and baggage of ctx in h, replacing any there, and
// removes stale ones when ctx has none.
func InjectHeader(ctx context.Context, h http.Header) {
	delete(h, traceparentHeader)
	delete(h, tracestateHeader)
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, headerCarrier(h))
}

// AddTLSEvents adds to ct hooks that record the TLS handshake of an outgoing HTTPS
// request as events of span; it leaves ct as it is when span does not record, and keeps
// ct's own handshake hooks (it has none today: it would call them first). The lookup and
// the dial of a connection are recorded where they are made (DNSStart, DialStart): hooks
// for them would be closures made for every request, though few dial.
func AddTLSEvents(ct *httptrace.ClientTrace, span trace.Span) {
	if !span.IsRecording() {
		return
	}
	tlsStart, tlsDone := ct.TLSHandshakeStart, ct.TLSHandshakeDone
	ct.TLSHandshakeStart = func() {
		if tlsStart != nil {
			tlsStart()
		}
		span.AddEvent("tls.handshake.start")
	}
	ct.TLSHandshakeDone = func(state tls.ConnectionState, err error) {
		if tlsDone != nil {
			tlsDone(state, err)
		}
		span.AddEvent("tls.handshake.done", trace.WithAttributes(
			attribute.String("tls.protocol.version", tls.VersionName(state.Version)),
			attribute.String("network.protocol.name", state.NegotiatedProtocol),
			attribute.Bool("tls.failed", err != nil)))
	}
}

// DNSStart records on span (the span of the request a connection is made for) that
// the lookup of host began.
func DNSStart(span trace.Span, host string) {
	span.AddEvent("dns.start", trace.WithAttributes(attribute.String("server.address", host)))
}

// DNSDone records on span that a lookup ended, failed or not.
func DNSDone(span trace.Span, err error) {
	span.AddEvent("dns.done", trace.WithAttributes(attribute.Bool("dns.failed", err != nil)))
}

// DialStart records on span that a connection to addr (an address and port, never a
// path or query) is being made over network.
func DialStart(span trace.Span, network, addr string) {
	span.AddEvent("dial.start", trace.WithAttributes(attribute.String("network.transport", network),
		attribute.String("network.peer.address", addr)))
}

// DialDone records on span that the connection to addr was made, or failed.
func DialDone(span trace.Span, addr string, err error) {
	span.AddEvent("dial.done", trace.WithAttributes(attribute.String("network.peer.address", addr),
		attribute.Bool("dial.failed", err != nil)))
}

// CarryOver returns dst with the span and baggage of src: for work that must not end
// with src's cancellation but belongs to its trace.
func CarryOver(dst, src context.Context) context.Context {
	if span := trace.SpanFromContext(src); span.SpanContext().IsValid() {
		dst = trace.ContextWithSpan(dst, span)
	}
	if b := baggage.FromContext(src); b.Len() > 0 {
		dst = baggage.ContextWithBaggage(dst, b)
	}
	return dst
}
