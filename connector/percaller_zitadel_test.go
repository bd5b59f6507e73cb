package connector

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// RFC 8693 on behalf of two people at a real token service, zitadel/oidc's example OP
// and its token exchange: each person logs in at the OP, and each one's upstream session
// presents the token the OP issued in exchange for that person's own. The MCP server
// asks the OP who a token belongs to (introspection) and sees each person under their
// own subject; every Authorization header it received shows that neither person's own
// token reached it.
func TestTokenExchangeAtZitadelGivesEachPersonTheirOwnToken(t *testing.T) {
	issuer := testenv.StartZitadelOPWithAdmins(t)
	introspectionURL := zitadelIntrospectionEndpoint(t, issuer)

	var (
		mu       sync.Mutex
		received []string // every Authorization header the MCP endpoint got
	)
	introspect := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		form := url.Values{"token": {token}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, introspectionURL, strings.NewReader(form.Encode()))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(testenv.ZitadelClientID, testenv.ZitadelClientSecret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		var answer struct {
			Active bool    `json:"active"`
			Sub    string  `json:"sub"`
			Exp    float64 `json:"exp"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || !answer.Active {
			return nil, errors.Join(auth.ErrInvalidToken, err)
		}
		return &auth.TokenInfo{UserID: answer.Sub, Expiration: time.Unix(int64(answer.Exp), 0)}, nil
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "zitadel-protected", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "whoami", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: req.Extra.TokenInfo.UserID}}}, nil
		})
	var protected http.Handler
	mcpServer := startServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/oauth-protected-resource/mcp" {
			writeJSON(rw, map[string]any{"resource": "http://" + r.Host + "/mcp", "authorization_servers": []string{issuer}})
			return
		}
		mu.Lock()
		received = append(received, r.Header.Get("Authorization"))
		mu.Unlock()
		protected.ServeHTTP(rw, r)
	}))
	protected = auth.RequireBearerToken(introspect, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: mcpServer.URL + "/.well-known/oauth-protected-resource/mcp",
	})(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))

	p := testPool(t)
	key := Key{"team-a", "notes"}
	cfg := fastConfig(mcpServer.URL + "/mcp")
	cfg.Protocol = ProtocolStreamableHTTP
	cfg.PerCaller = &PerCallerAuth{TokenExchange: &TokenExchange{
		TokenURL: issuer + "oauth/token", ClientID: testenv.ZitadelClientID, ClientSecret: testenv.ZitadelClientSecret,
		// The server introspects as client "web": the OP answers only for tokens whose
		// audience holds it, and names the subject of those with scope openid.
		Audience: testenv.ZitadelClientID, Scopes: []string{"openid"}, AllowInsecureHTTP: true,
	}}
	p.Ensure(key, cfg)
	waitPerCaller(t, p, key)

	var own []string // the people's own tokens
	for _, name := range testenv.ZitadelAdmins {
		subject, _, _ := strings.Cut(name, "@")
		login := testenv.ZitadelLoginAs(t, issuer, name)
		own = append(own, login.AccessToken)
		caller := &Caller{Key: "oidc:" + name, Token: login.AccessToken, Expiry: login.Expiry}
		cs := mustCallerClient(t, p, key, caller)
		if got := whoami(t, cs); got != subject {
			t.Errorf("%s's upstream session reached the server as %q; want subject %q", name, got, subject)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	var presented []string
	for _, h := range received {
		for _, token := range own {
			if strings.Contains(h, token) {
				t.Errorf("a person's own token reached the MCP server")
			}
		}
		if tok, ok := strings.CutPrefix(h, "Bearer "); ok && !slices.Contains(presented, tok) {
			presented = append(presented, tok)
		}
	}
	if len(presented) != 2 {
		t.Errorf("the MCP server saw %d distinct tokens; want 2, one per person", len(presented))
	}
	t.Logf("two people, two exchanged tokens, subjects as the OP introspects them; %d requests reached the server", len(received))
}

// zitadelIntrospectionEndpoint reads the OP's introspection endpoint from its discovery.
func zitadelIntrospectionEndpoint(t *testing.T, issuer string) string {
	t.Helper()
	resp, err := http.Get(issuer + ".well-known/openid-configuration") //nolint:noctx // a test fetch from the loopback OP
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var doc struct {
		Introspection string `json:"introspection_endpoint"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || doc.Introspection == "" {
		t.Fatalf("the OP's discovery names no introspection endpoint: %v", err)
	}
	return doc.Introspection
}
