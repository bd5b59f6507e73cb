package connector

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/switchboard-mcp/switchboard/connector/oauth"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// Credentials of the per-caller worlds. Long enough for the redactor.
const (
	// worldProvider is the identity provider the worlds' callers were vouched for by,
	// and the one their per-caller configs name.
	worldProvider   = "corp-idp"
	stsClientID     = "gateway-at-the-sts"
	stsClientSecret = "sts-client-secret-8642"
	idpClientID     = "gateway-at-the-idp"
	idpClientSecret = "idp-client-secret-9753"
	asClientID      = "gateway-at-the-as"
	asClientSecret  = "as-client-secret-1357"
)

// callerWorld is an MCP server that takes per-caller bearer tokens (go-sdk's
// RequireBearerToken) and names the caller a token was issued for, its protected
// resource metadata, a security token service, an enterprise identity provider, the
// server's authorization server (jwt-bearer grants) and a capture server nobody should
// call, all on loopback, with a log of every request any of them saw.
type callerWorld struct {
	t                  *testing.T
	mcp, sts, idp, as  *httptest.Server
	capture            *httptest.Server
	callers            map[string]string // the callers' own tokens -> subject
	mu                 sync.Mutex
	requests           []captured
	valid              map[string]issuedToken // upstream tokens the server takes
	jags               map[string]string      // ID-JAG -> subject
	n                  int
	expiresIn          int    // seconds; 0 omits expires_in
	stsIssuedType      string // overrides the STS's issued_token_type when set
	idpIssuedType      string // overrides the IdP's issued_token_type when set
	stsToken, idpToken http.HandlerFunc
	asMeta             func(w *callerWorld) map[string]any
	prm                func(w *callerWorld) map[string]any
	// bytesSent counts what a 50 MiB token handler managed to send.
	bytesSent int
}

type issuedToken struct {
	subject string
	expiry  time.Time
}

func newCallerWorld(t *testing.T) *callerWorld {
	t.Helper()
	w := &callerWorld{
		t:         t,
		callers:   map[string]string{"caller-token-alice-0123456789": "alice", "caller-token-bob-0123456789": "bob"},
		valid:     map[string]issuedToken{},
		jags:      map[string]string{},
		expiresIn: 3600,
	}
	w.prm = func(w *callerWorld) map[string]any {
		return map[string]any{"resource": w.mcp.URL + "/mcp", "authorization_servers": []string{w.as.URL}, "scopes_supported": []string{"tools.read"}}
	}
	w.asMeta = func(w *callerWorld) map[string]any {
		return map[string]any{
			"issuer": w.as.URL, "token_endpoint": w.as.URL + "/token",
			"grant_types_supported":                 []string{oauth.GrantTypeJWTBearer, "client_credentials"},
			"token_endpoint_auth_methods_supported": []string{AuthMethodClientSecretBasic},
		}
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "per-caller", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "whoami", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			who := "nobody"
			if ti := req.Extra.TokenInfo; ti != nil {
				who = ti.UserID
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: who}}}, nil
		})
	// The server echoes the credential it was sent, and a caller's token too, as a
	// careless server might: neither may reach the gateway's client.
	server.AddTool(&mcp.Tool{Name: "echo-credential", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			text := req.Extra.Header.Get("Authorization") + " / caller-token-alice-0123456789"
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
		})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		it, ok := w.valid[token]
		if !ok || time.Now().After(it.expiry) {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: it.subject, Expiration: it.expiry}, nil
	}
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	var protected http.Handler
	w.mcp = startServer(t, w.log("mcp", http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/oauth-protected-resource/mcp" {
			writeJSON(rw, w.prm(w))
			return
		}
		protected.ServeHTTP(rw, r)
	})))
	protected = auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: w.mcp.URL + "/.well-known/oauth-protected-resource/mcp",
	})(handler)
	w.sts = startServer(t, w.log("sts", http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if w.stsToken != nil {
			w.stsToken(rw, r)
			return
		}
		w.exchange(rw, r)
	})))
	w.idp = startServer(t, w.log("idp", http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if w.idpToken != nil {
			w.idpToken(rw, r)
			return
		}
		w.issueJAG(rw, r)
	})))
	w.as = startServer(t, w.log("as", http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/oauth-authorization-server":
			writeJSON(rw, w.asMeta(w))
		case "/token":
			w.jwtBearer(rw, r)
		default:
			http.NotFound(rw, r)
		}
	})))
	w.capture = startServer(t, w.log("capture", http.NotFoundHandler()))
	return w
}

