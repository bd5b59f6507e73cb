package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
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
	headers   []string // every header of every request it got, as "Name: value"
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
		for name, values := range r.Header {
			for _, v := range values {
				w.headers = append(w.headers, name+": "+v)
			}
		}
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

// assertNoCallerTokenReachedTheServer fails when any header of any request the MCP
// server got carries a caller's own token (the clients send it in a cookie too).
func (w *perCallerWorld) assertNoCallerTokenReachedTheServer() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.headers {
		for _, token := range []string{aliceInbound, bobInbound, carolInbound} {
			if strings.Contains(h, token) {
				w.t.Errorf("a caller's own token reached the server: %s", h)
			}
		}
	}
}

// seenAuthorizations returns the Authorization headers the MCP server got.
func (w *perCallerWorld) seenAuthorizations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen...)
}

// corpIDP is the MCPIdentityProvider the per-caller server names, whose tokenExchange is
// the world's token service; partnerIDP is another provider.
const (
	corpIDP    = "corp-idp"
	partnerIDP = "partner-idp"
)

// vouched authenticates callers as an identity provider vouched for them: token ->
// caller. A caller with no provider is a Kubernetes (ServiceAccount) caller.
type vouched map[string]vouchedCaller

// vouchedCaller is a caller's username and the provider that vouched for its token.
type vouchedCaller struct{ user, provider string }

func (v vouched) AuthenticateRequest(_ context.Context, r *http.Request) (*identity.Caller, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	c, known := v[token]
	if !ok || !known {
		return nil, identity.ErrUnauthenticated
	}
	return &identity.Caller{Username: c.user, Key: c.user, Provider: c.provider}, nil
}

// corp returns the caller user as corpIDP vouched for it.
func corp(user string) vouchedCaller { return vouchedCaller{user: "oidc:" + user, provider: corpIDP} }

// perCallerGateway is a gateway in front of the world's server, configured as the
// controller maps an MCPServer with tokenExchange naming corpIDP and no operator
// credential, with the given callers authenticated and allowed use on it.
func perCallerGateway(t *testing.T, w *perCallerWorld, callers vouched) *perCallerFront {
	t.Helper()
	h := &harness{t: t, key: connector.Key{Namespace: namespace, Name: "notes"}, audit: &logLines{}, registry: prometheus.NewRegistry()}
	f := &perCallerFront{harness: h, log: &logLines{}}
	pool, err := connector.NewPool(connector.Options{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Logger: f.log.logger()})
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
			Provider: corpIDP, TokenURL: w.sts.URL + "/token", ClientID: stsClientID, ClientSecret: stsClientSecret, AllowInsecureHTTP: true,
		}},
	})
	testutil.Eventually(t, 10*time.Second, "the pool's session to check the server's metadata", func() error {
		if snap, _ := pool.Snapshot(h.key); snap.State != connector.StateReady || !snap.ToolsPerCaller {
			return fmt.Errorf("state %s, tools per caller %v: %w", snap.State, snap.ToolsPerCaller, snap.LastError)
		}
		return nil
	})
	allowed := map[string][]string{}
	for _, c := range callers {
		allowed[c.user] = []string{"mcpservers/" + h.key.Name, "mcptoolsets/" + perCallerToolset}
	}
	var grants atomic.Pointer[map[string][]string]
	grants.Store(&allowed)
	sar := toolsetGrantsFrom(&grants)
	gw, err := gateway.New(gateway.Options{Pool: pool, NewToolIndex: catalogToolIndex, Audit: h.audit.logger(), Logger: f.log.logger(), Registerer: h.registry,
		Authenticator: callers, Access: sar.AuthorizationV1().SubjectAccessReviews()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	h.gw = gw
	gw.Update(readyServer(h.key))
	// A toolset with the server as its one origin.
	gw.UpdateToolset(&mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: perCallerToolset, Generation: 1},
		Spec:       mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: h.key.Name}}},
	})
	h.front = httptest.NewServer(gw.Handler())
	t.Cleanup(h.front.Close)
	return f
}

// perCallerFront is the gateway of a per-caller world, with its and the pool's log.
type perCallerFront struct {
	*harness
	log *logLines
}

