package catalog_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// TestCatalogueMCPRequestsAreTraced calls the catalogue's MCP endpoint with a trace
// context in _meta, in both eras, and finds the catalogue's server span in that trace,
// named after its tool.
func TestCatalogueMCPRequestsAreTraced(t *testing.T) {
	exp := testutil.RecordSpans(t)

	c := startCatalog(t, catalog.AuthTokenReview)
	ns := newNamespace(t)
	token := newCaller(t, ns, "agent", true)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, version := range []string{statelessEra, sessionEra} {
		exp.Reset()
		session := mcpSessionAt(t, c, token, version)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "list_servers", Arguments: map[string]any{},
			Meta: mcp.Meta{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}})
		cancel()
		if err != nil || res.IsError {
			t.Fatalf("%s: list_servers: %v %+v", version, err, res)
		}
		found := false
		for _, s := range exp.GetSpans() {
			if s.Name == "tools/call list_servers" && s.SpanKind == trace.SpanKindServer && s.SpanContext.TraceID().String() == traceID {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no server span tools/call list_servers in the caller's trace: %v", version, exp.GetSpans())
		}
	}
}
