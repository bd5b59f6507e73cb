package bridge_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/bridge"
)

// closeCounter is an HTTP client that counts the answers it gets and those that close
// their connection ("Connection: close").
type closeCounter struct {
	answers, closing atomic.Int32
	client           *http.Client
}

func newCloseCounter() *closeCounter {
	c := &closeCounter{}
	c.client = &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err == nil {
			c.answers.Add(1)
			if resp.Close {
				c.closing.Add(1)
			}
		}
		return resp, err
	})}
	return c
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// A draining bridge (its pod leaving the Service) closes the connection of every answer
// outside a session, so a sessionless client's next request dials anew (and its Service
// sends it to a pod that stays) rather than riding a kept-alive connection into the
// bridge's close. Sessions keep their connections: they live and end on this pod.
func TestADrainingBridgeClosesSessionlessConnections(t *testing.T) {
	argv, env := testServerCommand(t)
	r := startBridge(t, bridge.Options{Command: argv, Env: env, GracePeriod: time.Second})
	ctx := testCtx(t)

	connect := func(d *closeCounter, version string) *mcp.ClientSession {
		client := mcp.NewClient(&mcp.Implementation{Name: "bridge-test-client", Version: "v1"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.url, HTTPClient: d.client, MaxRetries: -1, DisableStandaloneSSE: true},
			&mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	sessionless, withSession := newCloseCounter(), newCloseCounter()
	sessionlessClient := connect(sessionless, "2026-07-28")
	sessionClient := connect(withSession, "2025-11-25")
	calls := func(cs *mcp.ClientSession, n int) {
		for range n {
			if got := mustCallText(t, cs, "echo", map[string]any{"message": "hi"}); got != "hi" {
				t.Fatalf("echo = %q", got)
			}
		}
	}
	calls(sessionlessClient, 5)
	calls(sessionClient, 5)
	if n := sessionless.closing.Load() + withSession.closing.Load(); n != 0 {
		t.Fatalf("%d answers closed their connection before the drain, want none", n)
	}
	before, beforeSession := sessionless.answers.Load(), withSession.answers.Load()

	// Asked from anywhere but the pod itself, the drain is refused.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/drain", nil)
	req.RemoteAddr = "192.0.2.10:41000"
	r.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("drain from another address answered %d, want 403", rec.Code)
	}
	if status := get(t, r.base+"/readyz"); status != http.StatusOK {
		t.Fatalf("/readyz answered %d after a refused drain, want 200", status)
	}

	resp, err := http.Post(r.base+"/drain", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("drain from the pod answered %d, want 200", resp.StatusCode)
	}
	if status := get(t, r.base+"/readyz"); status != http.StatusServiceUnavailable {
		t.Fatalf("/readyz answered %d while draining, want 503", status)
	}

	calls(sessionlessClient, 5)
	calls(sessionClient, 5)
	if answers, closing := sessionless.answers.Load()-before, sessionless.closing.Load(); answers < 5 || closing != answers {
		t.Errorf("%d of %d answers to sessionless calls while draining closed their connection, want all", closing, answers)
	}
	if answers, closing := withSession.answers.Load()-beforeSession, withSession.closing.Load(); answers < 5 || closing != 0 {
		t.Errorf("%d of %d answers to a session's calls while draining closed their connection, want none", closing, answers)
	}
}

// get returns the status of a GET of url.
func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
