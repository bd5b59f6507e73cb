package bridge_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/bridge"
)

// heldCall is a call to the helper server's block tool, in flight until release.
type heldCall struct {
	release string
	result  chan error
}

// holdCall starts a block call on cs and returns once the server is running it.
func holdCall(t *testing.T, cs *mcp.ClientSession) *heldCall {
	t.Helper()
	dir := t.TempDir()
	h := &heldCall{release: filepath.Join(dir, "release"), result: make(chan error, 1)}
	started := filepath.Join(dir, "started")
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		text, err := callText(ctx, cs, "block", map[string]any{"started": started, "release": h.release})
		if err == nil && text != "released" {
			err = io.ErrUnexpectedEOF
		}
		h.result <- err
	}()
	eventually(t, 10*time.Second, "the held call to reach the server", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	t.Cleanup(func() { _ = os.WriteFile(h.release, nil, 0o600) })
	return h
}

// finish releases the call and returns its outcome.
func (h *heldCall) finish(t *testing.T) error {
	t.Helper()
	if err := os.WriteFile(h.release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-h.result:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the held call did not return after its release")
		return nil
	}
}

// metric returns the value of an unlabelled metric on the bridge's /metrics.
func (r *running) metric(t *testing.T, name string) string {
	t.Helper()
	resp, err := http.Get(r.base + "/metrics") //nolint:noctx // a loopback test server
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(data)) {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			return value
		}
	}
	t.Fatalf("no metric %s in:\n%s", name, data)
	return ""
}

// Clients that never send DELETE (most of them) must not lock later clients out: at the
// limit the least recently used idle session makes room, and a session with a call in
// flight is never the one.
func TestAbandonedSessionsLockNoClientOut(t *testing.T) {
	for _, mode := range []bridge.SessionMode{bridge.PerSession, bridge.Shared} {
		t.Run(string(mode), func(t *testing.T) { testAbandonedSessionsLockNoClientOut(t, mode) })
	}
}

func testAbandonedSessionsLockNoClientOut(t *testing.T, mode bridge.SessionMode) {
	opts := helperOptions(t)
	opts.MaxSessions = 4
	opts.SessionMode = mode
	r := startBridge(t, opts)

	busy := r.mustConnect(t)
	busyPID := pidOf(t, r, busy)
	held := holdCall(t, busy)

	var abandoned []*mcp.ClientSession
	for i := range 100 {
		cs := r.mustConnect(t) // closed only when the test ends: abandoned
		want := "client " + string(rune('A'+i%26))
		if got := mustCallText(t, cs, "echo", map[string]any{"message": want}); got != want {
			t.Fatalf("client %d: echo = %q, want %q", i, got, want)
		}
		abandoned = append(abandoned, cs)
	}

	if err := held.finish(t); err != nil {
		t.Errorf("the call in flight through 100 new sessions: %v", err)
	}
	if pidOf(t, r, busy) != busyPID {
		t.Error("the busy session's process changed")
	}
	// The first abandoned session was evicted; its client learns on its next request.
	assertSessionGone(t, r, abandoned[0])
	if got := mustCallText(t, abandoned[99], "echo", map[string]any{"message": "latest"}); got != "latest" {
		t.Errorf("the newest session: echo = %q", got)
	}
	// 4 slots: the busy session and 3 others fill them, each later one evicts one.
	if got := r.metric(t, "switchboard_bridge_evictions_total"); got != "97" {
		t.Errorf("switchboard_bridge_evictions_total = %s, want 97", got)
	}
	if got := r.metric(t, "switchboard_bridge_sessions"); got != "4" {
		t.Errorf("switchboard_bridge_sessions = %s, want 4", got)
	}
	if n := len(r.logs.matching("Session ended", "session evicted")); n != 97 {
		t.Errorf("%d sessions ended as evicted, want 97", n)
	}
}

// Only when every session has a call in flight is a new session refused, with a 503 any
// client can read.
func TestNewSessionIsRefusedOnlyWhenEverySessionIsBusy(t *testing.T) {
	opts := helperOptions(t)
	opts.MaxSessions = 1
	r := startBridge(t, opts)
	busy := r.mustConnect(t)
	held := holdCall(t, busy)

	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, r.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(data), "too many sessions: each of the 1 sessions has a request in flight") {
		t.Errorf("with every session busy: %d %q (Retry-After %q), want 503 saying why", resp.StatusCode, data, resp.Header.Get("Retry-After"))
	}
	if got := r.metric(t, "switchboard_bridge_refused_sessions_total"); got != "1" {
		t.Errorf("switchboard_bridge_refused_sessions_total = %s, want 1", got)
	}

	// Once the call returns, the idle session makes room for the next client.
	if err := held.finish(t); err != nil {
		t.Fatalf("the held call: %v", err)
	}
	// The client may see the answer a moment before the bridge's handler has returned.
	var next *mcp.ClientSession
	eventually(t, 10*time.Second, "a new session once the call returned", func() bool {
		cs, err := r.connect(context.Background())
		if err == nil {
			t.Cleanup(func() { _ = cs.Close() })
			next = cs
		}
		return err == nil
	})
	if got := mustCallText(t, next, "echo", map[string]any{"message": "in"}); got != "in" {
		t.Errorf("echo = %q", got)
	}
	assertSessionGone(t, r, busy)
}

// A subscriptions/listen stream (what the gateway opens in place of a standalone GET) lasts
// as long as its session, like a GET: it does not keep the session from being evicted.
func TestAListenStreamIsNoRequestInFlight(t *testing.T) {
	opts := helperOptions(t)
	opts.MaxSessions = 1
	r := startBridge(t, opts)

	init := r.do(t, http.MethodPost, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	id := init.header.Get("Mcp-Session-Id")
	if init.status != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d %q", init.status, init.body)
	}
	if resp := r.do(t, http.MethodPost, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil); resp.status != http.StatusAccepted {
		t.Fatalf("initialized: %d %q", resp.status, resp.body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"subscriptions/listen","params":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	// The response headers come with the first event, which the held call never sends.
	streamEnd := make(chan string, 1)
	go func() {
		listen, err := http.DefaultClient.Do(req)
		if err != nil {
			streamEnd <- err.Error()
			return
		}
		defer func() { _ = listen.Body.Close() }()
		data, _ := io.ReadAll(listen.Body)
		streamEnd <- fmt.Sprintf("%d %s", listen.StatusCode, data)
	}()
	eventually(t, 10*time.Second, "the listen call to reach the session", func() bool { return r.PendingCalls(id) == 1 })

	next := r.mustConnect(t)
	if got := mustCallText(t, next, "echo", map[string]any{"message": "room"}); got != "room" {
		t.Errorf("echo = %q", got)
	}
	// The evicted session's stream ends, carrying the reason as the listen call's answer.
	select {
	case got := <-streamEnd:
		if !strings.HasPrefix(got, "200 ") || !strings.Contains(got, "session evicted") {
			t.Errorf("the listen stream ended with %q, want the eviction as its answer", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the evicted session's listen stream did not end")
	}
}
