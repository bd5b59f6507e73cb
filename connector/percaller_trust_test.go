package connector

import (
	"strings"
	"testing"
)

// A caller's token is exchanged only at the token endpoint of the identity provider
// that vouched for it, and only when that is the provider the server's config names: a
// ServiceAccount caller (no provider) and a caller of another provider are refused with
// CallerNotAllowed before any request, and the token service gets nothing of theirs,
// in an Upstream and in PresentCaller alike.
func TestPerCallerTokenGoesOnlyToTheProviderThatVouchedForTheCaller(t *testing.T) {
	for _, tc := range []struct {
		name       string
		enterprise bool
		caller     func() *Caller
		who        string
	}{
		{"ServiceAccount caller, token exchange", false, func() *Caller {
			c := alice()
			c.Key, c.Provider = "system:serviceaccount:team-a:alice", ""
			return c
		}, "a Kubernetes token"},
		{"ServiceAccount caller, enterprise-managed", true, func() *Caller {
			c := alice()
			c.Key, c.Provider = "system:serviceaccount:team-a:alice", ""
			return c
		}, "a Kubernetes token"},
		{"another provider's caller, token exchange", false, func() *Caller {
			c := alice()
			c.Provider = "partner-idp"
			return c
		}, `identity provider "partner-idp"`},
		{"another provider's caller, enterprise-managed", true, func() *Caller {
			c := alice()
			c.Provider = "partner-idp"
			return c
		}, `identity provider "partner-idp"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newCallerWorld(t)
			p := testPool(t)
			key := Key{"ns", "trust"}
			cfg := w.exchangeConfig()
			if tc.enterprise {
				cfg = w.enterpriseConfig()
			}
			p.Ensure(key, cfg)
			waitPerCaller(t, p, key)
			c := tc.caller()
			p.PresentCaller(key, *c)
			_, err := callerClient(t, p, key, c)
			if ReasonOf(err) != ReasonCallerNotAllowed {
				t.Fatalf("the caller was answered %v; want a %s refusal", err, ReasonCallerNotAllowed)
			}
			for _, want := range []string{`identity provider "corp-idp"`, tc.who, "sent nowhere"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal %q does not say %q", err, want)
				}
			}
			w.assertNoSecretIn("the refusal", err.Error())
			for _, server := range []string{"sts", "idp", "as", "capture"} {
				if forms := w.formsOf(server); len(forms) != 0 {
					t.Errorf("%s got %d token requests for a caller its provider did not vouch for: %v", server, len(forms), forms)
				}
			}
			if n := w.count("mcp", "/mcp"); n != 0 {
				t.Errorf("the server got %d MCP requests for the refused caller", n)
			}
			// The provider's own callers are unaffected.
			if got := whoami(t, mustCallerClient(t, p, key, bob())); got != "bob" {
				t.Errorf("bob reached the server as %q", got)
			}
			w.assertCallerTokensStayed()
		})
	}
}

// An enterpriseManaged server whose protected resource metadata names an
// authorization server its identity provider does not list (another service's, say)
// gets no identity assertion grant asked for: the identity provider receives nothing,
// the server's session reports AuthorizationServerNotAllowed, and a caller is refused
// with it.
func TestEnterpriseManagedRefusesAnAuthorizationServerTheProviderDoesNotList(t *testing.T) {
	w := newCallerWorld(t)
	other := newCallerWorld(t) // another service's authorization server
	w.prm = func(w *callerWorld) map[string]any {
		return map[string]any{"resource": w.mcp.URL + "/mcp", "authorization_servers": []string{other.as.URL}}
	}
	p := testPool(t)
	key := Key{"ns", "confused"}
	p.Ensure(key, w.enterpriseConfig())
	snap := waitFor(t, p, key, "the metadata check to refuse the authorization server", func(s Snapshot) bool {
		return s.LastError != nil && s.LastError.Reason == ReasonAuthorizationServerNotAllowed
	})
	if snap.LastError.Transient {
		t.Error("the refusal is transient; want one a person must act on")
	}
	t.Logf("the server's session reports: %s", snap.LastError)
	_, err := callerClient(t, p, key, alice())
	if ReasonOf(err) != ReasonAuthorizationServerNotAllowed {
		t.Fatalf("alice was answered %v; want a %s refusal", err, ReasonAuthorizationServerNotAllowed)
	}
	for _, want := range []string{other.as.URL, `identity provider "corp-idp"`, "authorizationServers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	w.assertNoSecretIn("the refusal", err.Error())
	for _, world := range []*callerWorld{w, other} {
		for _, server := range []string{"idp", "as", "sts"} {
			if forms := world.formsOf(server); len(forms) != 0 {
				t.Errorf("%s got %d token requests: %v", server, len(forms), forms)
			}
		}
	}
}
