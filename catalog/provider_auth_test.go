package catalog

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/switchboard-mcp/switchboard/identity"
)

// smallOP is an OpenID provider in the test: discovery, a key set with one published key
// (an unpublished one signs forgeries), and an introspection endpoint that knows the
// opaque tokens in active. It counts introspections.
type smallOP struct {
	t         *testing.T
	srv       *httptest.Server
	published *ecdsa.PrivateKey
	hidden    *ecdsa.PrivateKey

	mu             sync.Mutex
	active         map[string]map[string]any
	introspections int
}

func newSmallOP(t *testing.T) *smallOP {
	t.Helper()
	op := &smallOP{t: t, active: make(map[string]map[string]any)}
	for _, k := range []**ecdsa.PrivateKey{&op.published, &op.hidden} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		*k = key
	}
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{
			"issuer":                 op.srv.URL,
			"jwks_uri":               op.srv.URL + "/keys",
			"introspection_endpoint": op.srv.URL + "/introspect",
		})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &op.published.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	mux.HandleFunc("POST /introspect", func(w http.ResponseWriter, r *http.Request) {
		if id, secret, ok := r.BasicAuth(); !ok || id != "switchboard-gateway" || secret != "client-secret" {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		op.mu.Lock()
		defer op.mu.Unlock()
		op.introspections++
		answer, ok := op.active[r.PostFormValue("token")]
		if !ok {
			answer = map[string]any{"active": false}
		}
		writeJSON(w, answer)
	})
	op.srv = httptest.NewServer(mux)
	t.Cleanup(op.srv.Close)
	return op
}

// sign returns a JWT for alice of this issuer, signed with key under key id kid.
func (op *smallOP) sign(key *ecdsa.PrivateKey, kid string) string {
	op.t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		op.t.Fatal(err)
	}
	payload, err := json.Marshal(map[string]any{
		"iss":    op.srv.URL,
		"sub":    "248289761001",
		"aud":    "https://mcp.example.com",
		"exp":    time.Now().Add(time.Hour).Unix(),
		"iat":    time.Now().Unix(),
		"email":  "alice@example.com",
		"groups": []string{"mcp-users"},
	})
	if err != nil {
		op.t.Fatal(err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		op.t.Fatal(err)
	}
	token, err := jws.CompactSerialize()
	if err != nil {
		op.t.Fatal(err)
	}
	return token
}

func (op *smallOP) introspected() int {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.introspections
}

// providersFor applies one provider for op, introspecting opaque tokens.
func providersFor(t *testing.T, op *smallOP) *identity.Providers {
	t.Helper()
	ps := identity.NewProviders(identity.Options{})
	err := ps.Apply(context.Background(), identity.ProviderConfig{
		Name:              "corp",
		Generation:        1,
		IssuerURL:         op.srv.URL,
		Audiences:         []string{"https://mcp.example.com"},
		AllowInsecureHTTP: true,
		UsernameClaim:     "email",
		UsernamePrefix:    "oidc:",
		GroupsClaim:       "groups",
		GroupsPrefix:      "oidc:",
		Advertise:         true,
		Introspection:     &identity.Introspection{ClientID: "switchboard-gateway", ClientSecret: "client-secret"},
	})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return ps
}

