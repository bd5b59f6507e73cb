package tracing

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptrace"

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
	if h == nil || h.Get(TraceparentKey) == "" && h.Get(BaggageKey) == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

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
// as it was parsed, passed through; none when it did not parse). Without a span context
// in ctx (tracing off, and no caller context) meta comes back as it was, so that a
// caller's own context passes through. meta itself is not modified.
func InjectMeta(ctx context.Context, meta map[string]any) map[string]any {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return meta
	}
	out := MetaOfContext(ctx)
	next := make(map[string]any, len(meta)+3)
	for k, v := range meta {
		if k != TraceparentKey && k != TracestateKey && k != BaggageKey {
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

// InjectHeader sets the trace context and baggage of ctx in h, replacing any there, and
// removes stale ones when ctx has none.
func InjectHeader(ctx context.Context, h http.Header) {
	h.Del(TraceparentKey)
	h.Del(TracestateKey)
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// AddClientTraceEvents adds to ct hooks that record the connection work of an outgoing
// HTTP request as events of span: DNS, connect (the address, never the path or query)
// and the TLS handshake, which happen only when a connection is made. It leaves ct as it
// is when span does not record, and keeps ct's own DNS, connect and TLS hooks (it has
// none today: it would call them first).
func AddClientTraceEvents(ct *httptrace.ClientTrace, span trace.Span) {
	if !span.IsRecording() {
		return
	}
	dnsStart, dnsDone := ct.DNSStart, ct.DNSDone
	ct.DNSStart = func(info httptrace.DNSStartInfo) {
		if dnsStart != nil {
			dnsStart(info)
		}
		span.AddEvent("dns.start", trace.WithAttributes(attribute.String("server.address", info.Host)))
	}
	ct.DNSDone = func(info httptrace.DNSDoneInfo) {
		if dnsDone != nil {
			dnsDone(info)
		}
		span.AddEvent("dns.done", trace.WithAttributes(attribute.Bool("dns.failed", info.Err != nil)))
	}
	connectStart, connectDone := ct.ConnectStart, ct.ConnectDone
	ct.ConnectStart = func(network, addr string) {
		if connectStart != nil {
			connectStart(network, addr)
		}
		span.AddEvent("dial.start", trace.WithAttributes(attribute.String("network.transport", network),
			attribute.String("network.peer.address", addr)))
	}
	ct.ConnectDone = func(network, addr string, err error) {
		if connectDone != nil {
			connectDone(network, addr, err)
		}
		span.AddEvent("dial.done", trace.WithAttributes(attribute.String("network.peer.address", addr),
			attribute.Bool("dial.failed", err != nil)))
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