func (w *callerWorld) log(server string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		w.mu.Lock()
		w.requests = append(w.requests, captured{server, r.Method, r.URL.Path, r.Header.Get("Authorization"), string(body)})
		w.mu.Unlock()
		h.ServeHTTP(rw, r)
	})
}

func oauthError(rw http.ResponseWriter, status int, code, description string) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	writeJSON(rw, map[string]string{"error": code, "error_description": description})
}

// mint issues an upstream token for subject.
func (w *callerWorld) mint(prefix, subject string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	tok := fmt.Sprintf("%s-%s-%04d", prefix, subject, w.n)
	w.valid[tok] = issuedToken{subject: subject, expiry: time.Now().Add(time.Hour)}
	return tok
}

// exchange is the security token service: RFC 8693 for the gateway's client.
func (w *callerWorld) exchange(rw http.ResponseWriter, r *http.Request) {
	id, secret, ok := r.BasicAuth()
	if !ok || id != stsClientID || secret != stsClientSecret {
		oauthError(rw, http.StatusUnauthorized, "invalid_client", "bad client")
		return
	}
	_ = r.ParseForm()
	f := r.PostForm
	subject, known := w.callers[f.Get("subject_token")]
	switch {
	case f.Get("grant_type") != grantTokenExchange:
		oauthError(rw, http.StatusBadRequest, "unsupported_grant_type", "")
	case !known:
		// Echoing the subject token, as a careless service does.
		oauthError(rw, http.StatusBadRequest, "invalid_grant", "unknown subject "+f.Get("subject_token"))
	case f.Get("subject_token_type") != TokenTypeAccessToken || f.Get("requested_token_type") != TokenTypeAccessToken ||
		f.Get("resource") != w.mcp.URL+"/mcp":
		oauthError(rw, http.StatusBadRequest, "invalid_request", "unexpected parameters")
	default:
		tok := w.mint("upstream-token", subject)
		resp := map[string]any{"access_token": tok, "token_type": "Bearer", "issued_token_type": TokenTypeAccessToken}
		if w.stsIssuedType != "" {
			resp["issued_token_type"] = w.stsIssuedType
		}
		if w.expiresIn > 0 {
			resp["expires_in"] = w.expiresIn
		}
		writeJSON(rw, resp)
	}
}

// issueJAG is the enterprise identity provider: ID token for ID-JAG.
func (w *callerWorld) issueJAG(rw http.ResponseWriter, r *http.Request) {
	id, secret, ok := r.BasicAuth()
	if !ok || id != idpClientID || secret != idpClientSecret {
		oauthError(rw, http.StatusUnauthorized, "invalid_client", "bad client")
		return
	}
	_ = r.ParseForm()
	f := r.PostForm
	subject, known := w.callers[f.Get("subject_token")]
	switch {
	case !known:
		oauthError(rw, http.StatusBadRequest, "invalid_grant", "unknown ID token")
	case f.Get("grant_type") != grantTokenExchange || f.Get("subject_token_type") != TokenTypeIDToken ||
		f.Get("requested_token_type") != TokenTypeIDJAG || f.Get("audience") != w.as.URL || f.Get("resource") != w.mcp.URL+"/mcp":
		oauthError(rw, http.StatusBadRequest, "invalid_request", "unexpected parameters")
	default:
		w.mu.Lock()
		w.n++
		jag := fmt.Sprintf("id-jag-%s-%04d", subject, w.n)
		w.jags[jag] = subject
		w.mu.Unlock()
		typ := TokenTypeIDJAG
		if w.idpIssuedType != "" {
			typ = w.idpIssuedType
		}
		writeJSON(rw, map[string]any{"access_token": jag, "issued_token_type": typ, "token_type": "N_A", "expires_in": 300})
	}
}

