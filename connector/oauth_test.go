package connector

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/connector/oauth"
	"github.com/switchboard-mcp/switchboard/egress"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// Test credentials. Long enough that the redactor handles them.
const (
	oauthClientID     = "switchboard-test-client"
	oauthClientSecret = "client-secret-value-5150"
)

// captured is one request any server of an oauthWorld saw.
type captured struct {
	server, method, path, authorization, body string
}

// oauthWorld is an MCP server that demands bearer tokens, its protected resource
// metadata, an authorization server and a capture server, all on loopback, with a log
// of every request any of them saw.
type oauthWorld struct {
	t       *testing.T
	mcp     *httptest.Server // the MCP server and its protected resource metadata
	as      *httptest.Server // the authorization server
	capture *httptest.Server // answers 404 to everything; nobody should call it

	mu       sync.Mutex
	requests []captured
	valid    map[string]time.Time // token -> expiry
	issued   int

	// Knobs, set before the session connects (or under mu).
	prm          func(w *oauthWorld) map[string]any
	asMeta       func(w *oauthWorld) map[string]any
	token        http.HandlerFunc // replaces the token endpoint when set
	expiresIn    int              // seconds; 0 omits expires_in
	requireScope string           // answer insufficient_scope naming this scope
	pubKey       any              // verifies private_key_jwt assertions when set
	wantMethod   string           // client_secret_basic, client_secret_post or private_key_jwt
	assertions   []jwt.MapClaims
	revoked      bool
	echoToken    bool // the server puts the Authorization it received into a tool description
	rejected     int  // requests answered 401 although they carried a token
	// metadataBytes counts what the 50 MiB metadata handler managed to send.
	metadataBytes int
}

func newOAuthWorld(t *testing.T) *oauthWorld {
	t.Helper()
	w := &oauthWorld{t: t, valid: map[string]time.Time{}, expiresIn: 3600, wantMethod: AuthMethodClientSecretBasic}
	w.prm = func(w *oauthWorld) map[string]any {
		return map[string]any{"resource": w.mcp.URL + "/mcp", "authorization_servers": []string{w.as.URL}, "scopes_supported": []string{"tools.read"}}
	}
	w.asMeta = func(w *oauthWorld) map[string]any {
		return map[string]any{
			"issuer": w.as.URL, "token_endpoint": w.as.URL + "/token",
			"grant_types_supported":                 []string{"client_credentials"},
			"token_endpoint_auth_methods_supported": []string{w.wantMethod},
		}
	}
	server := newServer(2, nil)
	mcpHandler := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if !w.echoToken {
			return server
		}
		echoing := newServer(1, nil)
		echoing.AddTool(&mcp.Tool{Name: "whoami", Description: "Called with " + r.Header.Get("Authorization"),
			InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
		return echoing
	}, nil)
	w.mcp = startServer(t, w.log("mcp", http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/oauth-protected-resource/mcp" {
			writeJSON(rw, w.prm(w))
			return
		}
		if !w.authorized(rw, r) {
			return
		}
		mcpHandler.ServeHTTP(rw, r)
	})))
	w.as = startServer(t, w.log("as", http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/oauth-authorization-server":
			writeJSON(rw, w.asMeta(w))
		case "/token":
			if w.token != nil {
				w.token(rw, r)
				return
			}
			w.issue(rw, r)
		default:
			http.NotFound(rw, r)
		}
	})))
	w.capture = startServer(t, w.log("capture", http.NotFoundHandler()))
	return w
}

func writeJSON(rw http.ResponseWriter, v any) {
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(v)
}

// log records every request, body included, before h handles it.
func (w *oauthWorld) log(server string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		w.mu.Lock()
		w.requests = append(w.requests, captured{server, r.Method, r.URL.Path, r.Header.Get("Authorization"), string(body)})
		w.mu.Unlock()
		h.ServeHTTP(rw, r)
	})
}

