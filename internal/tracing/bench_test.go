package tracing_test

import (
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// BenchmarkMetaParams measures splicing the gateway's trace context into the params of
// a call, as every traced call through a session does: params without _meta (most
// calls), with a caller's _meta, and with a caller's trace context in it (which is read
// again to take it out).
func BenchmarkMetaParams(b *testing.B) {
	m := tracing.Meta{Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	for _, c := range []struct{ name, params string }{
		{"no-meta", `{"name":"search_notes","arguments":{"q":"tracing cost","limit":10}}`},
		{"meta", `{"name":"search_notes","arguments":{"q":"tracing cost","limit":10},"_meta":{"progressToken":7}}`},
		{"traced-meta", `{"name":"search_notes","arguments":{"q":"tracing cost","limit":10},"_meta":{"progressToken":7,"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			params := json.RawMessage(c.params)
			read, err := mcpmsg.DecodeParams(params)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for range b.N {
				if _, err := tracing.MetaParams(params, read.MetaEnd, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMetaOfContext measures reading the trace context to send from a span's
// context, with baggage passed through.
func BenchmarkMetaOfContext(b *testing.B) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{1}, SpanID: [8]byte{2}, TraceFlags: trace.FlagsSampled})
	bag, _ := baggage.Parse("tenant=acme")
	ctx := baggage.ContextWithBaggage(trace.ContextWithSpanContext(context.Background(), sc), bag)
	b.ReportAllocs()
	for range b.N {
		if m := tracing.MetaOfContext(ctx); m.Traceparent == "" {
			b.Fatal("no traceparent")
		}
	}
}