// assertNoSecrets fails when a caller's own token, a token the token service issued or
// the gateway's client secret is in the audit log, the gateway's or the pool's log, or
// the metrics.
func (f *perCallerFront) assertNoSecrets(t *testing.T) {
	t.Helper()
	var metrics bytes.Buffer
	families, err := f.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if _, err := expfmt.MetricFamilyToText(&metrics, mf); err != nil {
			t.Fatal(err)
		}
	}
	places := map[string]string{"audit log": f.audit.all(), "log": f.log.all(), "metrics": metrics.String()}
	for where, text := range places {
		for _, secret := range []string{aliceInbound, bobInbound, carolInbound, "upstream-alice", "upstream-bob", stsClientSecret} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s carries %q", where, secret)
			}
		}
	}
	if f.audit.all() == "" {
		t.Error("the audit log is empty")
	}
}

// perCallerToolset is the toolset perCallerGateway serves over the server.
const perCallerToolset = "per-caller"

// toolsetURL is the gateway endpoint of the toolset perCallerGateway serves.
func (h *harness) toolsetURL() string {
	return h.front.URL + gatewaypath.Toolset(namespace, perCallerToolset)
}

// connectAs opens a client session through the gateway's server endpoint with token,
// in the era version names.
func (h *harness) connectAs(token, version string) (*mcp.ClientSession, error) {
	return h.connectAt(h.url(), token, version)
}

// connectAt opens a client session at endpoint with token, in the era version names.
func (h *harness) connectAt(endpoint, token, version string) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
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
			h := perCallerGateway(t, w, vouched{aliceInbound: corp("alice"), bobInbound: corp("bob")})
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
				distinct[a] = true
			}
			if !distinct["Bearer upstream-alice"] || !distinct["Bearer upstream-bob"] || len(distinct) != 2 {
				t.Errorf("the server saw Authorization %v; want Bearer upstream-alice and Bearer upstream-bob only", keysOf(distinct))
			}
			h.assertNoSecrets(t)
			w.assertNoCallerTokenReachedTheServer()
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
			h := perCallerGateway(t, w, vouched{aliceInbound: corp("alice"), carolInbound: corp("carol")})
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
			for _, want := range []string{"InvalidGrant", "token exchange", "invalid_grant"} {
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
			if era.version == sessionlessVersion {
				// The go-sdk client falls back to initialize when server/discover is
				// refused; a sessionless tools/call itself gets the same answer.
				status, code, text := sessionlessCall(t, h.url(), carolInbound, "whoami")
				t.Logf("carol's sessionless tools/call was answered: HTTP %d, %d %s", status, code, text)
				if code == 0 || !strings.Contains(text, "InvalidGrant") || !strings.Contains(text, "invalid_grant") {
					t.Errorf("carol's sessionless tools/call was answered HTTP %d, JSON-RPC error %d %q; want an error naming the refused exchange", status, code, text)
				}
				if strings.Contains(text, carolInbound) {
					t.Errorf("carol's sessionless tools/call was answered with her token: %s", text)
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
			// Every refusal of carol is audited under her name with its reason: a
			// refused session, or a call answered with the refused exchange.
			refusals := h.audit.matching(`"caller"="oidc:carol"`, "InvalidGrant")
			if len(refusals) == 0 {
				t.Errorf("no audit line names carol's refusal with reason InvalidGrant:\n%s", h.audit.all())
			}
			for _, line := range refusals {
				t.Logf("audited: %s", line)
			}
			// Alice is unaffected.
			a, err := h.connectAs(aliceInbound, era.version)
			if err != nil {
				t.Fatalf("connecting as alice: %v", err)
			}
			if got, err := callText(t, a, "whoami", nil); err != nil || got != "alice" {
				t.Errorf("whoami as alice answered %q, %v", got, err)
			}
			h.assertNoSecrets(t)
			w.assertNoCallerTokenReachedTheServer()
		})
	}
}