// jwtBearer is the server's authorization server: ID-JAG for an access token.
func (w *callerWorld) jwtBearer(rw http.ResponseWriter, r *http.Request) {
	id, secret, ok := r.BasicAuth()
	if !ok || id != asClientID || secret != asClientSecret {
		oauthError(rw, http.StatusUnauthorized, "invalid_client", "client_secret_basic required")
		return
	}
	_ = r.ParseForm()
	f := r.PostForm
	w.mu.Lock()
	subject, known := w.jags[f.Get("assertion")]
	w.mu.Unlock()
	if f.Get("grant_type") != oauth.GrantTypeJWTBearer || !known {
		oauthError(rw, http.StatusBadRequest, "invalid_grant", "bad grant")
		return
	}
	tok := w.mint("as-token", subject)
	writeJSON(rw, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": w.expiresIn})
}

// exchangeConfig is a tokenExchange config for the world's server, without an
// operator credential.
func (w *callerWorld) exchangeConfig() Config {
	cfg := fastConfig(w.mcp.URL + "/mcp")
	cfg.Protocol = ProtocolStreamableHTTP
	cfg.PerCaller = &PerCallerAuth{TokenExchange: &TokenExchange{
		Provider: worldProvider, TokenURL: w.sts.URL + "/token", ClientID: stsClientID, ClientSecret: stsClientSecret, AllowInsecureHTTP: true,
	}}
	return cfg
}

// enterpriseConfig is an enterpriseManaged config for the world's server.
func (w *callerWorld) enterpriseConfig() Config {
	cfg := fastConfig(w.mcp.URL + "/mcp")
	cfg.Protocol = ProtocolStreamableHTTP
	cfg.PerCaller = &PerCallerAuth{EnterpriseManaged: &EnterpriseManaged{
		IdentityProvider: IdentityProvider{Name: worldProvider, TokenURL: w.idp.URL + "/token", ClientID: idpClientID, ClientSecret: idpClientSecret,
			AuthorizationServers: []string{w.as.URL}},
		ClientID: asClientID, ClientSecret: asClientSecret, AllowInsecureHTTP: true,
	}}
	return cfg
}

// count returns how many requests server saw at path.
func (w *callerWorld) count(server, path string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, r := range w.requests {
		if r.server == server && r.path == path {
			n++
		}
	}
	return n
}

// bodiesOf returns the forms posted to server.
func (w *callerWorld) formsOf(server string) []url.Values {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []url.Values
	for _, r := range w.requests {
		if r.server == server && r.method == http.MethodPost {
			f, _ := url.ParseQuery(r.body)
			out = append(out, f)
		}
	}
	return out
}

// assertCallerTokensStayed fails when a caller's own token reached anything but the
// token service or identity provider, or a client secret anything but its endpoint.
func (w *callerWorld) assertCallerTokensStayed() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	basic := func(id, secret string) string {
		return base64.StdEncoding.EncodeToString([]byte(id + ":" + secret))
	}
	for _, r := range w.requests {
		for tok := range w.callers {
			if (strings.Contains(r.authorization, tok) || strings.Contains(r.body, tok)) && r.server != "sts" && r.server != "idp" {
				w.t.Errorf("a caller's token reached %s %s %s", r.server, r.method, r.path)
			}
		}
		for server, secret := range map[string]string{"sts": basic(stsClientID, stsClientSecret), "idp": basic(idpClientID, idpClientSecret), "as": basic(asClientID, asClientSecret)} {
			if strings.Contains(r.authorization, secret) && (r.server != server || r.path != "/token") {
				w.t.Errorf("the client secret for %s reached %s %s %s", server, r.server, r.method, r.path)
			}
		}
		if r.server == "capture" {
			w.t.Errorf("the capture server got %s %s", r.method, r.path)
		}
	}
}

// leakText fails when text carries any token or secret of the world.
func (w *callerWorld) assertNoSecretIn(what, text string) {
	w.t.Helper()
	for _, s := range []string{"caller-token-", "upstream-token-", "as-token-", "id-jag-", stsClientSecret, idpClientSecret, asClientSecret} {
		if strings.Contains(text, s) {
			w.t.Errorf("%s carries %q: %s", what, s, text)
		}
	}
}

func alice() *Caller {
	return &Caller{Key: "user:alice", Token: "caller-token-alice-0123456789", Provider: worldProvider, Expiry: time.Now().Add(time.Hour)}
}

func bob() *Caller {
	return &Caller{Key: "user:bob", Token: "caller-token-bob-0123456789", Provider: worldProvider, Expiry: time.Now().Add(time.Hour)}
}

// callerClient opens an Upstream for caller and initializes a go-sdk client over it,
// closed at cleanup.
func callerClient(t *testing.T, p *Pool, key Key, caller *Caller) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	u, err := p.OpenUpstream(ctx, key, caller)
	if err != nil {
		return nil, err
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "gateway-test"}, nil)
	cs, err := client.Connect(ctx, &connTransport{u}, nil)
	if err != nil {
		_ = u.Close()
		return nil, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, nil
}

func mustCallerClient(t *testing.T, p *Pool, key Key, caller *Caller) *mcp.ClientSession {
	t.Helper()
	cs, err := callerClient(t, p, key, caller)
	if err != nil {
		t.Fatalf("initialize through the upstream: %v", err)
	}
	return cs
}

