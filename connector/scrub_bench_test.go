package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// benchResultText is a tools/call result of about 4 KiB as tools return them: JSON text
// inside a text content, full of quotes and newlines that the result escapes.
var benchResultText = func() string {
	var b strings.Builder
	b.WriteString("[\n")
	for i := 0; b.Len() < 4000; i++ {
		fmt.Fprintf(&b, "  {\"id\": %d, \"title\": \"Issue %d: crash in the parser\", \"state\": \"open\", \"labels\": [\"bug\", \"p%d\"]},\n", i, i, i%3)
	}
	b.WriteString("]")
	return b.String()
}()

// BenchmarkUpstreamToolsCall measures one tools/call of a 4 KiB result through an
// Upstream over loopback, the gateway's hot path, with a configured credential to
// scrub.
func BenchmarkUpstreamToolsCall(b *testing.B) {
	s := newServer(0, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "issues"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: benchResultText}}}, nil, nil
	})
	srv := startServer(b, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	p := testPool(b)
	key := Key{Namespace: "ns", Name: "bench"}
	cfg := fastConfig(srv.URL)
	cfg.Headers = []Header{{Name: "Authorization", Value: "Bearer bench-secret-token-0123456789"}}
	p.Ensure(key, cfg)
	waitReady(b, p, key)
	u, err := p.OpenUpstream(b.Context(), key, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = u.Close() }()
	write := func(msg jsonrpc.Message) {
		if err := u.Write(b.Context(), msg); err != nil {
			b.Fatal(err)
		}
	}
	id := func(n int) jsonrpc.ID {
		id, err := jsonrpc.MakeID(float64(n))
		if err != nil {
			b.Fatal(err)
		}
		return id
	}
	write(&jsonrpc.Request{ID: id(1), Method: "initialize",
		Params: json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}`)})
	if _, err := nextResponse(b.Context(), u, id(1)); err != nil {
		b.Fatal(err)
	}
	write(&jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage(`{}`)})
	params := json.RawMessage(`{"name":"issues","arguments":{}}`)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		call := id(100 + i)
		write(&jsonrpc.Request{ID: call, Method: "tools/call", Params: params})
		resp, err := nextResponse(b.Context(), u, call)
		if err != nil || resp.Error != nil || len(resp.Result) < 4000 {
			b.Fatalf("tools/call: %v %v (%d bytes)", err, resp.Error, len(resp.Result))
		}
	}
}
