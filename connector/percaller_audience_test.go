package connector

import (
	"strings"
	"testing"
)

// A token exchange asks the identity provider's token service only for what the
// provider's admin allows: an audience the provider does not list, or a scope outside
// its list, is refused before any request (the token service never sees the caller's
// token, so the server's author cannot have it issued for another service or with
// more rights), the server's session says why, and a caller is refused with the same
// reason. What is allowed goes through, with the server's own URL as the resource.
func TestTokenExchangeRequestsOnlyWhatItsProviderAllows(t *testing.T) {
	for _, tc := range []struct {
		name              string
		audience          string
		scopes            []string
		allowedAudiences  []string
		allowedScopes     []string
		wantReason        string
		wantSays          []string
		wantAudience      string
		wantScope         string
		wantExchangeCount int
	}{
		{name: "an audience the provider does not list", audience: "payments-api", allowedAudiences: []string{"notes-api"},
			wantReason: ReasonAudienceNotAllowed, wantSays: []string{`audience "payments-api"`, `identity provider "corp-idp"`, "tokenExchange.audiences"}},
		{name: "an audience of a provider that lists none", audience: "notes-api",
			wantReason: ReasonAudienceNotAllowed, wantSays: []string{`audience "notes-api"`, `identity provider "corp-idp"`}},
		{name: "a scope the provider does not list", scopes: []string{"tools.read", "admin"}, allowedScopes: []string{"tools.read"},
			wantReason: ReasonScopeNotAllowed, wantSays: []string{`scope "admin"`, `identity provider "corp-idp"`, "tokenExchange.scopes"}},
		{name: "a scope of a provider that lists none", scopes: []string{"tools.read"},
			wantReason: ReasonScopeNotAllowed, wantSays: []string{`scope "tools.read"`}},
		{name: "what the provider allows", audience: "notes-api", scopes: []string{"tools.read"},
			allowedAudiences: []string{"payments-api", "notes-api"}, allowedScopes: []string{"tools.write", "tools.read"},
			wantAudience: "notes-api", wantScope: "tools.read", wantExchangeCount: 1},
		{name: "no audience and no scope", allowedAudiences: []string{"notes-api"}, wantExchangeCount: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newCallerWorld(t)
			p := testPool(t)
			key := Key{"ns", "audience"}
			cfg := w.exchangeConfig()
			te := cfg.PerCaller.TokenExchange
			te.Audience, te.Scopes, te.AllowedAudiences, te.AllowedScopes = tc.audience, tc.scopes, tc.allowedAudiences, tc.allowedScopes
			p.Ensure(key, cfg)

			if tc.wantReason == "" {
				waitPerCaller(t, p, key)
				if got := whoami(t, mustCallerClient(t, p, key, alice())); got != "alice" {
					t.Errorf("alice reached the server as %q", got)
				}
				forms := w.formsOf("sts")
				if len(forms) != tc.wantExchangeCount {
					t.Fatalf("the token service got %d exchanges, want %d", len(forms), tc.wantExchangeCount)
				}
				f := forms[0]
				if got := f.Get("resource"); got != w.mcp.URL+"/mcp" {
					t.Errorf("the exchange asked for resource %q, want the server's own URL %s", got, w.mcp.URL+"/mcp")
				}
				if got := f.Get("audience"); got != tc.wantAudience {
					t.Errorf("the exchange asked for audience %q, want %q", got, tc.wantAudience)
				}
				if got := f.Get("scope"); got != tc.wantScope {
					t.Errorf("the exchange asked for scope %q, want %q", got, tc.wantScope)
				}
				w.assertCallerTokensStayed()
				return
			}

			snap := waitFor(t, p, key, "the session to refuse the config", func(s Snapshot) bool {
				return s.LastError != nil && s.LastError.Reason == tc.wantReason
			})
			if snap.LastError.Transient {
				t.Error("the refusal is transient; want one a person must act on")
			}
			_, err := callerClient(t, p, key, alice())
			if ReasonOf(err) != tc.wantReason {
				t.Fatalf("alice was answered %v; want a %s refusal", err, tc.wantReason)
			}
			t.Logf("alice was answered: %v", err)
			for _, want := range tc.wantSays {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal %q does not say %q", err, want)
				}
			}
			w.assertNoSecretIn("the refusal", err.Error())
			if forms := w.formsOf("sts"); len(forms) != 0 {
				t.Errorf("the token service got %d exchanges for a request its provider does not allow: %v", len(forms), forms)
			}
			if n := w.count("mcp", "/mcp"); n != 0 {
				t.Errorf("the server got %d MCP requests", n)
			}
		})
	}
}

