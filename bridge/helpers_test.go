package bridge_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/bridge"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// logSink collects the bridge's log lines for assertions.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) logger(t testing.TB) logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, args)
		l.mu.Unlock()
		if testing.Verbose() {
			t.Log(prefix, args)
		}
	}, funcr.Options{Verbosity: 1})
}

// matching returns the logged lines that contain every one of substrings.
func (l *logSink) matching(substrings ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.lines {
		for _, s := range substrings {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// running is a bridge serving on a loopback port.
type running struct {
	*bridge.Bridge
	url    string // the MCP endpoint
	base   string // scheme and host
	logs   *logSink
	cancel context.CancelFunc
	served chan error
}

// startBridge serves a bridge for opts on 127.0.0.1 until the test ends.
func startBridge(t testing.TB, opts bridge.Options) *running {
	t.Helper()
	logs := &logSink{}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logs.logger(t)
	}
	b, err := bridge.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{
		Bridge: b,
		base:   "http://" + ln.Addr().String(),
		logs:   logs,
		cancel: cancel,
		served: make(chan error, 1),
	}
	r.url = r.base + "/mcp"
	go func() { r.served <- b.Serve(ctx, ln) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop shuts the bridge down the way SIGTERM does and waits for Serve to return.
func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
		r.served <- nil // later calls return at once
	case <-time.After(30 * time.Second):
		t.Error("bridge did not shut down within 30s")
	}
}

// sessionEra pins a go-sdk client to MCP 2025-11-25, the last version with sessions: a
// go-sdk client speaks the sessionless era first to any server that does.
var sessionEra = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

// connect starts a go-sdk client session through the bridge, in the session era.
func (r *running) connect(ctx context.Context) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "bridge-test-client", Version: "v1"}, nil)
	return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.url, MaxRetries: -1}, sessionEra)
}

// connectSessionless connects a go-sdk client through the bridge in the sessionless era
// (2026-07-28): no session, every request on its own.
func (r *running) connectSessionless(t testing.TB, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "bridge-test-client", Version: "v1"}, opts)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.url, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatalf("connecting through the bridge in the sessionless era: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func (r *running) mustConnect(t testing.TB) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := r.connect(ctx)
	if err != nil {
		t.Fatalf("connecting through the bridge: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// get fetches a path of the bridge and returns the status code.
func (r *running) get(t testing.TB, path string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, r.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// callText calls a tool and returns the text of its result.
func callText(ctx context.Context, cs *mcp.ClientSession, tool string, args any) (string, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", err
	}
	var text bytes.Buffer
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return text.String(), errors.New("tool error: " + text.String())
	}
	return text.String(), nil
}

func mustCallText(t testing.TB, cs *mcp.ClientSession, tool string, args any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	text, err := callText(ctx, cs, tool, args)
	if err != nil {
		t.Fatalf("calling %s: %v", tool, err)
	}
	return text
}

// serverEverything returns the argv of the npm reference server in stdio mode.
func serverEverything(t testing.TB) []string {
	t.Helper()
	path, err := testenv.ServerEverything()
	if err != nil {
		t.Fatalf("finding @modelcontextprotocol/server-everything: %v", err)
	}
	return []string{"node", path, "stdio"}
}

// eventually waits, with the tests' one polling loop, until cond holds.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errors.New("it does not hold yet")
	})
}