// whoami calls the tool that names the caller the server saw.
func whoami(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "whoami"})
	if err != nil {
		t.Fatalf("whoami: %v", err)
	}
	return res.Content[0].(*mcp.TextContent).Text
}

// waitPerCaller waits for the metadata-only session to be Ready.
func waitPerCaller(t *testing.T, p *Pool, key Key) Snapshot {
	t.Helper()
	return waitFor(t, p, key, "Ready per caller", func(s Snapshot) bool { return s.State == StateReady && s.ToolsPerCaller })
}

func TestTokenExchangeGivesEachCallerItsOwnToken(t *testing.T) {
	w := newCallerWorld(t)
	p := testPool(t)
	key := Key{"ns", "per-caller"}
	p.Ensure(key, w.exchangeConfig())
	snap := waitPerCaller(t, p, key)
	if !p.PerCaller(key) {
		t.Error("PerCaller = false for a tokenExchange server")
	}
	if len(snap.Tools) != 0 || snap.Discovered || snap.Transport != TransportStreamableHTTP {
		t.Errorf("snapshot = tools %v, discovered %v, transport %q; want no tools, per caller, Streamable HTTP", snap.Tools, snap.Discovered, snap.Transport)
	}

	a := mustCallerClient(t, p, key, alice())
	b := mustCallerClient(t, p, key, bob())
	for range 5 {
		if got := whoami(t, a); got != "alice" {
			t.Errorf("alice's upstream session reached the server as %q", got)
		}
		if got := whoami(t, b); got != "bob" {
			t.Errorf("bob's upstream session reached the server as %q", got)
		}
	}
	// A second session of alice's uses her cached token.
	a2 := mustCallerClient(t, p, key, alice())
	if got := whoami(t, a2); got != "alice" {
		t.Errorf("alice's second session reached the server as %q", got)
	}
	forms := w.formsOf("sts")
	if len(forms) != 2 {
		t.Errorf("the token service got %d exchanges, want 2 (one per caller, reused across requests and sessions)", len(forms))
	}
	for _, f := range forms {
		if f.Get("subject_token_type") != TokenTypeAccessToken || f.Get("resource") != w.mcp.URL+"/mcp" || f.Has("audience") {
			t.Errorf("exchange form = %v", f)
		}
	}
	// The server saw each caller's upstream token only, never the operator acting.
	w.mu.Lock()
	tokens := map[string]bool{}
	for _, r := range w.requests {
		if r.server == "mcp" && r.path == "/mcp" {
			if !strings.HasPrefix(r.authorization, "Bearer upstream-token-") {
				t.Errorf("the server got a request with Authorization %q", r.authorization)
			}
			tokens[r.authorization] = true
		}
	}
	w.mu.Unlock()
	if len(tokens) != 2 {
		t.Errorf("the server saw %d distinct tokens, want 2", len(tokens))
	}
	w.assertCallerTokensStayed()
	if n := w.count("mcp", "/mcp"); n == 0 {
		t.Error("no MCP request reached the server")
	}
}

func TestTokenExchangeRenewsBeforeExpiryAndOnceOn401(t *testing.T) {
	w := newCallerWorld(t)
	w.expiresIn = 1
	p := testPool(t)
	key := Key{"ns", "renew"}
	p.Ensure(key, w.exchangeConfig())
	waitPerCaller(t, p, key)
	a := mustCallerClient(t, p, key, alice())
	whoami(t, a)
	before := len(w.formsOf("sts"))
	time.Sleep(1100 * time.Millisecond) // past the token's half life and its end
	if got := whoami(t, a); got != "alice" {
		t.Errorf("after renewal the server saw %q", got)
	}
	if after := len(w.formsOf("sts")); after != before+1 {
		t.Errorf("exchanges = %d after the token's life, want %d", after, before+1)
	}

	// The server forgets every token: one renewal, the request succeeds.
	w.expiresIn = 3600
	time.Sleep(1100 * time.Millisecond)
	whoami(t, a)
	w.mu.Lock()
	clear(w.valid)
	w.mu.Unlock()
	before = len(w.formsOf("sts"))
	if got := whoami(t, a); got != "alice" {
		t.Errorf("after a 401 the server saw %q", got)
	}
	if after := len(w.formsOf("sts")); after != before+1 {
		t.Errorf("exchanges after a 401 = %d, want %d", after, before+1)
	}
}

