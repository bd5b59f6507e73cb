package connector

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// memGrants is a GrantStore in memory, for the connector's own tests.
type memGrants struct {
	mu sync.Mutex
	m  map[GrantKey]Grant
}

func (s *memGrants) LoadGrant(_ context.Context, k GrantKey) (*Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.m[k]
	if !ok {
		return nil, ErrNoGrant
	}
	return &g, nil
}

func (s *memGrants) SaveGrant(_ context.Context, g *Grant) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[GrantKey]Grant{}
	}
	s.m[g.Key] = *g
	return nil
}

func (s *memGrants) DeleteGrant(_ context.Context, k GrantKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
	return nil
}

// hostileVendor is an MCP server whose authorization server's token endpoint answers
// with token.
func hostileVendor(t *testing.T, token http.HandlerFunc) (Config, *memGrants) {
	t.Helper()
	var as, srv *httptest.Server
	as = startServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/oauth-authorization-server":
			writeJSON(rw, map[string]any{"issuer": as.URL, "authorization_endpoint": as.URL + "/authorize", "token_endpoint": as.URL + "/token",
				"code_challenge_methods_supported": []string{"S256"}})
		case "/token":
			token(rw, r)
		default:
			http.NotFound(rw, r)
		}
	}))
	srv = startServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		writeJSON(rw, map[string]any{"resource": srv.URL + "/mcp", "authorization_servers": []string{as.URL}})
	}))
	cfg := fastConfig(srv.URL + "/mcp")
	cfg.PerUser = &PerUser{Provider: "corp", ClientID: "switchboard", ClientSecret: "client-secret-7f3a9c2e",
		AuthorizationServers: []string{as.URL}, Resources: []string{srv.URL}, AllowInsecureHTTP: true}
	return cfg, &memGrants{}
}

func TestPerUserCodeExchangeRefusesHostileTokenEndpoints(t *testing.T) {
	elsewhere := startServer(t, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		writeJSON(rw, map[string]any{"access_token": "collected", "token_type": "Bearer"})
	}))
	for _, tt := range []struct {
		name   string
		token  http.HandlerFunc
		reason string
		want   string
	}{
		{"redirects elsewhere", func(rw http.ResponseWriter, r *http.Request) {
			http.Redirect(rw, r, elsewhere.URL+"/token", http.StatusTemporaryRedirect)
		}, ReasonRedirectDenied, "redirected to"},
		{"redirects within its origin", func(rw http.ResponseWriter, r *http.Request) {
			http.Redirect(rw, r, "/token2", http.StatusTemporaryRedirect)
		}, ReasonRedirectDenied, "redirected to"},
		{"answers 50 MiB", func(rw http.ResponseWriter, _ *http.Request) {
			rw.Header().Set("Content-Type", "application/json")
			_, _ = rw.Write([]byte(`{"access_token":"`))
			chunk := []byte(strings.Repeat("a", 1<<20))
			for range 50 {
				if _, err := rw.Write(chunk); err != nil {
					return
				}
			}
		}, ReasonLimitExceeded, "larger than"},
		{"issues no bearer token", func(rw http.ResponseWriter, _ *http.Request) {
			writeJSON(rw, map[string]any{"access_token": "x", "token_type": "mac"})
		}, ReasonAuthorizationFailed, "no bearer token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, store := hostileVendor(t, tt.token)
			u, e := NewUserAuthorizer(context.Background(), Key{"team-a", "vendor"}, cfg, store)
			if e != nil {
				t.Fatal(e)
			}
			defer u.Close()
			alice := Caller{Key: "alice", Provider: "corp"}
			authz, e := u.AuthorizationURL(AuthorizationRequest{Caller: alice, State: "s", Verifier: "v-0123456789-0123456789-0123456789-0123", RedirectURL: "https://gw.example/oauth2/callback"})
			if e != nil {
				t.Fatal(e)
			}
			e = u.Complete(context.Background(), Completion{Caller: alice, Code: "the-code-4a7b9e", Verifier: "v-0123456789-0123456789-0123456789-0123",
				RedirectURL: "https://gw.example/oauth2/callback", Issuer: authz.Issuer, Client: authz.Client})
			if e == nil || !strings.Contains(e.Error(), tt.want) || (e.Reason != tt.reason && e.Authentication != tt.reason && !strings.Contains(e.Error(), tt.reason)) {
				t.Fatalf("got %v, want %s naming %q", e, tt.reason, tt.want)
			}
			for _, s := range []string{"the-code-4a7b9e", "client-secret-7f3a9c2e", "collected"} {
				if strings.Contains(e.Error(), s) {
					t.Errorf("the error shows %q", s)
				}
			}
			if _, err := store.LoadGrant(context.Background(), GrantKey{Caller: "alice", Server: Key{"team-a", "vendor"}}); !errors.Is(err, ErrNoGrant) {
				t.Fatal("a grant was stored")
			}
		})
	}
}

func TestPerUserAllowListIsTheAdmins(t *testing.T) {
	base := PerUser{Provider: "corp", ClientID: "c", AuthorizationServers: []string{"https://as.example.com"}, Resources: []string{"https://mcp.example.com/v1"}}
	for _, tt := range []struct {
		name   string
		url    string
		mutate func(*PerUser)
		reason string
	}{
		{"the server beneath an allowed resource", "https://mcp.example.com/v1/mcp?k=1", nil, ""},
		{"the allowed resource itself", "https://MCP.example.com:443/v1", nil, ""},
		{"a sibling path", "https://mcp.example.com/v10/mcp", nil, ReasonResourceNotAllowed},
		{"a look-alike host", "https://mcp.example.com.evil.test/v1/mcp", nil, ReasonResourceNotAllowed},
		{"a pinned issuer the admin does not list", "https://mcp.example.com/v1/mcp", func(p *PerUser) { p.Issuer = "https://evil.example.test" }, ReasonAuthorizationServerNotAllowed},
		{"a scope the admin does not list", "https://mcp.example.com/v1/mcp", func(p *PerUser) { p.AllowedScopes, p.Scopes = []string{"read"}, []string{"admin"} }, ReasonScopeNotAllowed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := base
			if tt.mutate != nil {
				tt.mutate(&p)
			}
			e := p.Allowed(tt.url)
			switch {
			case tt.reason == "" && e != nil:
				t.Fatalf("refused: %v", e)
			case tt.reason != "" && (e == nil || e.Reason != tt.reason):
				t.Fatalf("got %v, want %s", e, tt.reason)
			}
		})
	}
}
