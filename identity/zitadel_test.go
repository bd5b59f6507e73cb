package identity

import (
	"context"
	"strings"
	"testing"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// TestZitadelExampleOP checks tokens of a real OpenID provider nobody here wrote:
// zitadel/oidc's example OP issues opaque access tokens, judged by introspection, and
// JWT ID tokens (audience: the client), judged with its key set.
func TestZitadelExampleOP(t *testing.T) {
	issuer := testenv.StartZitadelOP(t)
	tok := testenv.ZitadelLogin(t, issuer)
	ctx := context.Background()
	idToken, _ := tok.Extra("id_token").(string)
	if looksLikeJWT(tok.AccessToken) || !looksLikeJWT(idToken) {
		t.Fatalf("want an opaque access token and a JWT ID token from the example OP")
	}

	base := ProviderConfig{
		Name:              "zitadel",
		IssuerURL:         issuer,
		AllowInsecureHTTP: true, // the example OP serves http on loopback
		// The example OP says a token is active only to the client it was issued to,
		// and sets client_id but no aud in its answer: the client is the audience.
		Audiences:      []string{"web"},
		UsernameClaim:  "email",
		UsernamePrefix: "oidc:",
		ValidationRules: []ValidationRule{
			{Expression: "claims.email_verified == true", Message: "email must be verified"},
		},
		Advertise: true,
	}

	t.Run("opaque access token by introspection", func(t *testing.T) {
		cfg := base
		cfg.Introspection = &Introspection{ClientID: "web", ClientSecret: "secret"}
		ps := applied(t, Options{}, cfg)
		caller, err := ps.Authenticate(ctx, tok.AccessToken)
		if err != nil {
			t.Fatalf("the access token: %v", err)
		}
		if caller.Username != "oidc:test-user@zitadel.ch" {
			t.Errorf("username %q, want oidc:test-user@zitadel.ch", caller.Username)
		}
		refused(t, ps, "not-a-token-the-op-issued", ReasonInactive, "secret")

		// Introspecting as another client: the OP says the token is not active for it.
		other := base
		other.Introspection = &Introspection{ClientID: "api", ClientSecret: "secret"}
		refused(t, applied(t, Options{}, other), tok.AccessToken, ReasonInactive, "secret")
	})

	t.Run("ID token by signature", func(t *testing.T) {
		cfg := base
		cfg.UsernameClaim = "sub"
		cfg.ValidationRules = nil
		ps := applied(t, Options{}, cfg)
		caller, err := ps.Authenticate(ctx, idToken)
		if err != nil {
			t.Fatalf("the ID token: %v", err)
		}
		if !strings.HasPrefix(caller.Username, "oidc:") || caller.Username == "oidc:" {
			t.Errorf("username %q", caller.Username)
		}
		t.Logf("ID token mapped to %q", caller.Username)
		// Without introspection, the opaque access token is for no provider.
		refused(t, ps, tok.AccessToken, ReasonUnknownIssuer)

		wrong := cfg
		wrong.Audiences = []string{"https://mcp.example.com"}
		refused(t, applied(t, Options{}, wrong), idToken, ReasonWrongAudience)
	})
}
