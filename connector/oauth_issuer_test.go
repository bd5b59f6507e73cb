package connector

import (
	"net/http"
	"strings"
	"testing"
)

// A pinned issuer keeps the client credential from an authorization server the MCP server
// names on its own: protected resource metadata naming an attacker's authorization server
// fails the session with MetadataMismatch before anything is sent there; without the pin
// the attacker's token endpoint receives the credential, as it always has.
func TestOAuthPinnedIssuer(t *testing.T) {
	tests := []struct {
		name string
		// servers lists the authorization servers the metadata names: "real", "attacker".
		servers []string
		pin     bool
		// reason is the failure expected; "" means the session becomes Ready.
		reason string
		// attackerGetsSecret says the attacker's token endpoint receives the secret.
		attackerGetsSecret bool
	}{
		{name: "pinned, metadata names the attacker", servers: []string{"attacker"}, pin: true, reason: ReasonMetadataMismatch},
		{name: "pinned, metadata names the attacker first", servers: []string{"attacker", "real"}, pin: true},
		{name: "pinned, metadata names the real one", servers: []string{"real"}, pin: true},
		{name: "not pinned, metadata names the attacker", servers: []string{"attacker"}, reason: ReasonInvalidClient, attackerGetsSecret: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newOAuthWorld(t)
			// The attacker's authorization server: honest-looking metadata, and a token
			// endpoint that keeps what it is sent and grants nothing.
			attacker := startServer(t, w.log("attacker", http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				origin := "http://" + r.Host
				switch r.URL.Path {
				case "/.well-known/oauth-authorization-server":
					writeJSON(rw, map[string]any{"issuer": origin, "token_endpoint": origin + "/token",
						"grant_types_supported": []string{"client_credentials"}})
				case "/token":
					rw.Header().Set("Content-Type", "application/json")
					rw.WriteHeader(http.StatusUnauthorized)
					writeJSON(rw, map[string]string{"error": "invalid_client"})
				default:
					http.NotFound(rw, r)
				}
			})))
			w.prm = func(w *oauthWorld) map[string]any {
				var servers []string
				for _, s := range tt.servers {
					if s == "attacker" {
						servers = append(servers, attacker.URL)
					} else {
						servers = append(servers, w.as.URL)
					}
				}
				return map[string]any{"resource": w.mcp.URL + "/mcp", "authorization_servers": servers}
			}
			creds := OAuth2ClientCredentials{ClientSecret: oauthClientSecret}
			if tt.pin {
				creds.Issuer = w.as.URL
			}
			p := testPool(t)
			key := Key{"ns", "pinned"}
			p.Ensure(key, w.config(creds))
			if tt.reason == "" {
				waitReady(t, p, key)
			} else {
				snap := waitAuthFailure(t, p, key, tt.reason, tt.reason)
				t.Logf("%s: %s", snap.LastError.Reason, snap.LastError.Message)
				w.assertNoLeak(snap)
			}

			w.mu.Lock()
			defer w.mu.Unlock()
			attackerTokenRequests, attackerRequests := 0, 0
			for _, r := range w.requests {
				if r.server != "attacker" {
					continue
				}
				attackerRequests++
				if r.path == "/token" && strings.HasPrefix(r.authorization, "Basic ") {
					attackerTokenRequests++
				}
			}
			switch {
			case tt.attackerGetsSecret && attackerTokenRequests == 0:
				t.Errorf("without a pin the attacker's token endpoint got no credential; the test does not show what the pin prevents")
			case !tt.attackerGetsSecret && attackerRequests > 0:
				t.Errorf("the attacker's authorization server got %d requests (%d with the credential), want none", attackerRequests, attackerTokenRequests)
			}
		})
	}
}

// A pinned issuer that is not a plain absolute URL, or plain http without
// allowInsecureHTTP, is refused before any request.
func TestOAuthPinnedIssuerMustBeAnAbsoluteURL(t *testing.T) {
	for _, issuer := range []string{"auth.example.com", "https://auth.example.com/?tenant=a", "https://u:p@auth.example.com", "ftp://auth.example.com"} {
		cfg := fastConfig("https://mcp.example.com/mcp")
		cfg.OAuth2 = &OAuth2ClientCredentials{ClientID: "c", ClientSecret: "s3cret-value", Issuer: issuer}
		p := testPool(t)
		key := Key{"ns", "bad-issuer"}
		p.Ensure(key, cfg)
		snap := waitFor(t, p, key, "InvalidSpec", func(s Snapshot) bool {
			return s.LastError != nil && s.LastError.Reason == ReasonInvalidSpec
		})
		if strings.Contains(snap.LastError.Message, "s3cret-value") || strings.Contains(snap.LastError.Message, "u:p") {
			t.Errorf("issuer %q: message carries a secret: %s", issuer, snap.LastError.Message)
		}
	}
	cfg := fastConfig("https://mcp.example.com/mcp")
	cfg.OAuth2 = &OAuth2ClientCredentials{ClientID: "c", ClientSecret: "s3cret-value", Issuer: "http://auth.example.com"}
	p := testPool(t)
	key := Key{"ns", "plain-issuer"}
	p.Ensure(key, cfg)
	waitFor(t, p, key, "InvalidSpec", func(s Snapshot) bool {
		return s.LastError != nil && s.LastError.Reason == ReasonInvalidSpec && strings.Contains(s.LastError.Message, "allowInsecureHTTP")
	})
}
