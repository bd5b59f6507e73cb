package connector_test

import (
	"context"
	"net"
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

// capture is an MCP server on loopback that counts what reaches it: requests (by
// method, with or without the configured credentials) and new TCP connections.
type capture struct {
	mu       sync.Mutex
	requests int
	gets     int
	auth     int
	conns    int
}

func (c *capture) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.requests++
		if r.Method == http.MethodGet {
			c.gets++
		}
		if r.Header.Get("Authorization") != "" {
			c.auth++
		}
		c.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (c *capture) connState(_ net.Conn, state http.ConnState) {
	if state == http.StateNew {
		c.mu.Lock()
		c.conns++
		c.mu.Unlock()
	}
}

// counts returns requests, GET requests, requests with Authorization and connections.
func (c *capture) counts() (requests, gets, auth, conns int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests, c.gets, c.auth, c.conns
}

func startCapture(t *testing.T, handler http.Handler) (*capture, *httptest.Server) {
	t.Helper()
	c := &capture{}
	srv := httptest.NewUnstartedServer(c.wrap(handler))
	srv.Config.ConnState = c.connState
	srv.Start()
	return c, serve(t, srv)
}

// TestPolicyChangeIsNotBypassedThroughPooledConnections is issue 12, finding 1: once a
// policy change denies a live server, nothing of that server may travel over the
// keep-alive connections that the old decision let it open. The session must end up
// Down with EgressDenied after several reconnect attempts, and the server must see
// neither a request nor a connection after the change.
func TestPolicyChangeIsNotBypassedThroughPooledConnections(t *testing.T) {
	for _, tc := range []struct {
		name     string
		versions []string // protocol versions the server speaks; nil is go-sdk's default
		json     bool     // answer POSTs with JSON bodies rather than event streams
	}{
		{"sessionless protocol", nil, false},
		// A JSON body is read to its end, so its connection always goes back to the
		// idle pool; after an event stream that depends on how the last bytes arrive.
		{"sessionless protocol, JSON responses", nil, true},
		// 2025-11-25 has sessions: a standalone GET stream stays open on one
		// connection and the client sends DELETE when the session ends.
		{"protocol with sessions", []string{"2025-11-25"}, false},
		{"protocol with sessions, JSON responses", []string{"2025-11-25"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := mcp.NewServer(&mcp.Implementation{Name: "target", Version: "1"}, &mcp.ServerOptions{SupportedProtocolVersions: tc.versions})
			mcp.AddTool(server, &mcp.Tool{Name: "ping"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{}, nil, nil
			})
			capt, srv := startCapture(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
				&mcp.StreamableHTTPOptions{JSONResponse: tc.json}))

			p := newPool(t)
			key := connector.Key{Namespace: "ns", Name: "swapped"}
			cfg := config(srv.URL+"/mcp", rulesFor(t, loopbackPolicy(mcpv1alpha1.RedirectDeny, 0), egress.PostureNone))
			p.Ensure(key, cfg)
			awaitReady(t, p, key)
			if tc.versions != nil {
				// Let the standalone stream open, so that everything the allowed
				// session sends is counted before the change.
				await(t, p, key, "the standalone GET stream", func(connector.Snapshot) bool {
					_, gets, _, _ := capt.counts()
					return gets > 0
				})
			}
			before, _, authBefore, connsBefore := capt.counts()

			// The policy changes: the server may now reach 10.0.0.0/8 only. The
			// controller hands the pool the new rules with an otherwise equal config.
			cfg.Egress = rulesFor(t, &mcpv1alpha1.MCPEgressPolicySpec{Egress: []mcpv1alpha1.EgressRule{{
				To: []mcpv1alpha1.EgressPeer{{IPBlock: &mcpv1alpha1.IPBlock{CIDR: "10.0.0.0/8"}}},
			}}}, egress.PostureNone)
			p.Ensure(key, cfg)

			// Wait for the session to have been refused at least twice more after it
			// was dropped; fail as soon as anything reaches the denied server.
			deadline := time.Now().Add(10 * time.Second)
			var snap connector.Snapshot
			for {
				requests, _, auth, conns := capt.counts()
				if requests > before || conns > connsBefore {
					t.Fatalf("after the policy change %d requests (%d with the configured Authorization) reached the denied server over %d new connections; want 0",
						requests-before, auth-authBefore, conns-connsBefore)
				}
				snap, _ = p.Snapshot(key)
				if snap.State == connector.StateDown && snap.LastError != nil &&
					snap.LastError.Reason == mcpv1alpha1.ReasonEgressDenied && snap.ConsecutiveFailures >= 3 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("timed out waiting for repeated EgressDenied; last state %s, failures %d, error %v",
						snap.State, snap.ConsecutiveFailures, snap.LastError)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if requests, _, _, conns := capt.counts(); requests != before || conns != connsBefore {
				t.Fatalf("after the policy change %d requests reached the denied server over %d new connections; want 0",
					requests-before, conns-connsBefore)
			}
			assertNoSecret(t, snap)
		})
	}
}

// TestRecomputedEqualRulesKeepPooledConnections: the controller recomputes a server's
// rules on every reconcile. Rules that allow the same as before must not cost the
// server its keep-alive connections; only a change of what they allow does.
func TestRecomputedEqualRulesKeepPooledConnections(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "target", Version: "1"}, nil)
	capt, srv := startCapture(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{JSONResponse: true}))

	p := newPool(t)
	key := connector.Key{Namespace: "ns", Name: "steady"}
	cfg := config(srv.URL+"/mcp", rulesFor(t, loopbackPolicy(mcpv1alpha1.RedirectDeny, 0), egress.PostureNone))
	cfg.HealthCheck.Interval = 20 * time.Millisecond // probes are the traffic between reconciles
	p.Ensure(key, cfg)
	awaitReady(t, p, key)
	_, _, _, connsBefore := capt.counts()

	for range 5 { // five reconciles, each with freshly compiled, equal rules
		cfg.Egress = rulesFor(t, loopbackPolicy(mcpv1alpha1.RedirectDeny, 0), egress.PostureNone)
		p.Ensure(key, cfg)
		requests, _, _, _ := capt.counts()
		await(t, p, key, "two more probes", func(connector.Snapshot) bool {
			now, _, _, _ := capt.counts()
			return now >= requests+2
		})
	}
	if _, _, _, conns := capt.counts(); conns != connsBefore {
		t.Errorf("equal rules recomputed 5 times opened %d new connections; want 0", conns-connsBefore)
	}
	if snap, _ := p.Snapshot(key); snap.State != connector.StateReady {
		t.Errorf("session is %s after equal rules, want Ready", snap.State)
	}
}