func TestAnExpiredCallerTokenDropsTheCallersTokens(t *testing.T) {
	w := newCallerWorld(t)
	p := testPool(t)
	key := Key{"ns", "expiry"}
	p.Ensure(key, w.exchangeConfig())
	waitPerCaller(t, p, key)
	a := mustCallerClient(t, p, key, alice())
	whoami(t, a)
	exchanges := len(w.formsOf("sts"))

	expired := alice()
	expired.Expiry = time.Now().Add(-time.Second)
	p.PresentCaller(key, *expired)
	_, err := a.CallTool(context.Background(), &mcp.CallToolParams{Name: "whoami"})
	if err == nil || !strings.Contains(err.Error(), "caller's token has expired") {
		t.Fatalf("call after the caller's token expired: %v, want a refusal naming the expiry", err)
	}
	w.assertNoSecretIn("the error", err.Error())
	if n := len(w.formsOf("sts")); n != exchanges {
		t.Errorf("exchanges = %d, want %d: an expired token is not exchanged", n, exchanges)
	}
	// A fresh token: a new exchange, the calls go on.
	p.PresentCaller(key, *alice())
	if got := whoami(t, a); got != "alice" {
		t.Errorf("after a fresh token the server saw %q", got)
	}
	if n := len(w.formsOf("sts")); n != exchanges+1 {
		t.Errorf("exchanges = %d, want %d: the dropped token is not reused", n, exchanges+1)
	}

	// An expired caller, or none, opens no upstream session.
	if _, err := p.OpenUpstream(context.Background(), key, expired); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("OpenUpstream with an expired caller: %v", err)
	}
	if _, err := p.OpenUpstream(context.Background(), key, nil); err == nil || !strings.Contains(err.Error(), "names no caller") {
		t.Errorf("OpenUpstream without a caller: %v", err)
	}
}

func TestEnterpriseManagedGivesEachCallerItsOwnToken(t *testing.T) {
	w := newCallerWorld(t)
	p := testPool(t)
	key := Key{"ns", "enterprise"}
	p.Ensure(key, w.enterpriseConfig())
	waitPerCaller(t, p, key)
	if n := len(w.formsOf("idp")) + len(w.formsOf("as")); n != 0 {
		t.Errorf("the metadata check made %d token requests", n)
	}
	a := mustCallerClient(t, p, key, alice())
	b := mustCallerClient(t, p, key, bob())
	for range 3 {
		if got := whoami(t, a); got != "alice" {
			t.Errorf("alice reached the server as %q", got)
		}
		if got := whoami(t, b); got != "bob" {
			t.Errorf("bob reached the server as %q", got)
		}
	}
	idp, as := w.formsOf("idp"), w.formsOf("as")
	if len(idp) != 2 || len(as) != 2 {
		t.Fatalf("identity provider got %d exchanges and authorization server %d grants, want 2 and 2", len(idp), len(as))
	}
	for _, f := range as {
		if f.Get("grant_type") != oauth.GrantTypeJWTBearer || !strings.HasPrefix(f.Get("assertion"), "id-jag-") || f.Has("client_secret") {
			t.Errorf("jwt-bearer form = %v", f)
		}
	}
	w.mu.Lock()
	for _, r := range w.requests {
		if r.server == "mcp" && r.path == "/mcp" && !strings.HasPrefix(r.authorization, "Bearer as-token-") {
			t.Errorf("the server got a request with Authorization %q", r.authorization)
		}
	}
	w.mu.Unlock()
	w.assertCallerTokensStayed()
}

func TestPerCallerBesideAnOperatorCredential(t *testing.T) {
	w := newCallerWorld(t)
	// The authorization server also grants the operator its own token.
	w.valid["operator-token-0123456789"] = issuedToken{subject: "operator", expiry: time.Now().Add(time.Hour)}
	as := w.as.Config.Handler
	w.as.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" && r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			if f, _ := url.ParseQuery(string(body)); f.Get("grant_type") == "client_credentials" {
				writeJSON(rw, map[string]any{"access_token": "operator-token-0123456789", "token_type": "Bearer", "expires_in": 3600})
				return
			}
		}
		as.ServeHTTP(rw, r)
	})
	cfg := w.exchangeConfig()
	cfg.OAuth2 = &OAuth2ClientCredentials{ClientID: oauthClientID, ClientSecret: oauthClientSecret, AllowInsecureHTTP: true}
	p := testPool(t)
	key := Key{"ns", "both"}
	p.Ensure(key, cfg)
	snap := waitReady(t, p, key)
	if snap.ToolsPerCaller || len(snap.Tools) != 2 {
		t.Errorf("with an operator credential the session discovers the tools itself: per caller %v, tools %v", snap.ToolsPerCaller, toolNames(snap))
	}
	operatorRequests := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		n := 0
		for _, r := range w.requests {
			if r.server == "mcp" && strings.Contains(r.authorization, "operator-token") {
				n++
			}
		}
		return n
	}
	before := operatorRequests()
	if before == 0 {
		t.Error("the operator's session never presented its own token")
	}
	a := mustCallerClient(t, p, key, alice())
	if got := whoami(t, a); got != "alice" {
		t.Errorf("alice reached the server as %q, not with her own token", got)
	}
	if after := operatorRequests(); after != before {
		t.Errorf("alice's upstream session presented the operator's token %d times", after-before)
	}
}

