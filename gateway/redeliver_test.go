package gateway_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A server that asks the client something during its first call, before the client has
// opened its standalone stream, does not lose the question: it reaches the client once
// the stream is open.
func TestAServersQuestionWaitsForTheClientsStream(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	mcp.AddTool(h.upstream.mcp, &mcp.Tool{Name: "ask"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		// Nobody answers: the question only has to arrive. The bound lets the server
		// shut down at the end of the test.
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Which notebook?",
			RequestedSchema: &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"name": {Type: "string"}}}})
		return &mcp.CallToolResult{}, nil, err
	})

	init := post(t, h.url(), "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"1"}}}`)
	id := init.Header.Get("Mcp-Session-Id")
	_ = init.Body.Close()
	post(t, h.url(), id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	// The call goes out with no standalone stream open; its answer never comes here
	// (the question is unanswered), so it runs in the background.
	go func() {
		if resp, err := send(t.Context(), h.url(), id, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask","arguments":{}}}`); err == nil {
			_ = resp.Body.Close()
		}
	}()
	time.Sleep(300 * time.Millisecond) // the server has asked by now, into no stream

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.url(), nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "data:") && strings.Contains(lines.Text(), "elicitation/create") {
			return
		}
	}
	t.Fatalf("the standalone stream ended without the server's question: %v", lines.Err())
}

func send(ctx context.Context, url, sessionID, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if sessionID != "" {
		req.Header.Set("Mcp-Session-Id", sessionID)
	}
	return http.DefaultClient.Do(req)
}

func post(t *testing.T, url, sessionID, body string) *http.Response {
	t.Helper()
	resp, err := send(t.Context(), url, sessionID, body)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A client that never opens its standalone stream still gets its answers at once: the
// server's messages that wait for that stream do not hold up the relay.
func TestMessagesWaitingForTheClientsStreamHoldUpNoAnswer(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: h.url(), DisableStandaloneSSE: true, MaxRetries: -1}, sessionEraClient)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	// A new tool: the server tells every session, on a stream this client never opens.
	mcp.AddTool(h.upstream.mcp, &mcp.Tool{Name: "added"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	time.Sleep(100 * time.Millisecond) // the notification is waiting by now
	for i := range 3 {
		// Well below redeliverPatience, which an answer queued behind the waiting
		// notification would take.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
		cancel()
		if err != nil {
			t.Fatalf("call %d while a notification waits for the client's stream: %v", i, err)
		}
	}
}
