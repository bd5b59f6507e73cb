package connector

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// waitTimeout bounds every Eventually-style wait in this package's tests.
const waitTimeout = 20 * time.Second

// testPool returns a pool with fast backoff and debounce, closed at cleanup.
func testPool(t testing.TB, mutate ...func(*Options)) *Pool {
	t.Helper()
	opts := Options{
		InitialBackoff: 50 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
		DebounceDelay:  20 * time.Millisecond,
	}
	for _, m := range mutate {
		m(&opts)
	}
	p, err := NewPool(opts)
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// fastConfig is a config with short timeouts for url.
func fastConfig(url string) Config {
	return Config{
		URL:            url,
		Timeout:        2 * time.Second,
		ConnectTimeout: 2 * time.Second,
		HealthCheck:    HealthCheck{Interval: time.Hour, FailureThreshold: 1},
	}
}

// waitFor polls the snapshot of key until cond holds, failing the test at the deadline
// with the last snapshot.
func waitFor(t testing.TB, p *Pool, key Key, what string, cond func(Snapshot) bool) Snapshot {
	t.Helper()
	var last Snapshot
	testutil.Eventually(t, waitTimeout, what+" on "+key.String(), func() error {
		snap, ok := p.Snapshot(key)
		last = snap
		if ok && cond(snap) {
			return nil
		}
		lastErr := "none"
		if snap.LastError != nil {
			lastErr = snap.LastError.Error()
		}
		return fmt.Errorf("last snapshot: state=%s transport=%s protocol=%s tools=%d err=%s failures=%d",
			snap.State, snap.Transport, snap.ProtocolVersion, len(snap.Tools), lastErr, snap.ConsecutiveFailures)
	})
	return last
}

func waitReady(t testing.TB, p *Pool, key Key) Snapshot {
	t.Helper()
	return waitFor(t, p, key, "Ready", func(s Snapshot) bool { return s.State == StateReady })
}

func waitDown(t testing.TB, p *Pool, key Key, reason string) Snapshot {
	t.Helper()
	return waitFor(t, p, key, "Down with "+reason, func(s Snapshot) bool {
		return s.State == StateDown && s.LastError != nil && s.LastError.Reason == reason
	})
}

// newServer returns a go-sdk server offering n tools named tool-000, tool-001, ...
func newServer(n int, opts *mcp.ServerOptions) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "test-server", Version: "1.2.3", Title: "Test Server"}, opts)
	for i := range n {
		addTool(s, fmt.Sprintf("tool-%03d", i))
	}
	return s
}

type echoArgs struct {
	Text string `json:"text" jsonschema:"what to echo"`
}

func addTool(s *mcp.Server, name string) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        name,
		Title:       "Title of " + name,
		Description: "Echoes its input (" + name + ").",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
}

// serveStreamable serves s over Streamable HTTP on a loopback httptest server.
func serveStreamable(t testing.TB, s *mcp.Server, opts *mcp.StreamableHTTPOptions) *httptest.Server {
	t.Helper()
	return startServer(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, opts))
}

// serveSSE serves s over the legacy HTTP+SSE transport.
func serveSSE(t testing.TB, s *mcp.Server) *httptest.Server {
	t.Helper()
	return startServer(t, mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil))
}

// startServer serves h on loopback. Cleanup cuts client connections first: sessions
// hold event streams open, which would otherwise block httptest's Close.
func startServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	return ts
}

// headerLog records the headers of every request a handler sees.
type headerLog struct {
	mu      sync.Mutex
	headers []http.Header
}

func (l *headerLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.headers = append(l.headers, r.Header.Clone())
		l.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (l *headerLog) values(name string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, h := range l.headers {
		out = append(out, h.Values(name)...)
	}
	return out
}

func (l *headerLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.headers)
}

// toolNames returns the names of the snapshot's tools.
func toolNames(s Snapshot) []string {
	names := make([]string, len(s.Tools))
	for i, t := range s.Tools {
		names[i] = t.Name
	}
	return names
}

// nextEvent waits for an event for key, draining others.
func nextEvent(t testing.TB, p *Pool, key Key) {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case ev, ok := <-p.Events():
			if !ok {
				t.Fatal("events channel closed")
			}
			if ev.Key == key {
				return
			}
		case <-timeout:
			t.Fatalf("no event for %s", key)
		}
	}
}

// drainEvents discards queued events.
func drainEvents(p *Pool) {
	// An event is queued just after the snapshot it announces is visible, so one may
	// still be on its way when the caller has seen the state: drain until the queue has
	// been quiet for a moment.
	for {
		select {
		case <-p.Events():
		case <-time.After(100 * time.Millisecond):
			return
		}
	}
}