// authorized answers 401 or 403 unless the request carries a valid token.
func (w *oauthWorld) authorized(rw http.ResponseWriter, r *http.Request) bool {
	tok, hasToken := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	w.mu.Lock()
	defer w.mu.Unlock()
	expiry, ok := w.valid[tok]
	meta := `resource_metadata="` + w.mcp.URL + `/.well-known/oauth-protected-resource/mcp"`
	switch {
	case !hasToken:
		rw.Header().Set("WWW-Authenticate", `Bearer `+meta)
	case !ok || w.revoked || time.Now().After(expiry):
		w.rejected++
		rw.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", error_description="token expired", `+meta)
	case w.requireScope != "":
		rw.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="`+w.requireScope+`", `+meta)
		rw.WriteHeader(http.StatusForbidden)
		return false
	default:
		return true
	}
	rw.WriteHeader(http.StatusUnauthorized)
	return false
}

// issue is the token endpoint: it checks the client's authentication and grants a token.
func (w *oauthWorld) issue(rw http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		rw.WriteHeader(http.StatusBadRequest)
		writeJSON(rw, map[string]string{"error": "unsupported_grant_type"})
		return
	}
	deny := func(why string) {
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(rw).Encode(map[string]string{"error": "invalid_client", "error_description": why})
	}
	if r.PostForm.Get("resource") != w.mcp.URL+"/mcp" {
		rw.WriteHeader(http.StatusBadRequest)
		writeJSON(rw, map[string]string{"error": "invalid_target"})
		return
	}
	switch w.wantMethod {
	case AuthMethodClientSecretBasic:
		id, secret, ok := r.BasicAuth()
		if !ok || id != oauthClientID || secret != oauthClientSecret || r.PostForm.Has("client_secret") {
			// Echoing what was presented, as a careless server does: the connector must
			// not pass it on.
			deny("bad basic credentials: secret " + secret)
			return
		}
	case AuthMethodClientSecretPost:
		if r.Header.Get("Authorization") != "" || r.PostForm.Get("client_id") != oauthClientID || r.PostForm.Get("client_secret") != oauthClientSecret {
			deny("bad post credentials: secret " + r.PostForm.Get("client_secret"))
			return
		}
	case AuthMethodPrivateKeyJWT:
		if r.PostForm.Get("client_assertion_type") != oauth.ClientAssertionType {
			deny("bad assertion type")
			return
		}
		claims := jwt.MapClaims{}
		_, err := jwt.ParseWithClaims(r.PostForm.Get("client_assertion"), claims, func(*jwt.Token) (any, error) { return w.pubKey, nil },
			jwt.WithValidMethods([]string{"ES256", "RS256"}), jwt.WithAudience(w.as.URL+"/token"), jwt.WithIssuer(oauthClientID),
			jwt.WithSubject(oauthClientID), jwt.WithExpirationRequired(), jwt.WithIssuedAt())
		if err != nil || claims["jti"] == "" {
			deny("assertion does not verify")
			return
		}
		w.mu.Lock()
		for _, seen := range w.assertions {
			if seen["jti"] == claims["jti"] {
				w.mu.Unlock()
				deny("replayed assertion")
				return
			}
		}
		w.assertions = append(w.assertions, claims)
		w.mu.Unlock()
	}
	w.mu.Lock()
	w.issued++
	tok := fmt.Sprintf("access-token-%d-%s", w.issued, rand.Text())
	life := time.Duration(w.expiresIn) * time.Second
	if life == 0 {
		life = time.Hour
	}
	w.valid[tok] = time.Now().Add(life)
	expiresIn := w.expiresIn
	w.mu.Unlock()
	resp := map[string]any{"access_token": tok, "token_type": "Bearer", "scope": r.PostForm.Get("scope")}
	if expiresIn > 0 {
		resp["expires_in"] = expiresIn
	}
	writeJSON(rw, resp)
}

// config returns a session config for the world's MCP server with the given credentials.
func (w *oauthWorld) config(o OAuth2ClientCredentials) Config {
	cfg := fastConfig(w.mcp.URL + "/mcp")
	cfg.Protocol = ProtocolStreamableHTTP
	o.AllowInsecureHTTP = true
	if o.ClientID == "" {
		o.ClientID = oauthClientID
	}
	cfg.OAuth2 = &o
	return cfg
}

func (w *oauthWorld) tokenRequests() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, r := range w.requests {
		if r.server == "as" && r.path == "/token" {
			n++
		}
	}
	return n
}

// assertSecretOnlyAtTokenEndpoint fails when a secret (the client secret, its Basic
// encoding, an assertion) reached any request but a POST to the token endpoint.
func (w *oauthWorld) assertSecretOnlyAtTokenEndpoint() {
	w.t.Helper()
	secrets := []string{oauthClientSecret, base64.StdEncoding.EncodeToString([]byte(oauthClientID + ":" + oauthClientSecret))}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.requests {
		if r.server == "as" && r.path == "/token" && r.method == http.MethodPost {
			continue
		}
		for _, s := range secrets {
			if strings.Contains(r.authorization, s) || strings.Contains(r.body, s) {
				w.t.Errorf("a secret reached %s %s %s", r.server, r.method, r.path)
			}
		}
		if strings.Contains(r.body, "client_assertion") || strings.Contains(r.body, "client_secret") {
			w.t.Errorf("client authentication reached %s %s %s", r.server, r.method, r.path)
		}
		if strings.HasPrefix(r.authorization, "Basic ") {
			w.t.Errorf("Basic credentials reached %s %s %s", r.server, r.method, r.path)
		}
	}
}

// assertNoTokenRequest fails when the token endpoint was called.
func (w *oauthWorld) assertNoTokenRequest() {
	w.t.Helper()
	if n := w.tokenRequests(); n != 0 {
		w.t.Errorf("the token endpoint got %d requests, want none", n)
	}
}

// assertNoLeak fails when a snapshot's error carries a secret or a token.
func (w *oauthWorld) assertNoLeak(snap Snapshot) {
	w.t.Helper()
	text := fmt.Sprintf("%+v", snap)
	if snap.LastError != nil {
		text += snap.LastError.Message
	}
	for _, s := range []string{oauthClientSecret, "access-token-", "eyJ", "PRIVATE KEY"} {
		if strings.Contains(text, s) {
			w.t.Errorf("snapshot carries %q: %s", s, text)
		}
	}
}

func waitAuthFailure(t *testing.T, p *Pool, key Key, reason, auth string) Snapshot {
	t.Helper()
	return waitFor(t, p, key, "Down with "+reason+"/"+auth, func(s Snapshot) bool {
		return s.State == StateDown && s.LastError != nil && s.LastError.Reason == reason && s.LastError.Authentication == auth
	})
}

func TestOAuthClientSecretBasicDiscoveryHappyPath(t *testing.T) {
	w := newOAuthWorld(t)
	p := testPool(t)
	key := Key{"ns", "oauth-basic"}
	p.Ensure(key, w.config(OAuth2ClientCredentials{ClientSecret: oauthClientSecret}))
	snap := waitReady(t, p, key)
	if len(snap.Tools) != 2 {
		t.Errorf("tools = %d, want 2", len(snap.Tools))
	}
	if want := strings.TrimPrefix(w.as.URL, "http://"); !strings.Contains(snap.TokenEndpoint, want) || strings.Contains(snap.TokenEndpoint, "/token") {
		t.Errorf("TokenEndpoint = %q, want the origin of %s", snap.TokenEndpoint, w.as.URL)
	}
	if n := w.tokenRequests(); n != 1 {
		t.Errorf("token requests = %d, want 1", n)
	}
	// The scope came from the protected resource metadata; the resource is the server.
	w.mu.Lock()
	var form url.Values
	for _, r := range w.requests {
		if r.path == "/token" {
			form, _ = url.ParseQuery(r.body)
		}
	}
	w.mu.Unlock()
	if form.Get("scope") != "tools.read" || form.Get("resource") != w.mcp.URL+"/mcp" {
		t.Errorf("token request form = %v, want scope tools.read and the server's resource", form)
	}
	w.assertSecretOnlyAtTokenEndpoint()
	w.assertNoLeak(snap)
}

// A server that shows the token it was sent, in its own text, does not get it into the
// published tools: issued tokens are redacted like configured secrets.
func TestOAuthTokenEchoedByTheServerIsRedacted(t *testing.T) {
	w := newOAuthWorld(t)
	w.echoToken = true
	p := testPool(t)
	key := Key{"ns", "oauth-echo"}
	p.Ensure(key, w.config(OAuth2ClientCredentials{ClientSecret: oauthClientSecret}))
	snap := waitReady(t, p, key)
	var description string
	for _, tool := range snap.Tools {
		if tool.Name == "whoami" {
			description = tool.Description
		}
	}
	if description != "Called with Bearer [redacted]" {
		t.Errorf("whoami's description = %q, want the token redacted", description)
	}
	w.assertNoLeak(snap)
}

func TestOAuthClientSecretPostAndConfiguredScopes(t *testing.T) {
	w := newOAuthWorld(t)
	w.wantMethod = AuthMethodClientSecretPost
	p := testPool(t)
	key := Key{"ns", "oauth-post"}
	p.Ensure(key, w.config(OAuth2ClientCredentials{ClientSecret: oauthClientSecret, Scopes: []string{"a.read", "b.write"}}))
	waitReady(t, p, key)
	w.mu.Lock()
	var form url.Values
	for _, r := range w.requests {
		if r.path == "/token" {
			form, _ = url.ParseQuery(r.body)
		}
	}
	w.mu.Unlock()
	if form.Get("scope") != "a.read b.write" {
		t.Errorf("scope = %q, want the configured scopes", form.Get("scope"))
	}
	w.assertSecretOnlyAtTokenEndpoint()
}

func TestOAuthPrivateKeyJWT(t *testing.T) {
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		priv any
		pub  any
		alg  string
	}{
		{"ES256", ecKey, &ecKey.PublicKey, "ES256"},
		{"RS256", rsaKey, &rsaKey.PublicKey, "RS256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			der, err := x509.MarshalPKCS8PrivateKey(tc.priv)
			if err != nil {
				t.Fatal(err)
			}
			keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
			w := newOAuthWorld(t)
			w.wantMethod, w.pubKey = AuthMethodPrivateKeyJWT, tc.pub
			w.expiresIn = 1 // a fresh assertion for every token
			p := testPool(t)
			key := Key{"ns", "oauth-jwt"}
			p.Ensure(key, w.config(OAuth2ClientCredentials{PrivateKey: keyPEM}))
			snap := waitReady(t, p, key)
			w.assertNoLeak(snap)
			cs := upstreamClient(t, p, key)
			// Renewals sign new assertions: two verified, with distinct jti.
			testutil.Eventually(t, waitTimeout, "a second token", func() error {
				if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "tool-000", Arguments: map[string]any{"text": "x"}}); err != nil {
					return err
				}
				if n := w.tokenRequests(); n < 2 {
					return fmt.Errorf("%d token requests", n)
				}
				return nil
			})
			w.mu.Lock()
			if len(w.assertions) < 2 || w.assertions[0]["jti"] == w.assertions[1]["jti"] {
				t.Errorf("assertions = %v, want two with distinct jti", w.assertions)
			}
			w.mu.Unlock()
			w.assertSecretOnlyAtTokenEndpoint()
		})
	}
}

func TestOAuthRefreshesBeforeExpiryWithoutDroppingTheSession(t *testing.T) {
	w := newOAuthWorld(t)
	w.expiresIn = 2
	p := testPool(t)
	key := Key{"ns", "oauth-refresh"}
	cfg := w.config(OAuth2ClientCredentials{ClientSecret: oauthClientSecret})
	p.Ensure(key, cfg)
	first := waitReady(t, p, key)
	cs := upstreamClient(t, p, key)
	testutil.Eventually(t, waitTimeout, "three tokens", func() error {
		if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "tool-001", Arguments: map[string]any{"text": "x"}}); err != nil {
			return err
		}
		if n := w.tokenRequests(); n < 3 {
			return fmt.Errorf("%d token requests", n)
		}
		return nil
	})
	snap, _ := p.Snapshot(key)
	if snap.State != StateReady || !snap.ConnectedAt.Equal(first.ConnectedAt) {
		t.Errorf("session state %s connected at %v, want the first session (%v) still ready", snap.State, snap.ConnectedAt, first.ConnectedAt)
	}
	w.mu.Lock()
	rejected := w.rejected
	w.mu.Unlock()
	if rejected != 0 {
		t.Errorf("%d requests carried an expired token; tokens should be renewed before they expire", rejected)
	}
}

func TestOAuthInvalidTokenIsRenewedOnceAndRetried(t *testing.T) {
	w := newOAuthWorld(t)
	p := testPool(t)
	key := Key{"ns", "oauth-revoked"}
	p.Ensure(key, w.config(OAuth2ClientCredentials{ClientSecret: oauthClientSecret}))
	first := waitReady(t, p, key)
	cs := upstreamClient(t, p, key)
	call := func() error {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "tool-000", Arguments: map[string]any{"text": "x"}})
		return err
	}

	// The server forgets every token it accepted: the next call gets 401
	// invalid_token, one new token is fetched and the call retried.
	w.mu.Lock()
	w.valid = map[string]time.Time{}
	w.mu.Unlock()
	if err := call(); err != nil {
		t.Fatalf("call after revocation: %v", err)
	}
	if n := w.tokenRequests(); n != 2 {
		t.Errorf("token requests = %d, want 2 (one renewal)", n)
	}
	snap, _ := p.Snapshot(key)
	if !snap.ConnectedAt.Equal(first.ConnectedAt) {
		t.Error("the session was dropped")
	}

	// A server that rejects every token: one renewal, then the call fails with a
	// reason, not a loop.
	w.mu.Lock()
	w.revoked = true
	w.mu.Unlock()
	before := w.tokenRequests()
	err := call()
	if err == nil {
		t.Fatal("call with every token rejected succeeded")
	}
	if n := w.tokenRequests() - before; n != 1 {
		t.Errorf("token requests for the rejected call = %d, want exactly 1", n)
	}
	if strings.Contains(err.Error(), "access-token-") {
		t.Errorf("error carries the token: %v", err)
	}
}

func TestOAuthInsufficientScopeNamesTheScope(t *testing.T) {
	w := newOAuthWorld(t)
	w.requireScope = "tools.write"
	p := testPool(t)
	key := Key{"ns", "oauth-scope"}
	p.Ensure(key, w.config(OAuth2ClientCredentials{ClientSecret: oauthClientSecret}))
	snap := waitAuthFailure(t, p, key, ReasonInsufficientScope, ReasonInsufficientScope)
	if msg := snap.LastError.Message; !strings.Contains(msg, `"tools.write"`) || !strings.Contains(msg, `"tools.read"`) {
		t.Errorf("message = %q, want the scope asked for and the one requested", msg)
	}
	if snap.LastError.Transient {
		t.Error("insufficient scope is marked transient")
	}
	w.assertNoLeak(snap)
}

func TestOAuthTokenEndpointRejectsTheClient(t *testing.T) {
	w := newOAuthWorld(t)
	p := testPool(t)
	key := Key{"ns", "oauth-badclient"}
	p.Ensure(key, w.config(OAuth2ClientCredentials{ClientSecret: "wrong-secret-value-777"}))
	snap := waitAuthFailure(t, p, key, ReasonInvalidClient, ReasonInvalidClient)
	if !strings.Contains(snap.LastError.Message, strings.TrimPrefix(w.as.URL, "http://")) || strings.Contains(snap.LastError.Message, "wrong-secret-value-777") {
		t.Errorf("message = %q, want the token endpoint's origin and no secret", snap.LastError.Message)
	}
}

// publicExcept is the public posture, with one loopback address allowed: the MCP
// server's. Everything else the connector dials is judged as on a real cluster.
type publicExcept struct {
	allow     []netip.AddrPort
	public    *egress.ServerRules
	redirects bool
}

func (d publicExcept) DecideDial(dest egress.Destination) egress.Decision {
	if slices.Contains(d.allow, netip.AddrPortFrom(dest.Addr, dest.Port)) {
		return egress.Decision{Allowed: true}
	}
	return d.public.DecideDial(dest)
}

func (d publicExcept) DecideRedirect(r egress.Redirect) egress.Decision {
	if d.redirects {
		return egress.Decision{Allowed: true}
	}
	return d.public.DecideRedirect(r)
}

func publicPosture(t *testing.T, allowed ...*httptest.Server) publicExcept {
	t.Helper()
	set, errs := egress.Compile(nil, egress.Defaults{Posture: egress.PosturePublic})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	d := publicExcept{public: set.ForServer("ns", nil)}
	for _, srv := range allowed {
		d.allow = append(d.allow, netip.MustParseAddrPort(srv.Listener.Addr().String()))
	}
	return d
}

// namedResolver resolves the names it holds and 127.0.0.1 for anything else.
type namedResolver map[string]netip.Addr

func (r namedResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{a}, nil
	}
	if host == "localhost" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func portOf(srv *httptest.Server) string {
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return port
}

func TestOAuthHostileMetadataIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name         string
		setup        func(w *oauthWorld, cfg *Config)
		reason, auth string
		want         []string // substrings of the message
	}{{
		name: "resource_metadata at the cloud metadata address",
		setup: func(w *oauthWorld, cfg *Config) {
			cfg.Egress = publicPosture(w.t, w.mcp)
			w.mcp.Config.Handler = w.log("mcp", http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
				rw.Header().Set("WWW-Authenticate", `Bearer resource_metadata="http://169.254.169.254/latest/meta-data/iam"`)
				rw.WriteHeader(http.StatusUnauthorized)
			}))
		},
		reason: ReasonEgressDenied, auth: ReasonTokenRequestFailed, want: []string{"169.254.169.254"},
	}, {
		name: "resource_metadata on loopback under the public posture",
		setup: func(w *oauthWorld, cfg *Config) {
			cfg.Egress = publicPosture(w.t, w.mcp)
			w.mcp.Config.Handler = w.log("mcp", http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
				rw.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+w.capture.URL+`/prm"`)
				rw.WriteHeader(http.StatusUnauthorized)
			}))
		},
		reason: ReasonEgressDenied, auth: ReasonTokenRequestFailed, want: []string{"127.0.0.1", "public addresses only"},
	}, {
		name: "authorization server on a host the policy does not allow",
		setup: func(w *oauthWorld, cfg *Config) {
			cfg.Egress = publicPosture(w.t, w.mcp)
			cfg.Resolver = namedResolver{"auth.other.test": netip.MustParseAddr("127.0.0.1")}
			w.prm = func(w *oauthWorld) map[string]any {
				return map[string]any{"resource": w.mcp.URL + "/mcp", "authorization_servers": []string{"http://auth.other.test:" + portOf(w.as)}}
			}
		},
		reason: ReasonEgressDenied, auth: ReasonTokenRequestFailed, want: []string{"auth.other.test"},
	}, {
		name: "token endpoint on a host the policy does not allow",
		setup: func(w *oauthWorld, cfg *Config) {
			cfg.Egress = publicPosture(w.t, w.mcp, w.as)
			cfg.Resolver = namedResolver{"tokens.denied.localhost": netip.MustParseAddr("127.0.0.1")}
			w.asMeta = func(w *oauthWorld) map[string]any {
				return map[string]any{"issuer": w.as.URL, "token_endpoint": "http://tokens.denied.localhost:" + portOf(w.capture) + "/token"}
			}
		},
		reason: ReasonEgressDenied, auth: ReasonTokenRequestFailed, want: []string{"token endpoint http://tokens.denied.localhost:", "connection to tokens.denied.localhost"},
	}, {
		name: "token endpoint redirecting to another origin",
		setup: func(w *oauthWorld, cfg *Config) {
			cfg.Egress = allowAll{}
			w.token = func(rw http.ResponseWriter, r *http.Request) {
				http.Redirect(rw, r, w.capture.URL+"/token", http.StatusTemporaryRedirect)
			}
		},
		reason: ReasonRedirectDenied, auth: ReasonTokenRequestFailed, want: []string{"sent only to the token endpoint", "redirected to"},
	}, {
		name: "plain http token endpoint off loopback",
		setup: func(w *oauthWorld, cfg *Config) {
			cfg.Resolver = namedResolver{"tokens.example.test": netip.MustParseAddr("192.0.2.10")}
			w.asMeta = func(w *oauthWorld) map[string]any {
				return map[string]any{"issuer": w.as.URL, "token_endpoint": "http://tokens.example.test:" + portOf(w.capture) + "/token"}
			}
		},
		reason: ReasonTokenRequestFailed, auth: ReasonTokenRequestFailed, want: []string{"is not https", "tokens.example.test"},
	}, {
		// A name that resolves to loopback now could resolve elsewhere at the dial.
		name: "plain http token endpoint named by a host that resolves to loopback",
		setup: func(w *oauthWorld, cfg *Config) {
			cfg.Resolver = namedResolver{"tokens.rebind.test": netip.MustParseAddr("127.0.0.1")}
			w.asMeta = func(w *oauthWorld) map[string]any {
				return map[string]any{"issuer": w.as.URL, "token_endpoint": "http://tokens.rebind.test:" + portOf(w.capture) + "/token"}
			}
		},
		reason: ReasonTokenRequestFailed, auth: ReasonTokenRequestFailed, want: []string{"is not https", "tokens.rebind.test"},
	}, {
		name: "a 50 MiB metadata document",
		setup: func(w *oauthWorld, _ *Config) {
			handler := w.mcp.Config.Handler
			w.mcp.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/.well-known/oauth-protected-resource/mcp" {
					handler.ServeHTTP(rw, r)
					return
				}
				// No Content-Length: the bound must stop the read itself.
				rw.Header().Set("Content-Type", "application/json")
				chunk := []byte(`{"resource":"` + strings.Repeat("a", 1<<20) + `",`)
				for range 50 {
					n, err := rw.Write(chunk)
					w.mu.Lock()
					w.metadataBytes += n
					w.mu.Unlock()
					if err != nil {
						return
					}
					rw.(http.Flusher).Flush()
				}
			})
		},
		reason: ReasonLimitExceeded, auth: ReasonTokenRequestFailed, want: []string{"larger than"},
	}, {
		name:   "issuer mismatch",
		setup:  func(_ *oauthWorld, _ *Config) {},
		reason: ReasonMetadataMismatch, auth: ReasonMetadataMismatch, want: []string{"issuer", "https://evil.example.com:443"},
	}, {
		name: "resource mismatch",
		setup: func(w *oauthWorld, _ *Config) {
			w.prm = func(w *oauthWorld) map[string]any {
				return map[string]any{"resource": "https://evil.example.com/mcp", "authorization_servers": []string{w.as.URL}}
			}
		},
		reason: ReasonMetadataMismatch, auth: ReasonMetadataMismatch, want: []string{"resource", "https://evil.example.com:443/mcp"},
	}} {
		// Each case with a client secret and with a private key: neither the secret nor
		// an assertion may go anywhere but the token endpoint.
		for _, cred := range []string{"secret", "private key"} {
			t.Run(tc.name+" with a "+cred, func(t *testing.T) {
				w := newOAuthWorld(t)
				if tc.name == "issuer mismatch" {
					w.asMeta = func(w *oauthWorld) map[string]any {
						return map[string]any{"issuer": "https://evil.example.com", "token_endpoint": w.as.URL + "/token"}
					}
				}
				creds := OAuth2ClientCredentials{ClientSecret: oauthClientSecret}
				if cred == "private key" {
					creds = OAuth2ClientCredentials{PrivateKey: hostileKeyPEM}
					w.wantMethod, w.pubKey = AuthMethodPrivateKeyJWT, &hostileKey.PublicKey
				}
				cfg := w.config(creds)
				tc.setup(w, &cfg)
				runHostileCase(t, w, cfg, tc.reason, tc.auth, tc.want, tc.name != "token endpoint redirecting to another origin")
			})
		}
	}
}