// Through a toolset whose origin is the server, each caller's calls reach the server
// with that caller's own exchanged token, in both protocol eras; neither caller's own
// token reaches the server. A caller whose exchange is refused is served none of the
// origin's tools.
func TestPerCallerCredentialsFollowTheCallerThroughAToolset(t *testing.T) {
	for _, era := range []struct{ name, version string }{
		{"session client (2025-11-25)", sessionEra},
		{"sessionless client (2026-07-28)", sessionlessVersion},
	} {
		t.Run(era.name, func(t *testing.T) {
			w := newPerCallerWorld(t, map[string]string{aliceInbound: "alice", bobInbound: "bob"})
			h := perCallerGateway(t, w, vouched{aliceInbound: corp("alice"), bobInbound: corp("bob"), carolInbound: corp("carol")})
			for _, c := range []struct{ token, subject string }{{aliceInbound, "alice"}, {bobInbound, "bob"}} {
				cs, err := h.connectAt(h.toolsetURL(), c.token, era.version)
				if err != nil {
					t.Fatalf("connecting to the toolset as %s: %v", c.subject, err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				tools, err := cs.ListTools(ctx, nil)
				cancel()
				if err != nil {
					t.Fatalf("tools/list on the toolset as %s: %v", c.subject, err)
				}
				var names []string
				for _, tool := range tools.Tools {
					names = append(names, tool.Name)
				}
				if len(names) != 1 || names[0] != "notes_whoami" {
					t.Fatalf("the toolset lists %v for %s; want notes_whoami, listed with %s's own credentials", names, c.subject, c.subject)
				}
				got, err := callText(t, cs, "notes_whoami", nil)
				if err != nil || got != c.subject {
					t.Errorf("notes_whoami as %s answered %q, %v; want the server to be called for %s", c.subject, got, err, c.subject)
				}
			}
			// Carol, whose exchange the token service refuses, is served none of the
			// origin's tools, and nothing reaches the server for her.
			cs, err := h.connectAt(h.toolsetURL(), carolInbound, era.version)
			if err != nil {
				t.Fatalf("connecting to the toolset as carol: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			tools, err := cs.ListTools(ctx, nil)
			cancel()
			if err != nil || len(tools.Tools) != 0 {
				t.Errorf("tools/list on the toolset as carol = %v, %v; want no tools", tools, err)
			}
			// Her call of the tool she cannot see says why: the origin's tools could not
			// be listed for her, and the refused exchange's reason.
			if _, err := callText(t, cs, "notes_whoami", nil); err == nil {
				t.Error("carol called notes_whoami through the toolset")
			} else if strings.Contains(err.Error(), carolInbound) {
				t.Errorf("carol's refused call carries her token: %v", err)
			} else if !strings.Contains(err.Error(), "could not be listed") || !strings.Contains(err.Error(), "invalid_grant") {
				t.Errorf("carol's refused call = %v; want it to name the origin whose tools could not be listed and the refused exchange", err)
			}
			distinct := map[string]bool{}
			for _, a := range w.seenAuthorizations() {
				if strings.Contains(a, aliceInbound) || strings.Contains(a, bobInbound) {
					t.Errorf("a caller's own token reached the server: %q", a)
				}
				distinct[a] = true
			}
			if !distinct["Bearer upstream-alice"] || !distinct["Bearer upstream-bob"] || len(distinct) != 2 {
				t.Errorf("the server saw Authorization %v; want Bearer upstream-alice and Bearer upstream-bob only", keysOf(distinct))
			}
			h.assertNoSecrets(t)
			w.assertNoCallerTokenReachedTheServer()
		})
	}
}

// A per-caller server exchanges only the tokens of callers its identity provider
// vouched for. A ServiceAccount caller (whose token the API server would accept) and a
// caller of another provider are refused with 403 and CallerNotAllowed, at a server and
// through a toolset, in both eras: the token service never receives their tokens, the
// server gets nothing for them, and the refusal is audited under their name; the
// provider's own callers go on.
func TestPerCallerRefusesCallersTheServersProviderDidNotVouchFor(t *testing.T) {
	const (
		saInbound      = "inbound-token-serviceaccount-2f7a90"
		partnerInbound = "inbound-token-partner-6b13d4"
	)
	for _, era := range []struct{ name, version string }{
		{"session client (2025-11-25)", sessionEra},
		{"sessionless client (2026-07-28)", sessionlessVersion},
	} {
		t.Run(era.name, func(t *testing.T) {
			w := newPerCallerWorld(t, map[string]string{aliceInbound: "alice", saInbound: "robot", partnerInbound: "dave"})
			h := perCallerGateway(t, w, vouched{
				aliceInbound:   corp("alice"),
				saInbound:      {user: "system:serviceaccount:team-a:robot"},
				partnerInbound: {user: "partner:dave", provider: partnerIDP},
			})
			for _, c := range []struct{ who, token, says string }{
				{"system:serviceaccount:team-a:robot", saInbound, "a Kubernetes token"},
				{"partner:dave", partnerInbound, `identity provider "partner-idp"`},
			} {
				_, err := h.connectAs(c.token, era.version)
				if err == nil {
					t.Fatalf("%s connected to the server; want a refusal", c.who)
				}
				status, code, text := sessionlessCall(t, h.url(), c.token, "whoami")
				t.Logf("%s was refused: %v; a sessionless tools/call: HTTP %d, %d %s", c.who, err, status, code, text)
				if status != http.StatusForbidden || !strings.Contains(text, "CallerNotAllowed") || !strings.Contains(text, c.says) ||
					!strings.Contains(text, `identity provider "corp-idp"`) {
					t.Errorf("%s's sessionless tools/call was answered HTTP %d, %q; want 403 naming CallerNotAllowed, %s and the server's provider", c.who, status, text, c.says)
				}
				for _, m := range []string{err.Error(), text} {
					if strings.Contains(m, c.token) {
						t.Errorf("%s's refusal carries its token: %s", c.who, m)
					}
				}
				if !strings.Contains(err.Error(), "CallerNotAllowed") {
					t.Errorf("%s's refused connect = %v; want it to name CallerNotAllowed", c.who, err)
				}
				// Through the toolset: none of the origin's tools, nothing sent.
				cs, err := h.connectAt(h.toolsetURL(), c.token, era.version)
				if err != nil {
					t.Fatalf("connecting to the toolset as %s: %v", c.who, err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				tools, err := cs.ListTools(ctx, nil)
				cancel()
				if err != nil || len(tools.Tools) != 0 {
					t.Errorf("tools/list on the toolset as %s = %v, %v; want no tools", c.who, tools, err)
				}
				if _, err := callText(t, cs, "notes_whoami", nil); err == nil || !strings.Contains(err.Error(), "CallerNotAllowed") {
					t.Errorf("notes_whoami through the toolset as %s = %v; want a refusal naming CallerNotAllowed", c.who, err)
				}
				if refusals := h.audit.matching(`"caller"="`+c.who+`"`, "CallerNotAllowed"); len(refusals) == 0 {
					t.Errorf("no audit line names %s's refusal with reason CallerNotAllowed:\n%s", c.who, h.audit.all())
				}
			}
			w.mu.Lock()
			exchanges := append([]string(nil), w.exchanges...)
			w.mu.Unlock()
			for _, got := range exchanges {
				if got == saInbound || got == partnerInbound {
					t.Errorf("the token service received a token of a caller its provider did not vouch for")
				}
			}
			for _, a := range w.seenAuthorizations() {
				if a != "" && a != "Bearer upstream-alice" {
					t.Errorf("the server got Authorization %q", a)
				}
			}
			// The provider's own caller is served as herself.
			a, err := h.connectAs(aliceInbound, era.version)
			if err != nil {
				t.Fatalf("connecting as alice: %v", err)
			}
			if got, err := callText(t, a, "whoami", nil); err != nil || got != "alice" {
				t.Errorf("whoami as alice answered %q, %v", got, err)
			}
			if len(exchanges) > 0 {
				t.Errorf("the token service got %d exchanges before alice's; want none", len(exchanges))
			}
			h.assertNoSecrets(t)
		})
	}
}

// sessionlessCall sends one sessionless (2026-07-28) tools/call of tool with token and
// returns the HTTP status and the JSON-RPC error's code and message (0 and "" without
// one).
func sessionlessCall(t *testing.T, url, token, tool string) (int, int64, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":{},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"` + sessionlessVersion + `","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", tool)
	req.Header.Set("MCP-Protocol-Version", sessionlessVersion)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	text := string(data)
	if i := strings.Index(text, "data: "); i >= 0 {
		text = strings.TrimSpace(text[i+len("data: "):])
	}
	var answer struct {
		Error *jsonrpc.Error `json:"error"`
	}
	if json.Unmarshal([]byte(text), &answer) != nil || answer.Error == nil {
		return resp.StatusCode, 0, ""
	}
	return resp.StatusCode, answer.Error.Code, answer.Error.Message
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
