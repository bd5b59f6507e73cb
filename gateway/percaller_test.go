package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// The gateway's client at the security token service of these tests.
const (
	stsClientID     = "switchboard-gateway"
	stsClientSecret = "sts-client-secret-5e2b"
)

// perCallerWorld is a server whose credentials follow the caller
// (spec.http.auth.oauth2.tokenExchange), behind the gateway: a go-sdk MCP server that
// takes only the bearer tokens the security token service issued and records every
// Authorization header it got, and the security token service (RFC 8693, also the
// server's authorization server for its metadata), which issues "upstream-<subject>"
// for the subject token of each caller it knows and refuses the others with
// invalid_grant, quoting their token as a careless service does.
type perCallerWorld struct {
	t        *testing.T
	mcp, sts *httptest.Server
	subjects map[string]string // the callers' own tokens -> subject

	mu        sync.Mutex
	seen      []string // Authorization of every request the MCP server got
	exchanges []string // subject tokens the token service was sent
}

func newPerCallerWorld(t *testing.T, subjects map[string]string) *perCallerWorld {
	t.Helper()
	w := &perCallerWorld{t: t, subjects: subjects}
	server := mcp.NewServer(&mcp.Implementation{Name: "per-caller", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "whoami", Description: "Names who the server was called for.", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			who := "nobody"
			if ti := req.Extra.TokenInfo; ti != nil {
				who = ti.UserID
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: who}}}, nil
		})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		subject, ok := strings.CutPrefix(token, "upstream-")
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: subject, Expiration: time.Now().Add(time.Hour)}, nil
	}
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	var protected http.Handler
	w.mcp = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/oauth-protected-resource/mcp" {
			writeJSONTo(rw, map[string]any{"resource": w.mcp.URL + "/mcp", "authorization_servers": []string{w.sts.URL}})
			return
		}
		w.mu.Lock()
		w.seen = append(w.seen, r.Header.Get("Authorization"))
		w.mu.Unlock()
		protected.ServeHTTP(rw, r)
	}))
	protected = auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: w.mcp.URL + "/.well-known/oauth-protected-resource/mcp",
	})(handler)
	w.sts = httptest.NewServer(http.HandlerFunc(w.serveSTS))
	t.Cleanup(func() {
		for _, s := range []*httptest.Server{w.mcp, w.sts} {
			s.CloseClientConnections()
			s.Close()
		}
	})
	return w
}

func (w *perCallerWorld) serveSTS(rw http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/.well-known/oauth-authorization-server":
		writeJSONTo(rw, map[string]any{"issuer": w.sts.URL, "token_endpoint": w.sts.URL + "/token",
			"grant_types_supported": []string{"urn:ietf:params:oauth:grant-type:token-exchange"}})
		return
	case "/token":
	default:
		http.NotFound(rw, r)
		return
	}
	if id, secret, ok := r.BasicAuth(); !ok || id != stsClientID || secret != stsClientSecret {
		oauthErrorTo(rw, http.StatusUnauthorized, "invalid_client", "bad client")
		return
	}
	_ = r.ParseForm()
	subjectToken := r.PostForm.Get("subject_token")
	w.mu.Lock()
	w.exchanges = append(w.exchanges, subjectToken)
	w.mu.Unlock()
	subject, known := w.subjects[subjectToken]
	switch {
	case r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange":
		oauthErrorTo(rw, http.StatusBadRequest, "unsupported_grant_type", "")
	case !known:
		oauthErrorTo(rw, http.StatusBadRequest, "invalid_grant", "subject token "+subjectToken+" is not one of ours")
	default:
		writeJSONTo(rw, map[string]any{"access_token": "upstream-" + subject, "token_type": "Bearer",
			"issued_token_type": connector.TokenTypeAccessToken, "expires_in": 3600})
	}
}

func writeJSONTo(rw http.ResponseWriter, v any) {
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(v)
}

func oauthErrorTo(rw http.ResponseWriter, status int, code, description string) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_ = json.NewEncoder(rw).Encode(map[string]string{"error": code, "error_description": description})
}