func TestPerCallerTokensAreDroppedWhenTheConfigChanges(t *testing.T) {
	w := newCallerWorld(t)
	p := testPool(t)
	key := Key{"ns", "rotate"}
	cfg := w.exchangeConfig()
	p.Ensure(key, cfg)
	waitPerCaller(t, p, key)
	a := mustCallerClient(t, p, key, alice())
	whoami(t, a)
	if n := p.callers.len(); n != 1 {
		t.Fatalf("cache entries = %d, want 1", n)
	}
	cfg = w.exchangeConfig()
	cfg.PerCaller.TokenExchange.Scopes = []string{"tools.read"}
	cfg.PerCaller.TokenExchange.AllowedScopes = []string{"tools.read"}
	p.Ensure(key, cfg)
	testutil.Eventually(t, waitTimeout, "the old config's entries dropped", func() error {
		if n := p.callers.len(); n != 0 {
			return fmt.Errorf("%d entries", n)
		}
		return nil
	})
	// The next call, on a new session of alice's, exchanges her token again.
	before := len(w.formsOf("sts"))
	a = mustCallerClient(t, p, key, alice())
	if got := whoami(t, a); got != "alice" {
		t.Errorf("after the change the server saw %q", got)
	}
	if after := len(w.formsOf("sts")); after != before+1 {
		t.Errorf("exchanges = %d after the config changed, want %d", after, before+1)
	}
	p.Remove(key)
	testutil.Eventually(t, waitTimeout, "the removed server's entries dropped", func() error {
		if n := p.callers.len(); n != 0 {
			return fmt.Errorf("%d entries", n)
		}
		return nil
	})
}

func TestMetadataOnlySessionReportsWhatItCanCheck(t *testing.T) {
	w := newCallerWorld(t)
	p := testPool(t)
	key := Key{"ns", "metadata"}
	p.Ensure(key, w.enterpriseConfig())
	snap := waitPerCaller(t, p, key)
	if snap.LastError != nil || snap.ConnectedAt.IsZero() {
		t.Errorf("snapshot = %+v", snap)
	}
	if n := w.count("mcp", "/mcp"); n != 0 {
		t.Errorf("the operator's session sent %d MCP requests: it has no credential to call the server with", n)
	}
	if n := w.count("mcp", "/.well-known/oauth-protected-resource/mcp") + w.count("as", "/.well-known/oauth-authorization-server"); n < 2 {
		t.Errorf("metadata requests = %d, want the server's and its authorization server's", n)
	}

	// A server whose metadata names another resource is not Ready, with the reason.
	w2 := newCallerWorld(t)
	w2.prm = func(w *callerWorld) map[string]any {
		return map[string]any{"resource": "https://evil.example.com/mcp", "authorization_servers": []string{w.as.URL}}
	}
	key2 := Key{"ns", "mismatch"}
	p.Ensure(key2, w2.exchangeConfig())
	snap = waitAuthFailure(t, p, key2, ReasonMetadataMismatch, ReasonMetadataMismatch)
	if !snap.ToolsPerCaller || snap.Transport != TransportStreamableHTTP {
		t.Errorf("a failing metadata check keeps the transport the upstreams open with: %+v", snap)
	}
}

