package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// BenchmarkCallSpans measures the gateway's own tracing work on one tools/call of a
// client session, as session.request and call.finish do it, with every trace sampled
// into a batch span processor whose exporter drops the spans (BenchmarkTracingCost's
// provider): the front door's times, the server span with its authentication,
// authorization and policy children, the upstream client span, the trace context
// spliced into params._meta and set in the upstream request's headers. It measures
// the helpers apart from a round trip, whose noise hides them:
//
//	go test -run '^$' -bench CallSpans -benchtime 20000x -count 5 ./gateway/
func BenchmarkCallSpans(b *testing.B) {
	testutil.TraceEverything(b)
	g := &Gateway{}
	caller := &identity.Caller{Username: "system:serviceaccount:team-a:agent"}
	key := connector.Key{Namespace: "team-a", Name: "notes"}
	t := target{key: key, caller: caller, session: tracing.SessionID("session-id"), version: "2025-11-25"}
	params := []byte(`{"name":"search_notes","arguments":{"q":"tracing cost"}}`)
	id, err := jsonrpc.MakeID(float64(7))
	if err != nil {
		b.Fatal(err)
	}
	read, err := mcpmsg.DecodeParams(params)
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/mcp/namespaces/team-a/servers/notes", nil)
	b.ReportAllocs()
	for range b.N {
		// The front door.
		fr, forget := g.fronts.begin(r)
		ft := frontTraceOf(fr.Context())
		ft.authenticated = time.Now()
		ft.authorizing, ft.authorized = true, time.Now()
		ft.id = id
		// session.request.
		ctx, span, rec := g.startCallSpan(context.Background(), requestHeader(&mcp.RequestExtra{Header: fr.Header}),
			tracing.Meta{}, "tools/call", id, t, "search_notes", true)
		rec.decided(time.Now(), "")
		ctx, client, clientRec := startUpstreamSpan(ctx, "tools/call", "search_notes", key)
		if _, err := tracing.MetaParams(params, read.MetaEnd, tracing.MetaOfContext(ctx)); err != nil {
			b.Fatal(err)
		}
		// The connector's request upstream.
		tracing.InjectHeader(ctx, http.Header{"Content-Type": {"application/json"}})
		// The answer: the audit line's trace id, and call.finish.
		if span.SpanContext().TraceID().String() == "" {
			b.Fatal("no trace id")
		}
		endCallSpan(client, clientRec, outcomeOK)
		endCallSpan(span, rec, outcomeOK)
		forget()
	}
}