// A provider's JWT is accepted without any TokenReview and mapped to its username and
// groups; a JWT naming the provider's issuer but signed by a key it never published is
// refused, again without a review.
func TestAuthenticatorProviderJWTsNeedNoTokenReview(t *testing.T) {
	op := newSmallOP(t)
	reviews := &fakeReviews{valid: map[string]string{}}
	a := NewAuthenticator(reviews, nil, AuthenticatorOptions{IdentityProviders: providersFor(t, op)})

	id, err := a.Authenticate(context.Background(), op.sign(op.published, "k1"))
	if err != nil {
		t.Fatalf("Authenticate(provider JWT): %v", err)
	}
	if id.User.Username != "oidc:alice@example.com" || !slices.Equal(id.User.Groups, []string{"oidc:mcp-users"}) {
		t.Errorf("caller = %q %q, want oidc:alice@example.com [oidc:mcp-users]", id.User.Username, id.User.Groups)
	}
	if id.Key != NewIdentity(id.User).Key {
		t.Errorf("the key of a provider's caller differs from the key of the same Kubernetes user")
	}

	for _, kid := range []string{"k1", "k2"} {
		_, err := a.Authenticate(context.Background(), op.sign(op.hidden, kid))
		if !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("Authenticate(JWT signed by an unpublished key, kid %s) = %v, want ErrUnauthenticated", kid, err)
		}
	}
	if calls, _ := reviews.counts(); calls != 0 {
		t.Errorf("TokenReviews = %d, want 0: the provider's issuer decides on its tokens", calls)
	}
	if n := op.introspected(); n != 0 {
		t.Errorf("introspections = %d, want 0 for JWTs", n)
	}
}

// An opaque token goes to TokenReview first; introspection is asked only when
// TokenReview refuses it.
func TestAuthenticatorOpaqueTokensReviewedBeforeIntrospection(t *testing.T) {
	op := newSmallOP(t)
	op.active["opaque-of-the-issuer"] = map[string]any{
		"active": true, "aud": "https://mcp.example.com", "exp": time.Now().Add(time.Hour).Unix(),
		"email": "bob@example.com", "groups": []string{"search"},
	}
	reviews := &fakeReviews{valid: map[string]string{"opaque-of-the-cluster": "carol"}}
	a := NewAuthenticator(reviews, nil, AuthenticatorOptions{IdentityProviders: providersFor(t, op)})

	id, err := a.Authenticate(context.Background(), "opaque-of-the-cluster")
	if err != nil || id.User.Username != "carol" {
		t.Fatalf("Authenticate(cluster's opaque token) = %v, %v; want carol", id, err)
	}
	if calls, _ := reviews.counts(); calls != 1 || op.introspected() != 0 {
		t.Errorf("reviews %d, introspections %d; want 1 and 0: TokenReview accepted it", calls, op.introspected())
	}

	id, err = a.Authenticate(context.Background(), "opaque-of-the-issuer")
	if err != nil {
		t.Fatalf("Authenticate(issuer's opaque token): %v", err)
	}
	if id.User.Username != "oidc:bob@example.com" || !slices.Equal(id.User.Groups, []string{"oidc:search"}) {
		t.Errorf("caller = %q %q, want oidc:bob@example.com [oidc:search]", id.User.Username, id.User.Groups)
	}
	if calls, _ := reviews.counts(); calls != 2 || op.introspected() != 1 {
		t.Errorf("reviews %d, introspections %d; want 2 and 1: reviewed first, then introspected", calls, op.introspected())
	}

	// An issuer's opaque token that looks like a JWE (zitadel's do): malformed for the
	// API server, so introspected without a review.
	jweLike := "eyJhbGciOiJkaXIifQ.a.b.c.d"
	op.active[jweLike] = op.active["opaque-of-the-issuer"]
	if id, err := a.Authenticate(context.Background(), jweLike); err != nil || id.User.Username != "oidc:bob@example.com" {
		t.Fatalf("Authenticate(five-segment opaque token) = %v, %v", id, err)
	}
	if calls, _ := reviews.counts(); calls != 2 || op.introspected() != 2 {
		t.Errorf("reviews %d, introspections %d; want 2 and 2: a malformed JWT is never reviewed", calls, op.introspected())
	}

	if _, err := a.Authenticate(context.Background(), "opaque-of-no-one"); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Authenticate(unknown opaque token) = %v, want ErrUnauthenticated", err)
	}
	if calls, _ := reviews.counts(); calls != 3 || op.introspected() != 3 {
		t.Errorf("reviews %d, introspections %d; want 3 and 3", calls, op.introspected())
	}
}
