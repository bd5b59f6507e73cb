package connector

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

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
	var (
		mu       sync.Mutex
		received []string // every Authorization header the MCP endpoint got
	)
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
	protected = auth.RequireBearerToken(testenv.ZitadelTokenVerifier(t, issuer), &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: mcpServer.URL + "/.well-known/oauth-protected-resource/mcp",
	})(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))

	p := testPool(t)
	key := Key{"team-a", "notes"}
	cfg := fastConfig(mcpServer.URL + "/mcp")
	cfg.Protocol = ProtocolStreamableHTTP
	cfg.PerCaller = &PerCallerAuth{TokenExchange: &TokenExchange{
		Provider: "zitadel", TokenURL: issuer + "oauth/token", ClientID: testenv.ZitadelClientID, ClientSecret: testenv.ZitadelClientSecret,
		// The server introspects as client "web": the OP answers only for tokens whose
		// audience holds it, and names the subject of those with scope openid.
		Audience: testenv.ZitadelClientID, Scopes: []string{"openid"}, AllowInsecureHTTP: true,
		// What the provider's admin allows servers to ask for.
		AllowedAudiences: []string{testenv.ZitadelClientID}, AllowedScopes: []string{"openid"},
	}}
	p.Ensure(key, cfg)
	waitPerCaller(t, p, key)

	var own []string // the people's own tokens
	for _, name := range testenv.ZitadelAdmins {
		subject, _, _ := strings.Cut(name, "@")
		login := testenv.ZitadelLoginAs(t, issuer, name)
		own = append(own, login.AccessToken)
		caller := &Caller{Key: "oidc:" + name, Token: login.AccessToken, Provider: "zitadel", Expiry: login.Expiry}
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