// hostileKey signs the assertions of the hostile metadata cases.
var hostileKey, hostileKeyPEM = func() (*ecdsa.PrivateKey, []byte) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		panic(err)
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}()

// runHostileCase connects with cfg and checks the failure and that nothing leaked.
func runHostileCase(t *testing.T, w *oauthWorld, cfg Config, reason, auth string, want []string, noTokenRequest bool) {
	t.Helper()
	p := testPool(t)
	key := Key{"ns", "hostile"}
	p.Ensure(key, cfg)
	snap := waitAuthFailure(t, p, key, reason, auth)
	t.Logf("%s: %s", snap.LastError.Reason, snap.LastError.Message)
	for _, want := range want {
		if !strings.Contains(snap.LastError.Message, want) {
			t.Errorf("message = %q, want it to say %q", snap.LastError.Message, want)
		}
	}
	if noTokenRequest {
		w.assertNoTokenRequest()
	}
	w.assertSecretOnlyAtTokenEndpoint()
	w.assertNoLeak(snap)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.requests {
		if r.server == "capture" {
			t.Errorf("the capture server got %s %s", r.method, r.path)
		}
	}
	if w.metadataBytes > 0 {
		t.Logf("the 50 MiB metadata handler got %d bytes out before the connector stopped reading", w.metadataBytes)
	}
	if w.metadataBytes >= 50<<20 {
		t.Errorf("the whole 50 MiB document was sent: %d bytes", w.metadataBytes)
	}
}