// TestPerCallerHostileCases: every refusal names its reason, carries no secret, and
// sends nothing further: no token to the server, nothing to the capture server, no
// grant to the authorization server after a bad assertion.
func TestPerCallerHostileCases(t *testing.T) {
	for _, tc := range []struct {
		name       string
		enterprise bool
		setup      func(w *callerWorld, cfg *Config)
		reason     string
		want       []string
	}{{
		name: "token service on an address egress denies",
		setup: func(w *callerWorld, cfg *Config) {
			cfg.Egress = publicPosture(w.t, w.mcp, w.as)
		},
		reason: ReasonEgressDenied, want: []string{"token exchange at http://127.0.0.1:", "public addresses only"},
	}, {
		name:       "identity provider on an address egress denies",
		enterprise: true,
		setup: func(w *callerWorld, cfg *Config) {
			cfg.Egress = publicPosture(w.t, w.mcp, w.as)
		},
		reason: ReasonEgressDenied, want: []string{"identity assertion exchange at", "public addresses only"},
	}, {
		name:       "authorization server on an address egress denies",
		enterprise: true,
		setup: func(w *callerWorld, cfg *Config) {
			cfg.Egress = publicPosture(w.t, w.mcp, w.idp)
		},
		reason: ReasonEgressDenied, want: []string{"public addresses only"},
	}, {
		name: "token request redirected to another origin",
		setup: func(w *callerWorld, cfg *Config) {
			cfg.Egress = allowAll{}
			w.stsToken = func(rw http.ResponseWriter, r *http.Request) {
				http.Redirect(rw, r, w.capture.URL+"/token", http.StatusTemporaryRedirect)
			}
		},
		reason: ReasonRedirectDenied, want: []string{"redirected to"},
	}, {
		name:       "identity provider redirecting to another origin",
		enterprise: true,
		setup: func(w *callerWorld, cfg *Config) {
			cfg.Egress = allowAll{}
			w.idpToken = func(rw http.ResponseWriter, r *http.Request) {
				http.Redirect(rw, r, w.capture.URL+"/token", http.StatusPermanentRedirect)
			}
		},
		reason: ReasonRedirectDenied, want: []string{"redirected to"},
	}, {
		name: "a 50 MiB token response",
		setup: func(w *callerWorld, _ *Config) {
			w.stsToken = func(rw http.ResponseWriter, _ *http.Request) {
				rw.Header().Set("Content-Type", "application/json")
				chunk := []byte(`{"access_token":"` + strings.Repeat("a", 1<<20))
				for range 50 {
					n, err := rw.Write(chunk)
					w.mu.Lock()
					w.bytesSent += n
					w.mu.Unlock()
					if err != nil {
						return
					}
					rw.(http.Flusher).Flush()
				}
			}
		},
		reason: ReasonLimitExceeded, want: []string{"token exchange at", "larger than"},
	}, {
		name:       "authorization server metadata naming another issuer",
		enterprise: true,
		setup: func(w *callerWorld, _ *Config) {
			w.asMeta = func(w *callerWorld) map[string]any {
				return map[string]any{"issuer": "https://evil.example.com", "token_endpoint": w.as.URL + "/token"}
			}
		},
		reason: ReasonMetadataMismatch, want: []string{"issuer", "https://evil.example.com:443"},
	}, {
		name:       "identity provider answering another token type",
		enterprise: true,
		setup: func(w *callerWorld, _ *Config) {
			w.idpIssuedType = TokenTypeAccessToken
		},
		reason: ReasonTokenRequestFailed, want: []string{"identity assertion exchange at", "issued token type \"" + TokenTypeAccessToken + "\", not the " + TokenTypeIDJAG},
	}, {
		name: "token service answering another token type",
		setup: func(w *callerWorld, _ *Config) {
			w.stsIssuedType = TokenTypeJWT
		},
		reason: ReasonTokenRequestFailed, want: []string{"token exchange at", "not the " + TokenTypeAccessToken},
	}, {
		name: "token service refusing the caller and echoing its token",
		setup: func(w *callerWorld, _ *Config) {
			w.callers = map[string]string{} // nobody it knows
		},
		reason: ReasonInvalidGrant, want: []string{"token exchange at", "refused the grant: answered 400 invalid_grant: unknown subject [redacted]"},
	}, {
		name: "token service refusing the client",
		setup: func(_ *callerWorld, cfg *Config) {
			cfg.PerCaller.TokenExchange.ClientSecret = "wrong-secret-value-777"
		},
		reason: ReasonInvalidClient, want: []string{"token exchange at", "rejected client \"" + stsClientID + "\""},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newCallerWorld(t)
			callers := w.callers
			cfg := w.exchangeConfig()
			if tc.enterprise {
				cfg = w.enterpriseConfig()
			}
			tc.setup(w, &cfg)
			p := testPool(t)
			key := Key{"ns", "hostile"}
			p.Ensure(key, cfg)
			<-p.Settled(key)
			_, err := callerClient(t, p, key, alice())
			if err == nil {
				t.Fatal("the upstream session initialized; want a refusal")
			}
			msg := err.Error()
			t.Logf("refused: %s", msg)
			if !strings.Contains(msg, tc.reason+": ") {
				t.Errorf("error = %q, want reason %s", msg, tc.reason)
			}
			for _, want := range tc.want {
				if !strings.Contains(msg, want) {
					t.Errorf("error = %q, want it to say %q", msg, want)
				}
			}
			w.assertNoSecretIn("the error", msg)
			w.callers = callers
			w.assertCallerTokensStayed()
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, r := range w.requests {
				if r.server == "mcp" && r.path == "/mcp" && r.authorization != "" {
					t.Errorf("the server got a token: %s %s", r.method, r.authorization)
				}
				if tc.enterprise && r.server == "as" && r.path == "/token" {
					t.Errorf("the authorization server got a grant after the refusal")
				}
			}
			if w.bytesSent >= 50<<20 {
				t.Errorf("the whole 50 MiB response was sent")
			}
			snap, _ := p.Snapshot(key)
			w.assertNoSecretIn("the snapshot", fmt.Sprintf("%+v %v", snap, snap.LastError))
		})
	}
}