// seenAuthorizations returns the Authorization headers the MCP server got.
func (w *perCallerWorld) seenAuthorizations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen...)
}

// perCallerGateway is a gateway in front of the world's server, configured as the
// controller maps an MCPServer with tokenExchange and no operator credential, with
// the given callers (token -> user) authenticated and allowed use on it.
func perCallerGateway(t *testing.T, w *perCallerWorld, callers tokens) *harness {
	t.Helper()
	h := &harness{t: t, key: connector.Key{Namespace: namespace, Name: "notes"}, audit: &logLines{}}
	pool, err := connector.NewPool(connector.Options{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	h.pool = pool
	pool.Ensure(h.key, connector.Config{
		URL:         w.mcp.URL + "/mcp",
		Protocol:    connector.ProtocolStreamableHTTP,
		Timeout:     5 * time.Second,
		HealthCheck: connector.HealthCheck{Interval: time.Hour},
		Egress:      loopbackRules(t),
		PerCaller: &connector.PerCallerAuth{TokenExchange: &connector.TokenExchange{
			TokenURL: w.sts.URL + "/token", ClientID: stsClientID, ClientSecret: stsClientSecret, AllowInsecureHTTP: true,
		}},
	})
	testutil.Eventually(t, 10*time.Second, "the pool's session to check the server's metadata", func() error {
		if snap, _ := pool.Snapshot(h.key); snap.State != connector.StateReady || !snap.ToolsPerCaller {
			return fmt.Errorf("state %s, tools per caller %v: %w", snap.State, snap.ToolsPerCaller, snap.LastError)
		}
		return nil
	})
	allowed := map[string][]string{}
	for _, user := range callers {
		allowed[user] = []string{h.key.Name}
	}
	var reviews atomic.Int32
	sar := grants(t, allowed, &reviews)
	gw, err := gateway.New(gateway.Options{Pool: pool, Audit: h.audit.logger(),
		Authenticator: callers, Access: sar.AuthorizationV1().SubjectAccessReviews()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	h.gw = gw
	gw.Update(readyServer(h.key))
	h.front = httptest.NewServer(gw.Handler())
	t.Cleanup(h.front.Close)
	return h
}

// connectAs opens a client session through the gateway with token, in the era version
// names.
func (h *harness) connectAs(token, version string) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   h.url(),
		HTTPClient: &http.Client{Transport: bearer{token: token}},
		MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, err
	}
	h.t.Cleanup(func() { _ = cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		h.t.Fatalf("the client settled on %q through the gateway, want %s", got, version)
	}
	return cs, nil
}

// Callers' tokens of these tests. Long enough for the redactor.
const (
	aliceInbound = "inbound-token-alice-31f6c2"
	bobInbound   = "inbound-token-bob-8d04e7"
	carolInbound = "inbound-token-carol-c95a13"
)

// Through the gateway, a server whose credentials follow the caller is called by each
// caller with a token of its own, exchanged from the token it presented: in both
// protocol eras, two callers reach the server as themselves, and the server never sees
// either caller's own token.
func TestPerCallerCredentialsReachTheServerAsEachCaller(t *testing.T) {
	for _, era := range []struct{ name, version string }{
		{"session client (2025-11-25)", sessionEra},
		{"sessionless client (2026-07-28)", sessionlessVersion},
	} {
		t.Run(era.name, func(t *testing.T) {
			w := newPerCallerWorld(t, map[string]string{aliceInbound: "alice", bobInbound: "bob"})
			h := perCallerGateway(t, w, tokens{aliceInbound: "system:serviceaccount:team-a:alice", bobInbound: "system:serviceaccount:team-a:bob"})
			for _, c := range []struct{ token, subject string }{{aliceInbound, "alice"}, {bobInbound, "bob"}, {aliceInbound, "alice"}} {
				cs, err := h.connectAs(c.token, era.version)
				if err != nil {
					t.Fatalf("connecting as %s: %v", c.subject, err)
				}
				for range 2 {
					got, err := callText(t, cs, "whoami", nil)
					if err != nil || got != c.subject {
						t.Errorf("whoami as %s answered %q, %v; want the server to be called for %s", c.subject, got, err, c.subject)
					}
				}
			}
			distinct := map[string]bool{}
			for _, a := range w.seenAuthorizations() {
				if strings.Contains(a, aliceInbound) || strings.Contains(a, bobInbound) {
					t.Errorf("a caller's own token reached the server: %q", a)
				}
				if a != "" {
					distinct[a] = true
				}
			}
			if !distinct["Bearer upstream-alice"] || !distinct["Bearer upstream-bob"] || len(distinct) != 2 {
				t.Errorf("the server saw Authorization %v; want Bearer upstream-alice and Bearer upstream-bob only", keysOf(distinct))
			}
			// Each caller's token was exchanged once, for both of its sessions and all
			// of its calls.
			w.mu.Lock()
			exchanges := append([]string(nil), w.exchanges...)
			w.mu.Unlock()
			if len(exchanges) != 2 || exchanges[0] == exchanges[1] {
				t.Errorf("the token service was sent %d exchanges; want one for each caller", len(exchanges))
			}
			if era.version == sessionlessVersion {
				if n := h.gw.Sessions(); n != 0 {
					t.Errorf("the gateway holds %d client sessions for sessionless clients, want none", n)
				}
			}
		})
	}
}

// A caller whose exchange the token service refuses gets a JSON-RPC error that names
// the reason, and neither its token nor the token service's words quoting it; the
// server gets nothing for it, and other callers go on.
func TestPerCallerRefusedExchangeNamesTheReasonAndNoSecret(t *testing.T) {
	for _, era := range []struct{ name, version string }{
		{"session client (2025-11-25)", sessionEra},
		{"sessionless client (2026-07-28)", sessionlessVersion},
	} {
		t.Run(era.name, func(t *testing.T) {
			w := newPerCallerWorld(t, map[string]string{aliceInbound: "alice"})
			h := perCallerGateway(t, w, tokens{aliceInbound: "system:serviceaccount:team-a:alice", carolInbound: "system:serviceaccount:team-a:carol"})
			var msg string
			cs, err := h.connectAs(carolInbound, era.version)
			if err == nil {
				_, err = callText(t, cs, "whoami", nil)
			}
			if err == nil {
				t.Fatal("carol's call went through; want the refused exchange to refuse it")
			}
			var rpcErr *jsonrpc.Error
			if !errors.As(err, &rpcErr) {
				t.Fatalf("carol was answered %v (%T); want a JSON-RPC error", err, err)
			}
			msg = rpcErr.Message
			t.Logf("carol was answered: %d %s", rpcErr.Code, msg)
			for _, want := range []string{"TokenRequestFailed", "token exchange", "invalid_grant"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the error %q does not name the reason (%q)", msg, want)
				}
			}
			// The token service's words are passed on with the token it quoted redacted.
			for _, secret := range []string{carolInbound, "subject token " + carolInbound, stsClientSecret} {
				if strings.Contains(msg, secret) {
					t.Errorf("the error carries %q: %s", secret, msg)
				}
			}
			w.mu.Lock()
			exchanged := false
			for _, s := range w.exchanges {
				exchanged = exchanged || s == carolInbound
			}
			w.mu.Unlock()
			if !exchanged {
				t.Error("carol's token was never exchanged")
			}
			for _, a := range w.seenAuthorizations() {
				if a != "" && a != "Bearer upstream-alice" {
					t.Errorf("the server got Authorization %q", a)
				}
			}
			if lines := h.audit.all(); strings.Contains(lines, carolInbound) {
				t.Errorf("an audit line carries carol's token: %s", lines)
			}
			// Alice is unaffected.
			a, err := h.connectAs(aliceInbound, era.version)
			if err != nil {
				t.Fatalf("connecting as alice: %v", err)
			}
			if got, err := callText(t, a, "whoami", nil); err != nil || got != "alice" {
				t.Errorf("whoami as alice answered %q, %v", got, err)
			}
		})
	}
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

