package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/prometheus/common/expfmt"

	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
)

// jwtOP is an OpenID provider in the test: discovery and a key set with one published
// key; hidden signs tokens with a key it never published.
type jwtOP struct {
	srv               *httptest.Server
	published, hidden *ecdsa.PrivateKey
}

func newJWTOP(t *testing.T) *jwtOP {
	t.Helper()
	op := &jwtOP{}
	for _, k := range []**ecdsa.PrivateKey{&op.published, &op.hidden} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		*k = key
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": op.srv.URL, "jwks_uri": op.srv.URL + "/keys"})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &op.published.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	op.srv = httptest.NewServer(mux)
	t.Cleanup(op.srv.Close)
	return op
}

// claims are valid claims of alice for audience https://mcp.example.com, changed by edit.
func (op *jwtOP) claims(edit func(map[string]any)) map[string]any {
	c := map[string]any{
		"iss": op.srv.URL, "sub": "alice", "aud": "https://mcp.example.com",
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(),
		"email": "alice@example.com", "email_verified": true, "secret_claim": "do-not-leak-42",
	}
	if edit != nil {
		edit(c)
	}
	return c
}

func signJWT(t *testing.T, key *ecdsa.PrivateKey, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	token, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// Every token the providers do not accept is answered 401 with the endpoint's metadata
// in the challenge, a provider's own issuer's without a TokenReview; a token they accept for a caller RBAC does not
// let use the server is 403. Nothing of a token, nor claims beyond the username, reaches
// the gateway's log, its audit log or its metrics.
func TestProviderTokenRefusals(t *testing.T) {
	op := newJWTOP(t)
	other := newJWTOP(t) // an issuer no provider names
	providers := identity.NewProviders(identity.Options{})
	cfg := identity.ProviderConfig{
		Name: "corp", Generation: 1, IssuerURL: op.srv.URL, AllowInsecureHTTP: true,
		Audiences:     []string{"https://mcp.example.com"},
		UsernameClaim: "email", UsernamePrefix: "oidc:",
		ValidationRules: []identity.ValidationRule{{Expression: "claims.email_verified == true", Message: "email must be verified"}},
		Advertise:       true,
	}
	if err := providers.Apply(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	// A provider whose usernames could be system: names ("sys" + "tem:admin"), had
	// admission let it in; its prefix is its own, as no two providers share one.
	sys := cfg
	sys.Name, sys.UsernamePrefix = "sys", "sys"
	sysOP := newJWTOP(t)
	sys.IssuerURL = sysOP.srv.URL
	if err := providers.Apply(t.Context(), sys); err != nil {
		t.Fatal(err)
	}
	f := newLoginFront(t, providers)
	f.rbac.grant("oidc:bob@example.com") // alice may use nothing
	path := gatewaypath.Server(namespace, "notes")
	challenge := `Bearer resource_metadata="` + f.url + `/.well-known/oauth-protected-resource` + path + `"`

	var sent []string
	refusals := map[string]string{
		"wrong audience":         signJWT(t, op.published, op.claims(func(c map[string]any) { c["aud"] = "https://elsewhere.example.com" })),
		"expired":                signJWT(t, op.published, op.claims(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() })),
		"unknown issuer":         signJWT(t, other.published, other.claims(nil)),
		"failed validation rule": signJWT(t, op.published, op.claims(func(c map[string]any) { c["email_verified"] = false })),
		"system: username":       signJWT(t, sysOP.published, sysOP.claims(func(c map[string]any) { c["email"] = "tem:admin" })),
		"unpublished key":        signJWT(t, op.hidden, op.claims(nil)),
	}
	for name, token := range refusals {
		sent = append(sent, token)
		resp := initialize(t, f.url+path, token)
		if resp.status != http.StatusUnauthorized || resp.header.Get("WWW-Authenticate") != challenge {
			t.Errorf("%s: %d, WWW-Authenticate %q; want 401 with %s", name, resp.status, resp.header.Get("WWW-Authenticate"), challenge)
		}
		if strings.Contains(resp.body, "do-not-leak-42") || strings.Contains(resp.body, token) {
			t.Errorf("%s: the answer carries the token or a claim: %s", name, resp.body)
		}
	}

	valid := signJWT(t, op.published, op.claims(nil))
	sent = append(sent, valid)
	if resp := initialize(t, f.url+path, valid); resp.status != http.StatusForbidden {
		t.Errorf("accepted token without use: %d; want 403", resp.status)
	}

	providers.Forget("corp") // no longer Ready
	if resp := initialize(t, f.url+path, valid); resp.status != http.StatusUnauthorized || resp.header.Get("WWW-Authenticate") != challenge {
		t.Errorf("token of a provider that is not Ready: %d, WWW-Authenticate %q; want 401 with the metadata", resp.status, resp.header.Get("WWW-Authenticate"))
	}

	// Only the two JWTs of issuers no applied provider names (the unknown issuer's, and
	// corp's once forgotten) went to TokenReview, which may know issuers of its own; in the
	// lane for unknown tokens, bounded as ever. A provider's issuer decides on its tokens.
	f.reviews.mu.Lock()
	if f.reviews.calls != 2 {
		t.Errorf("%d TokenReviews; want 2 (the tokens of issuers no provider names)", f.reviews.calls)
	}
	f.reviews.mu.Unlock()

	var metrics strings.Builder
	families, err := f.h.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		_, _ = expfmt.MetricFamilyToText(&metrics, mf)
	}
	for where, text := range map[string]string{"log": f.log.all(), "audit log": f.h.audit.all(), "metrics": metrics.String()} {
		for _, token := range sent {
			if strings.Contains(text, token) || strings.Contains(text, strings.Split(token, ".")[2]) {
				t.Errorf("the gateway's %s holds a token", where)
			}
		}
		if strings.Contains(text, "do-not-leak-42") {
			t.Errorf("the gateway's %s holds a claim beyond the username", where)
		}
	}
}