// An enterpriseManaged server whose identity provider lists scopes asks for those
// only: configured scopes outside the list are refused before any request, and
// scopes the server's metadata names outside it are dropped from the grant and token
// requests. A provider that lists none leaves the scopes to the server.
func TestEnterpriseManagedRequestsOnlyScopesItsProviderAllows(t *testing.T) {
	t.Run("configured scope not listed", func(t *testing.T) {
		w := newCallerWorld(t)
		p := testPool(t)
		key := Key{"ns", "em-scopes"}
		cfg := w.enterpriseConfig()
		cfg.PerCaller.EnterpriseManaged.Scopes = []string{"tools.read", "repo.admin"}
		cfg.PerCaller.EnterpriseManaged.IdentityProvider.Scopes = []string{"tools.read"}
		p.Ensure(key, cfg)
		snap := waitFor(t, p, key, "the session to refuse the scope", func(s Snapshot) bool {
			return s.LastError != nil && s.LastError.Reason == ReasonScopeNotAllowed
		})
		if snap.LastError.Transient {
			t.Error("the refusal is transient; want one a person must act on")
		}
		_, err := callerClient(t, p, key, alice())
		if ReasonOf(err) != ReasonScopeNotAllowed {
			t.Fatalf("alice was answered %v; want a %s refusal", err, ReasonScopeNotAllowed)
		}
		for _, want := range []string{`scope "repo.admin"`, `identity provider "corp-idp"`, "tokenExchange.scopes"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal %q does not say %q", err, want)
			}
		}
		w.assertNoSecretIn("the refusal", err.Error())
		for _, server := range []string{"idp", "as"} {
			if forms := w.formsOf(server); len(forms) != 0 {
				t.Errorf("%s got %d token requests: %v", server, len(forms), forms)
			}
		}
	})

	for _, tc := range []struct {
		name    string
		listed  []string
		wantAsk string
	}{
		{"discovered scopes outside the list are dropped", []string{"tools.read", "tools.write"}, "tools.read"},
		{"a provider that lists no scope leaves them to the server", nil, "tools.read repo.admin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newCallerWorld(t)
			w.prm = func(w *callerWorld) map[string]any {
				return map[string]any{"resource": w.mcp.URL + "/mcp", "authorization_servers": []string{w.as.URL},
					"scopes_supported": []string{"tools.read", "repo.admin"}}
			}
			p := testPool(t)
			key := Key{"ns", "em-discovered"}
			cfg := w.enterpriseConfig()
			cfg.PerCaller.EnterpriseManaged.IdentityProvider.Scopes = tc.listed
			p.Ensure(key, cfg)
			waitPerCaller(t, p, key)
			if got := whoami(t, mustCallerClient(t, p, key, alice())); got != "alice" {
				t.Errorf("alice reached the server as %q", got)
			}
			for _, server := range []string{"idp", "as"} {
				forms := w.formsOf(server)
				if len(forms) == 0 {
					t.Fatalf("%s got no token request", server)
				}
				for _, f := range forms {
					if got := f.Get("scope"); got != tc.wantAsk {
						t.Errorf("%s was asked for scope %q, want %q", server, got, tc.wantAsk)
					}
				}
			}
		})
	}
}
