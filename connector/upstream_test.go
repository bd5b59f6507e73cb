package connector

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// openUpstream opens an Upstream with the server pool holds for key and initializes it
// as a client would through the gateway.
func openUpstream(t *testing.T, p *Pool, key Key) *Upstream {
	t.Helper()
	u, err := p.OpenUpstream(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	init := &jsonrpc.Request{ID: mustID(t, float64(1)), Method: "initialize",
		Params: json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}`)}
	if err := u.Write(t.Context(), init); err != nil {
		t.Fatal(err)
	}
	if resp := readResponse(t, u); resp.Error != nil {
		t.Fatalf("initialize: %v", resp.Error)
	}
	if err := u.Write(t.Context(), &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	return u
}

func mustID(t *testing.T, v any) jsonrpc.ID {
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// readResponse reads until a response arrives, within the test's patience.
func readResponse(t *testing.T, u *Upstream) *jsonrpc.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	for {
		msg, err := u.Read(ctx)
		if err != nil {
			t.Fatalf("reading from the upstream: %v", err)
		}
		if resp, ok := msg.(*jsonrpc.Response); ok {
			return resp
		}
	}
}

// After initialize, every request of an Upstream carries the negotiated protocol
// version, which go-sdk sets itself only for an mcp.Client's connection.
func TestUpstreamRequestsCarryTheNegotiatedProtocolVersion(t *testing.T) {
	var log headerLog
	srv := startServer(t, log.wrap(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newServer(1, nil) }, nil)))
	p := testPool(t)
	key := Key{Namespace: "ns", Name: "versioned"}
	p.Ensure(key, fastConfig(srv.URL))
	waitReady(t, p, key)
	before := log.count()

	u := openUpstream(t, p, key)
	call := &jsonrpc.Request{ID: mustID(t, float64(2)), Method: "tools/list", Params: json.RawMessage(`{}`)}
	if err := u.Write(t.Context(), call); err != nil {
		t.Fatal(err)
	}
	if resp := readResponse(t, u); resp.Error != nil {
		t.Fatalf("tools/list: %v", resp.Error)
	}
	log.mu.Lock()
	seen := slices.Clone(log.headers[before:])
	log.mu.Unlock()
	checked := 0
	for i, h := range seen {
		if h.Get("Mcp-Session-Id") == "" {
			continue // initialize, before the session exists, carries none
		}
		checked++
		if got := h.Get("Mcp-Protocol-Version"); got != "2025-11-25" {
			t.Errorf("request %d of the session: MCP-Protocol-Version %q, want 2025-11-25", i, got)
		}
	}
	if checked < 2 { // notifications/initialized and tools/list at least
		t.Errorf("only %d requests of the upstream session reached the server", checked)
	}
}

// A call the server does not answer within its timeout is answered by the Upstream
// with a Timeout error, read like any answer; the Upstream stays usable.
func TestAnUnansweredCallIsAnsweredWithATimeout(t *testing.T) {
	s := newServer(0, nil)
	release := make(chan struct{})
	mcp.AddTool(s, &mcp.Tool{Name: "hang"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		select {
		case <-ctx.Done():
		case <-release:
		}
		return &mcp.CallToolResult{}, nil, nil
	})
	addTool(s, "echo")
	srv := serveStreamable(t, s, nil)
	p := testPool(t)
	key := Key{Namespace: "ns", Name: "hung"}
	cfg := fastConfig(srv.URL)
	cfg.Timeout = 300 * time.Millisecond
	p.Ensure(key, cfg)
	waitReady(t, p, key)

	u := openUpstream(t, p, key)
	// First of all cleanups: closing the session and the server both wait for the handler.
	t.Cleanup(func() { close(release) })
	call := &jsonrpc.Request{ID: mustID(t, float64(7)), Method: "tools/call", Params: json.RawMessage(`{"name":"hang","arguments":{}}`)}
	if err := u.Write(t.Context(), call); err != nil {
		t.Fatal(err)
	}
	resp := readResponse(t, u)
	if resp.ID != call.ID || resp.Error == nil || !strings.Contains(resp.Error.Error(), ReasonTimeout) {
		t.Fatalf("answer to the hung call: %+v; want a Timeout error for id 7", resp)
	}
	echo := &jsonrpc.Request{ID: mustID(t, float64(8)), Method: "tools/call", Params: json.RawMessage(`{"name":"echo","arguments":{"text":"still here"}}`)}
	if err := u.Write(t.Context(), echo); err != nil {
		t.Fatal(err)
	}
	if resp := readResponse(t, u); resp.Error != nil || !strings.Contains(string(resp.Result), "still here") {
		t.Errorf("a call after the timeout: %+v", resp)
	}
}
