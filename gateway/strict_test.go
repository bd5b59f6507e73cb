package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/gateway"
)

// rawSession is a client session on a gateway endpoint driven with hand-written bodies,
// as an attacker sends them.
type rawSession struct {
	t       *testing.T
	url, id string
	version string
}

// openRaw initializes a session at url asking for protocol version.
func openRaw(t *testing.T, url, version string) *rawSession {
	t.Helper()
	s := &rawSession{t: t, url: url, version: version}
	resp := s.send(t.Context(), fmt.Sprintf(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"attacker","version":"1"}}}`, version))
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	s.id = resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || s.id == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	if status, text := s.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); status != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d %s", status, text)
	}
	return s
}

func (s *rawSession) send(ctx context.Context, body string) *http.Response {
	s.t.Helper()
	resp, err := s.trySend(ctx, body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp
}

func (s *rawSession) trySend(ctx context.Context, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+callerToken)
	// The oldest version a client may claim: what go-sdk's transport lets batch.
	req.Header.Set("Mcp-Protocol-Version", "2025-03-26")
	if s.id != "" {
		req.Header.Set("Mcp-Session-Id", s.id)
	}
	return http.DefaultClient.Do(req)
}

// post sends body and returns the HTTP status and everything the answer carried.
func (s *rawSession) post(body string) (int, string) {
	s.t.Helper()
	resp := s.send(s.t.Context(), body)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func denyDelete(obj *mcpv1alpha1.MCPServer) {
	obj.Spec.Tools = &mcpv1alpha1.ToolFilter{Deny: []string{"delete_*"}}
}

// A message that a case-insensitive, last-wins reader and an exact reader read as two
// different tools never reaches the server: the gateway refuses it whole.
func TestADeniedToolCannotRunUnderAnAllowedName(t *testing.T) {
	h := newHarness(t, harnessOptions{server: denyDelete})
	s := openRaw(t, h.url(), "2025-11-25")
	for _, params := range []string{
		`{"name":"delete_all","NAME":"echo","arguments":{"text":"x"}}`,
		`{"name":"delete_all","Name":"echo","arguments":{"text":"x"}}`,
		`{"name":"delete_all","nAmE":"echo","arguments":{"text":"x"}}`,
		`{"NAME":"delete_all","arguments":{"text":"x"}}`,
		`{"name":"echo","n\u0061me":"delete_all","arguments":{"text":"x"}}`,
	} {
		status, text := s.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":` + params + `}`)
		if status != http.StatusBadRequest || !strings.Contains(text, "invalid JSON-RPC message") {
			t.Errorf("tools/call with params %s: %d %s; want 400, an invalid message", params, status, text)
		}
		if strings.Contains(text, "deleted") {
			t.Errorf("tools/call with params %s ran delete_all", params)
		}
	}
	if n := h.upstream.calls("tools/call"); n != 0 {
		t.Errorf("the server received %d tools/call; want none", n)
	}
	if lines := h.audit.matching(`"outcome"="ok"`); len(lines) != 0 {
		t.Errorf("the audit log records calls that never ran: %q", lines)
	}
	// The session is still of use: a plain call is judged and relayed as before.
	if status, text := s.post(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delete_all","arguments":{}}}`); !strings.Contains(text, "denied") {
		t.Errorf("a plain call of a denied tool: %d %s", status, text)
	}
}

