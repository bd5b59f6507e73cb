package tracing_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

const (
	headerParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	metaParent   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)

// TestMetaWinsOverTheHeaderAndNonsenseIsIgnored reads a request's trace context as the
// gateway does: the header first, then _meta over it; malformed values change nothing.
func TestMetaWinsOverTheHeaderAndNonsenseIsIgnored(t *testing.T) {
	header := http.Header{"Traceparent": {headerParent}}
	cases := []struct {
		name   string
		header http.Header
		meta   tracing.Meta
		want   string // trace id, "" for none
	}{
		{"header alone", header, tracing.Meta{}, "0af7651916cd43dd8448eb211c80319c"},
		{"_meta alone", nil, tracing.Meta{Traceparent: metaParent}, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"both: _meta wins", header, tracing.Meta{Traceparent: metaParent}, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"malformed _meta: the header's", header, tracing.Meta{Traceparent: "00-xyz"}, "0af7651916cd43dd8448eb211c80319c"},
		{"malformed both: none", http.Header{"Traceparent": {"garbage"}}, tracing.Meta{Traceparent: "ff-" + strings.Repeat("0", 55)}, ""},
		{"all-zero ids: none", nil, tracing.Meta{Traceparent: "00-" + strings.Repeat("0", 32) + "-" + strings.Repeat("0", 16) + "-01"}, ""},
	}
	for _, c := range cases {
		ctx := c.meta.Context(tracing.HeaderContext(context.Background(), c.header))
		got := ""
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			got = sc.TraceID().String()
		}
		if got != c.want {
			t.Errorf("%s: trace %q, want %q", c.name, got, c.want)
		}
	}
}