func TestCallerCacheIsBoundedAndPurgedPerConfig(t *testing.T) {
	c := newCallerCache(2)
	t1, t2 := &callerTokens{}, &callerTokens{}
	e := func() *callerEntry { return &callerEntry{} }
	a := c.getOrAdd(callerCacheKey{t1, "a"}, e())
	c.getOrAdd(callerCacheKey{t1, "b"}, e())
	if got := c.getOrAdd(callerCacheKey{t1, "a"}, e()); got != a {
		t.Error("a second lookup made a new entry")
	}
	c.getOrAdd(callerCacheKey{t2, "a"}, e()) // evicts t1/b, the least recently used
	if c.getOrAdd(callerCacheKey{t1, "b"}, nil) != nil {
		t.Error("the least recently used entry was kept beyond the bound")
	}
	if c.getOrAdd(callerCacheKey{t2, "a"}, nil) == a {
		t.Error("two servers share a caller's entry")
	}
	c.purge(t1)
	if c.len() != 1 || c.getOrAdd(callerCacheKey{t1, "a"}, nil) != nil {
		t.Errorf("after purging one config %d entries remain", c.len())
	}
}

func TestOneExchangeForConcurrentFirstRequestsOfOneCaller(t *testing.T) {
	w := newCallerWorld(t)
	p := testPool(t)
	key := Key{"ns", "concurrent"}
	p.Ensure(key, w.exchangeConfig())
	waitPerCaller(t, p, key)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			cs, err := callerClient(t, p, key, alice())
			if err == nil {
				_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "whoami"})
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := len(w.formsOf("sts")); n != 1 {
		t.Errorf("8 sessions of one caller starting at once made %d exchanges, want 1", n)
	}
}

// BenchmarkCallerCacheEntryMemory prints what a full cache of caller entries holds, with
// tokens the size of real JWTs (a 1 KiB caller token, an 800-byte upstream token).
func BenchmarkCallerCacheEntryMemory(b *testing.B) {
	jwtLike := func(n, i int) string { return fmt.Sprintf("%0*d", n, i) }
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c := newCallerCache(DefaultMaxCallerTokens)
		tokens := &callerTokens{cache: c}
		for i := range DefaultMaxCallerTokens {
			caller := Caller{Key: fmt.Sprintf("user:%d", i), Token: jwtLike(1024, i), Provider: worldProvider, Expiry: time.Now().Add(time.Hour)}
			e := tokens.present(caller)
			tok := jwtLike(800, i)
			e.remember(tok)
			e.reuse = oauth2.ReuseTokenSourceWithExpiry(&oauth2.Token{AccessToken: tok, TokenType: "Bearer", Expiry: time.Now().Add(time.Hour)}, nil, tokenRefreshMargin)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perEntry := float64(after.HeapAlloc-before.HeapAlloc) / DefaultMaxCallerTokens
		b.ReportMetric(perEntry, "B/entry")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB/full-cache")
		runtime.KeepAlive(c)
	}
}

func TestTheCallersTokensAreScrubbedFromWhatTheServerSends(t *testing.T) {
	w := newCallerWorld(t)
	p := testPool(t)
	key := Key{"ns", "echo"}
	p.Ensure(key, w.exchangeConfig())
	waitPerCaller(t, p, key)
	a := mustCallerClient(t, p, key, alice())
	res, err := a.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo-credential"})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if strings.Count(text, redactedText) != 2 {
		t.Errorf("the server's echo reached the client as %q, want both tokens redacted", text)
	}
	w.assertNoSecretIn("the relayed result", text)
}