// The toolset endpoint reads client messages through the same strict decoding.
func TestAToolsetRefusesMessagesReadersCouldReadTwoWays(t *testing.T) {
	h := newToolsetHarness(t, nil)
	s := openRaw(t, h.url(), "2025-11-25")
	status, text := s.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"notes_echo","NAME":"notes_delete_all","arguments":{"text":"x"}}}`)
	if status != http.StatusBadRequest || !strings.Contains(text, "differ only in case") {
		t.Errorf("tools/call with two names: %d %s; want 400", status, text)
	}
	if n := h.notes.calls("tools/call"); n != 0 {
		t.Errorf("the origin received %d tools/call; want none", n)
	}
}

// A batch is no way around requestsPerSecond: a session of a version without batches
// refuses them whatever its requests' version header claims, and one of an older version
// charges every message of a batch as if it came alone.
func TestBatchesAreRefusedOrChargedPerMessage(t *testing.T) {
	h := newHarness(t, harnessOptions{server: func(obj *mcpv1alpha1.MCPServer) {
		obj.Spec.Gateway = &mcpv1alpha1.GatewaySpec{RequestsPerSecond: 2}
	}})
	batch := func(n int) string {
		calls := make([]string, n)
		for i := range calls {
			calls[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`, 100+i)
		}
		return "[" + strings.Join(calls, ",") + "]"
	}

	current := openRaw(t, h.url(), "2025-11-25")
	time.Sleep(2 * time.Second) // the rate's burst back
	if status, text := current.post(batch(20)); status != http.StatusBadRequest || !strings.Contains(text, "batches are not part of MCP 2025-11-25") {
		t.Errorf("a batch in a 2025-11-25 session: %d %s; want 400", status, text)
	}
	if n := h.upstream.calls("tools/call"); n != 0 {
		t.Fatalf("the server received %d tools/call from a refused batch", n)
	}

	old := openRaw(t, h.url(), "2025-03-26")
	time.Sleep(2 * time.Second)
	if status, text := old.post(batch(20)); status != http.StatusTooManyRequests {
		t.Errorf("a batch of 20 calls at 2 requests per second: %d %s; want 429", status, text)
	}
	if n := h.upstream.calls("tools/call"); n != 0 {
		t.Errorf("the server received %d tools/call beyond the rate", n)
	}
}

// A request id that is already waiting for an answer is refused: it would slip past
// MaxPendingCalls, and its answer could be taken for the other's.
func TestARepeatedRequestIDIsRefused(t *testing.T) {
	h := newHarness(t, harnessOptions{server: denyDelete, gateway: func(o *gateway.Options) { o.MaxPendingCalls = 4 }})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	mcp.AddTool(h.upstream.mcp, &mcp.Tool{Name: "slow"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &mcp.CallToolResult{}, nil, nil
	})

	// In one batch, a list and a slow call under one id: the list's answer must not be
	// taken for the call's, nor the call's for the list's.
	old := openRaw(t, h.url(), "2025-03-26")
	status, text := old.post(`[{"jsonrpc":"2.0","id":7,"method":"tools/list"},{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow"}}]`)
	if status != http.StatusBadRequest || strings.Contains(text, "delete_all") {
		t.Errorf("a batch of two requests with id 7: %d %s; want 400", status, text)
	}

	// Across requests: a call whose client gave up is still pending at the server, and
	// its id is not free again until the server answers.
	s := openRaw(t, h.url(), "2025-11-25")
	var wg sync.WaitGroup
	for range 8 {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		wg.Go(func() {
			defer cancel()
			if resp, err := s.trySend(ctx, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow"}}`); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
		time.Sleep(400 * time.Millisecond)
	}
	wg.Wait()
	if n := h.upstream.calls("tools/call"); n != 1 {
		t.Errorf("8 calls under id 7, each given up while the first was pending: the server received %d; want 1", n)
	}
}

// Toolset sessions keep MaxPendingCalls too.
func TestAToolsetSessionKeepsMaxPendingCalls(t *testing.T) {
	h := newToolsetHarness(t, func(o *gateway.Options) { o.MaxPendingCalls = 4 })
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	mcp.AddTool(h.notes.mcp, &mcp.Tool{Name: "slow"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &mcp.CallToolResult{}, nil, nil
	})
	cs, err := h.connect(callerToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	toolNames(t, cs) // lists the origins once, so calls go straight to them
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	for range 10 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes_slow"})
			if err != nil && strings.Contains(err.Error(), "waiting for an answer") {
				mu.Lock()
				refused++
				mu.Unlock()
			}
		})
	}
	time.Sleep(time.Second)
	inFlight := h.notes.calls("tools/call")
	once.Do(func() { close(release) })
	wg.Wait()
	if inFlight > 4 || refused < 6 {
		t.Errorf("10 slow calls at once with MaxPendingCalls 4: %d reached the origin, %d were refused; want at most 4 and at least 6", inFlight, refused)
	}
}