// allowAll allows every dial and redirect, so that only the connector's own checks
// stand between a token request and a redirect target.
type allowAll struct{}

func (allowAll) DecideDial(egress.Destination) egress.Decision { return egress.Decision{Allowed: true} }
func (allowAll) DecideRedirect(egress.Redirect) egress.Decision {
	return egress.Decision{Allowed: true}
}

func TestOAuthOpenIDDiscoveryChallengeScopeAndPostOnlyServer(t *testing.T) {
	w := newOAuthWorld(t)
	w.wantMethod = AuthMethodClientSecretPost
	// The authorization server has a tenant path and publishes OpenID discovery only;
	// the challenge names a scope, which wins over scopes_supported.
	meta := w.asMeta
	w.asMeta = nil
	w.prm = func(w *oauthWorld) map[string]any {
		return map[string]any{"resource": w.mcp.URL + "/mcp", "authorization_servers": []string{w.as.URL + "/tenant1"}, "scopes_supported": []string{"tools.read"}}
	}
	handler := w.as.Config.Handler
	w.as.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tenant1/.well-known/openid-configuration" {
			w.log("as", http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
				m := meta(w)
				m["issuer"] = w.as.URL + "/tenant1"
				writeJSON(rw, m)
			})).ServeHTTP(rw, r)
			return
		}
		handler.ServeHTTP(rw, r)
	})
	mcpHandler := w.mcp.Config.Handler
	w.mcp.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mcp" && r.Header.Get("Authorization") == "" {
			rw.Header().Set("WWW-Authenticate", `Bearer scope="mcp:basic mcp:read"`)
			rw.WriteHeader(http.StatusUnauthorized)
			return
		}
		mcpHandler.ServeHTTP(rw, r)
	})
	p := testPool(t)
	key := Key{"ns", "oauth-openid"}
	p.Ensure(key, w.config(OAuth2ClientCredentials{ClientSecret: oauthClientSecret}))
	waitReady(t, p, key)
	w.mu.Lock()
	var form url.Values
	var paths []string
	for _, r := range w.requests {
		paths = append(paths, r.server+" "+r.path)
		if r.path == "/token" {
			form, _ = url.ParseQuery(r.body)
		}
	}
	w.mu.Unlock()
	if form.Get("scope") != "mcp:basic mcp:read" || form.Get("client_secret") != oauthClientSecret {
		t.Errorf("token request form = %v, want the challenge's scope and client_secret_post", form)
	}
	// Well-known protected resource metadata (no resource_metadata in the challenge),
	// then RFC 8414 and OpenID locations in the specification's order.
	want := []string{"mcp /.well-known/oauth-protected-resource/mcp", "as /.well-known/oauth-authorization-server/tenant1",
		"as /.well-known/openid-configuration/tenant1", "as /tenant1/.well-known/openid-configuration", "as /token"}
	var got []string
	for _, p := range paths {
		if !strings.HasSuffix(p, " /mcp") {
			got = append(got, p)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("discovery requests = %v, want %v", got, want)
	}
}