// TestMetaParamsReplacesOnlyTheTraceContext splices a new trace context into params a
// caller sent: the caller's traceparent, tracestate and baggage give way (in any
// spelling of their names) to what is sent instead, which is what the gateway parsed of
// them (no baggage when none parsed), and every other member is what it was, as a
// strict reader reads it.
func TestMetaParamsReplacesOnlyTheTraceContext(t *testing.T) {
	in := `{"name":"search_notes","arguments":{"q":"x","_meta":{"traceparent":"keep-me"}},` +
		`"_meta":{"progressToken":7,"TraceParent":"old","tracestate":"old=1","baggage":"tenant=acme","other":{"a":[1,2]}}}`
	out := metaParams(t, in, tracing.Meta{Traceparent: metaParent})
	p, err := mcpmsg.DecodeParams(out)
	if err != nil {
		t.Fatalf("the result is not params a strict reader accepts: %v\n%s", err, out)
	}
	if p.Name != "search_notes" || string(p.ProgressToken) != "7" || p.Traceparent != metaParent || p.Tracestate != "" || p.Baggage != "" {
		t.Errorf("decoded %+v from %s", p, out)
	}
	withBaggage := metaParams(t, in, tracing.Meta{Traceparent: metaParent, Baggage: "tenant=blue"})
	if p, err := mcpmsg.DecodeParams(withBaggage); err != nil || p.Baggage != "tenant=blue" {
		t.Errorf("with baggage to send, decoded %+v, %v from %s", p, err, withBaggage)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	meta := got["_meta"].(map[string]any)
	if _, ok := meta["TraceParent"]; ok {
		t.Errorf("the caller's TraceParent is still there: %s", out)
	}
	if args, _ := json.Marshal(got["arguments"]); string(args) != `{"_meta":{"traceparent":"keep-me"},"q":"x"}` {
		t.Errorf("arguments changed: %s", args)
	}
	if other, _ := json.Marshal(meta["other"]); string(other) != `{"a":[1,2]}` {
		t.Errorf("_meta.other changed: %s", other)
	}

	// Every member but _meta is sent as the caller wrote it, the bytes that were judged.
	arguments := `"arguments" : {"q":"caf\u00e9", "n":1.50}`
	spaced := "{\n  \"name\":\"search_notes\",\n  " + arguments + "\n}"
	for _, in := range []string{spaced, `{"_meta":{"progressToken":"p"},` + arguments + `}`} {
		out := metaParams(t, in, tracing.Meta{Traceparent: metaParent})
		if !strings.Contains(string(out), arguments) {
			t.Errorf("the arguments were rewritten: %s became %s", in, out)
		}
		if p, err := mcpmsg.DecodeParams(out); err != nil || p.Traceparent != metaParent {
			t.Errorf("%s became %s (%+v, %v)", in, out, p, err)
		}
	}

	// _meta spelled with an escape is the _meta a strict reader finds: its trace context
	// gives way too.
	escaped := `{"name":"x","\u005fmeta":{"traceparent":"` + headerParent + `","progressToken":1}}`
	out = metaParams(t, escaped, tracing.Meta{Traceparent: metaParent})
	if p, err := mcpmsg.DecodeParams(out); err != nil || p.Traceparent != metaParent || string(p.ProgressToken) != "1" ||
		strings.Contains(string(out), headerParent) {
		t.Errorf("%s became %s (%+v, %v)", escaped, out, p, err)
	}

	// A trace context member whose name is spelled with an escape, or in another case, is
	// the caller's too: it gives way, and no reader finds two.
	for _, name := range []string{`\u0074raceparent`, `TRACEPARENT`, `trace\u0070arent`} {
		in := `{"name":"x","_meta":{"` + name + `":"` + headerParent + `","progressToken":1}}`
		out := metaParams(t, in, tracing.Meta{Traceparent: metaParent})
		if p, err := mcpmsg.DecodeParams(out); err != nil || p.Traceparent != metaParent || string(p.ProgressToken) != "1" ||
			strings.Contains(string(out), headerParent) {
			t.Errorf("%s became %s (%+v, %v)", in, out, p, err)
		}
	}

	// No params, or no _meta: one is added.
	for _, in := range []string{``, `{}`, ` { } `, `{"name":"x","_meta":null}`, `{"name":"x","_meta":{}}`, `{"_meta":{ }}`} {
		out := metaParams(t, in, tracing.Meta{Traceparent: metaParent, Baggage: "k=v"})
		if p, err := mcpmsg.DecodeParams(out); err != nil || p.Traceparent != metaParent || p.Baggage != "k=v" {
			t.Errorf("%q became %s (%+v, %v)", in, out, p, err)
		}
	}

	// A caller's tracestate, which the gateway passes on as parsed, may hold what JSON
	// must escape.
	state := `vendor=a"b\c`
	out = metaParams(t, `{"name":"x"}`, tracing.Meta{Traceparent: metaParent, Tracestate: state})
	if p, err := mcpmsg.DecodeParams(out); err != nil || p.Tracestate != state {
		t.Errorf("tracestate %q became %s (%+v, %v)", state, out, p, err)
	}
}

// metaParams splices m into params in as a session does, where mcpmsg's reading of
// them says it goes, and fails the test unless reading them anew, as MetaParams does
// where mcpmsg found no such place, gives the same params.
func metaParams(t *testing.T, in string, m tracing.Meta) json.RawMessage {
	t.Helper()
	read, err := mcpmsg.DecodeParams(json.RawMessage(in))
	if err != nil {
		t.Fatalf("%s: %v", in, err)
	}
	out, err := tracing.MetaParams(json.RawMessage(in), read.MetaEnd, m)
	if err != nil {
		t.Fatalf("%s: %v", in, err)
	}
	reread, err := tracing.MetaParams(json.RawMessage(in), mcpmsg.MetaEnd{}, m)
	if err != nil {
		t.Fatalf("%s, read anew: %v", in, err)
	}
	var spliced, rewritten any
	if err := json.Unmarshal(out, &spliced); err != nil {
		t.Fatalf("%s became %s, which is not JSON: %v", in, out, err)
	}
	if err := json.Unmarshal(reread, &rewritten); err != nil {
		t.Fatalf("%s became %s read anew, which is not JSON: %v", in, reread, err)
	}
	if !reflect.DeepEqual(spliced, rewritten) {
		t.Errorf("%s became %s where mcpmsg's reading put the trace context, and %s read anew", in, out, reread)
	}
	return out
}

// TestInjectMetaSendsOursAndPassesBaggageThrough builds the _meta of an outgoing
// request from the client's: the trace context is the span's, the client's baggage goes
// on, nothing else changes, and the client's map is left alone.
func TestInjectMetaSendsOursAndPassesBaggageThrough(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: [16]byte{1}, SpanID: [8]byte{2}, TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	client := map[string]any{"traceparent": headerParent, "tracestate": "x=1", "progressToken": "p"}
	out := tracing.InjectMeta(ctx, client)
	if out["traceparent"] != "00-01000000000000000000000000000000-0200000000000000-01" || out["progressToken"] != "p" {
		t.Errorf("got %v", out)
	}
	if _, ok := out["tracestate"]; ok {
		t.Errorf("the client's tracestate went on: %v", out)
	}
	if client["traceparent"] != headerParent {
		t.Errorf("the client's map was modified")
	}
	b, _ := baggage.Parse("tenant=acme")
	out = tracing.InjectMeta(baggage.ContextWithBaggage(ctx, b), nil)
	if out["baggage"] != "tenant=acme" {
		t.Errorf("baggage not passed through: %v", out)
	}
	if got := tracing.InjectMeta(context.Background(), map[string]any{"a": 1}); len(got) != 1 || got["a"] != 1 {
		t.Errorf("without a trace context _meta changed: %v", got)
	}
}

// TestSetupIsOffWithoutAnExporter turns tracing on only when an exporter is
// configured, and refuses what it cannot do.
func TestSetupIsOffWithoutAnExporter(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"} {
		t.Setenv(k, "")
	}
	p, err := tracing.Setup(context.Background(), tracing.Options{SamplingRatio: -1})
	if err != nil || p != nil {
		t.Fatalf("with nothing configured: %v, %v; want off", p, err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	if p, err := tracing.Setup(context.Background(), tracing.Options{SamplingRatio: -1}); err != nil || p != nil {
		t.Fatalf("with OTEL_TRACES_EXPORTER=none: %v, %v; want off", p, err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if _, err := tracing.Setup(context.Background(), tracing.Options{SamplingRatio: -1}); err == nil {
		t.Fatal("an exporter it does not have was accepted")
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	if _, err := tracing.Setup(context.Background(), tracing.Options{SamplingRatio: 2}); err == nil {
		t.Fatal("a sampling ratio of 2 was accepted")
	}
}

func TestClipToKeepsValidUTF8UnderTheBoundAndSaysItClipped(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
	}{
		{"short", "search_notes", 128},
		{"long", strings.Repeat("x", 4<<20), 128},
		{"multibyte at the cut", strings.Repeat("é", 300), 128},
		{"invalid", "a\xffb\xfe" + strings.Repeat("\xff", 200), 128},
		{"invalid and short, growing", strings.Repeat("\xff", 100), 128},
		{"tiny bound", strings.Repeat("x", 50), 8},
	} {
		got := tracing.ClipTo(tc.in, tc.n)
		if len(got) > tc.n || !utf8.ValidString(got) {
			t.Errorf("%s: ClipTo gave %d bytes (valid UTF-8: %v), want at most %d of valid UTF-8", tc.name, len(got), utf8.ValidString(got), tc.n)
		}
		if clipped := len(tc.in) > tc.n || !utf8.ValidString(tc.in); clipped != (got != tc.in) {
			t.Errorf("%s: ClipTo(%d bytes) = %q", tc.name, len(tc.in), got)
		}
		if len(tc.in) > tc.n && tc.n >= 64 && !strings.Contains(got, "clipped from") {
			t.Errorf("%s: %q does not say it was clipped", tc.name, got)
		}
	}
	if got := tracing.ClipTo("search_notes", 128); got != "search_notes" {
		t.Errorf("a short name was changed to %q", got)
	}
}