// TestAPolicyThatNowAllowsAServerCutsItsBackoffShort: a server the old policy denied
// waits out its reconnect backoff; a policy that allows it must not wait for that (an
// hour here), but connect at once.
func TestAPolicyThatNowAllowsAServerCutsItsBackoffShort(t *testing.T) {
	srv := serve(t, httptest.NewServer(mcpHandler()))
	p, err := connector.NewPool(connector.Options{InitialBackoff: time.Hour, MaxBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	key := connector.Key{Namespace: "ns", Name: "let-in"}
	tenOnly := &mcpv1alpha1.MCPEgressPolicySpec{Egress: []mcpv1alpha1.EgressRule{{
		To: []mcpv1alpha1.EgressPeer{{IPBlock: &mcpv1alpha1.IPBlock{CIDR: "10.0.0.0/8"}}},
	}}}
	cfg := config(srv.URL+"/mcp", rulesFor(t, tenOnly, egress.PostureNone))
	p.Ensure(key, cfg)
	await(t, p, key, "the denied connect", func(s connector.Snapshot) bool {
		return s.State == connector.StateDown && s.LastError != nil && s.LastError.Reason == mcpv1alpha1.ReasonEgressDenied
	})

	cfg.Egress = rulesFor(t, loopbackPolicy(mcpv1alpha1.RedirectDeny, 0), egress.PostureNone)
	p.Ensure(key, cfg)
	awaitReady(t, p, key)
}

// TestANewInstanceOfTheServerConnectsAtOnce: a stdio server whose broken version failed
// long enough has a reconnect backoff of minutes; once its fixed version serves (the
// controller says so with a new Instance), the session must connect at once, not when
// the broken version's backoff ends (an hour here).
func TestANewInstanceOfTheServerConnectsAtOnce(t *testing.T) {
	var fixed atomic.Bool
	healthy := mcpHandler()
	srv := serve(t, httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fixed.Load() {
			http.Error(w, "the server exited", http.StatusBadGateway)
			return
		}
		healthy.ServeHTTP(w, r)
	})))
	p, err := connector.NewPool(connector.Options{InitialBackoff: time.Hour, MaxBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	key := connector.Key{Namespace: "ns", Name: "fixed"}
	cfg := config(srv.URL+"/mcp", rulesFor(t, loopbackPolicy(mcpv1alpha1.RedirectDeny, 0), egress.PostureNone))
	cfg.Instance = "1"
	p.Ensure(key, cfg)
	await(t, p, key, "the broken version's failed connect", func(s connector.Snapshot) bool {
		return s.State == connector.StateDown && s.LastError != nil
	})

	fixed.Store(true)
	cfg.Instance = "2"
	p.Ensure(key, cfg)
	awaitReady(t, p, key)
}