func TestOAuthUpstreamSharesTheTokenSource(t *testing.T) {
	w := newOAuthWorld(t)
	p := testPool(t)
	key := Key{"ns", "oauth-upstream"}
	p.Ensure(key, w.config(OAuth2ClientCredentials{ClientSecret: oauthClientSecret}))
	waitReady(t, p, key)
	cs := upstreamClient(t, p, key)
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatalf("tools/list through the upstream: %v", err)
	}
	if n := w.tokenRequests(); n != 1 {
		t.Errorf("token requests = %d, want 1: the upstream presents the session's token", n)
	}
	w.mu.Lock()
	unauthenticated := 0
	for _, r := range w.requests {
		if r.server == "mcp" && r.path == "/mcp" && r.authorization == "" {
			unauthenticated++
		}
	}
	w.mu.Unlock()
	if unauthenticated != 1 {
		t.Errorf("%d MCP requests went without a token, want only the very first", unauthenticated)
	}
}

// upstreamClient opens a gateway Upstream to key and initializes a go-sdk client over
// it, closed at cleanup.
func upstreamClient(t *testing.T, p *Pool, key Key) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	u, err := p.OpenUpstream(ctx, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "gateway-test"}, nil)
	cs, err := client.Connect(ctx, &connTransport{u}, nil)
	if err != nil {
		_ = u.Close()
		t.Fatalf("initialize through the upstream: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// connTransport hands an existing connection to an mcp.Client.
type connTransport struct{ conn mcp.Connection }

func (c *connTransport) Connect(context.Context) (mcp.Connection, error) { return c.conn, nil }

func TestOAuthUnusableCredentialsFailAtSetup(t *testing.T) {
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(p384)
	if err != nil {
		t.Fatal(err)
	}
	p384PEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	for _, tc := range []struct {
		name  string
		creds OAuth2ClientCredentials
		want  string
	}{
		{"garbage key", OAuth2ClientCredentials{PrivateKey: []byte("not a key at all, just text")}, "not PEM encoded"},
		{"P-384 key", OAuth2ClientCredentials{PrivateKey: p384PEM}, "not on curve P-256"},
		{"no credential", OAuth2ClientCredentials{}, "need a client secret or a private key"},
		{"secret with private_key_jwt", OAuth2ClientCredentials{ClientSecret: oauthClientSecret, AuthMethod: AuthMethodPrivateKeyJWT}, "needs a private key"},
		{"unknown auth method", OAuth2ClientCredentials{ClientSecret: oauthClientSecret, AuthMethod: "tls_client_auth"}, `unknown token endpoint auth method "tls_client_auth"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newOAuthWorld(t)
			p := testPool(t)
			key := Key{"ns", "unusable"}
			p.Ensure(key, w.config(tc.creds))
			snap := waitAuthFailure(t, p, key, ReasonInvalidSpec, ReasonInvalidClient)
			if !strings.Contains(snap.LastError.Message, tc.want) {
				t.Errorf("message = %q, want %q", snap.LastError.Message, tc.want)
			}
			w.assertNoLeak(snap)
			if strings.Contains(fmt.Sprintf("%+v", snap), "not a key at all") {
				t.Errorf("the key material reached the snapshot: %+v", snap)
			}
			w.mu.Lock()
			n := len(w.requests)
			w.mu.Unlock()
			if n != 0 {
				t.Errorf("%d requests went out with unusable credentials", n)
			}
		})
	}
}
