package connector_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/egress"
)

// seenRequest is what one request to a capture server carried of the session headers
// and credentials, and the session id the response issued.
type seenRequest struct {
	sessionID, issued                  string
	protocolVersion, lastEventID, auth bool
}

// headerCapture records, per request, the session headers and credentials it carried.
type headerCapture struct {
	mu   sync.Mutex
	seen []seenRequest
}

func (c *headerCapture) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := seenRequest{
			sessionID:       r.Header.Get("Mcp-Session-Id"),
			protocolVersion: r.Header.Get("Mcp-Protocol-Version") != "",
			lastEventID:     r.Header.Get("Last-Event-ID") != "",
			auth:            r.Header.Get("Authorization") != "",
		}
		if r.Method == http.MethodGet {
			// The standalone stream does not return while the session lives.
			c.add(req)
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
		req.issued = w.Header().Get("Mcp-Session-Id")
		c.add(req)
	})
}

func (c *headerCapture) add(r seenRequest) {
	c.mu.Lock()
	c.seen = append(c.seen, r)
	c.mu.Unlock()
}

func (c *headerCapture) requests() []seenRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]seenRequest(nil), c.seen...)
}

// issued returns the session ids the server's responses issued.
func (c *headerCapture) issued() map[string]bool {
	out := map[string]bool{}
	for _, r := range c.requests() {
		if r.issued != "" {
			out[r.issued] = true
		}
	}
	return out
}

// sessionServer serves a one-tool go-sdk server speaking only 2025-11-25, the last
// protocol version with sessions.
func sessionServer() http.Handler {
	s := mcp.NewServer(&mcp.Implementation{Name: "sessions", Version: "1"}, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	mcp.AddTool(s, &mcp.Tool{Name: "ping"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}

// TestSessionHeadersDoNotFollowARedirectToAnotherOrigin is issue 12's "also close": a
// server whose session is established starts redirecting to another origin, which the
// policy allows. The other origin must not receive the session id, the protocol version
// negotiated with the first server, an event id, or the credentials.
func TestSessionHeadersDoNotFollowARedirectToAnotherOrigin(t *testing.T) {
	other := &headerCapture{}
	elsewhere := serve(t, httptest.NewServer(other.wrap(sessionServer())))

	var redirecting atomic.Bool
	home := &headerCapture{}
	inner := home.wrap(sessionServer())
	origin := serve(t, httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if redirecting.Load() {
			http.Redirect(w, r, elsewhere.URL+"/mcp", http.StatusTemporaryRedirect)
			return
		}
		inner.ServeHTTP(w, r)
	})))

	p := newPool(t)
	key := connector.Key{Namespace: "ns", Name: "moved"}
	cfg := config(origin.URL+"/mcp", rulesFor(t, loopbackPolicy(mcpv1alpha1.RedirectAllowedDestinations, 3), egress.PostureNone))
	// Probes are what reach the server once the session is up; they run often here so
	// that one follows the redirect soon.
	cfg.HealthCheck = connector.HealthCheck{Interval: 20 * time.Millisecond, FailureThreshold: 1}
	p.Ensure(key, cfg)
	awaitReady(t, p, key)
	redirecting.Store(true)

	// Wait for probes of the first server's session to have followed the redirect.
	await(t, p, key, "redirected requests at the other origin", func(connector.Snapshot) bool {
		return len(other.requests()) >= 2
	})
	homeSessions, otherSessions := home.issued(), other.issued()
	if len(homeSessions) == 0 {
		t.Fatal("the first server issued no session id; the test needs one")
	}
	for i, r := range other.requests() {
		switch {
		case homeSessions[r.sessionID]:
			t.Errorf("request %d to the other origin carried the first server's session id", i)
		case r.sessionID == "" && r.protocolVersion:
			t.Errorf("request %d to the other origin carried the protocol version negotiated with the first server", i)
		case r.sessionID != "" && !otherSessions[r.sessionID]:
			t.Errorf("request %d to the other origin carried a session id it did not issue", i)
		}
		if r.lastEventID {
			t.Errorf("request %d to the other origin carried Last-Event-ID", i)
		}
		if r.auth {
			t.Errorf("request %d to the other origin carried the configured Authorization header", i)
		}
	}
}

// TestSessionAtAnotherOriginKeepsItsOwnHeaders checks the other side: when every request
// is redirected to another allowed origin, the session lives there, and the session id
// that origin issued goes back to it.
func TestSessionAtAnotherOriginKeepsItsOwnHeaders(t *testing.T) {
	other := &headerCapture{}
	elsewhere := serve(t, httptest.NewServer(other.wrap(sessionServer())))
	origin := serve(t, httptest.NewServer(redirectTo(http.StatusTemporaryRedirect, func() string { return elsewhere.URL + "/mcp" })))

	p := newPool(t)
	key := connector.Key{Namespace: "ns", Name: "elsewhere"}
	p.Ensure(key, config(origin.URL+"/mcp", rulesFor(t, loopbackPolicy(mcpv1alpha1.RedirectAllowedDestinations, 3), egress.PostureNone)))
	awaitReady(t, p, key)
	issued, withSession := other.issued(), 0
	for _, r := range other.requests() {
		if r.auth {
			t.Fatal("the other origin received the configured Authorization header")
		}
		if issued[r.sessionID] {
			withSession++
		}
	}
	if withSession == 0 {
		t.Error("no request carried the session id the other origin issued")
	}
}
