package identity

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// smallOP is testutil's OpenID provider, whose introspection endpoint answers only the
// client providersFor applies, and whose tokens are alice's.
type smallOP struct{ *testutil.OP }

func newSmallOP(t *testing.T) *smallOP {
	t.Helper()
	op := testutil.StartOP(t)
	op.RequireClient("switchboard-gateway", "client-secret")
	return &smallOP{op}
}

// sign returns a JWT for alice of this issuer, signed with key under key id kid.
func (op *smallOP) sign(key *ecdsa.PrivateKey, kid string) string {
	return op.Sign(key, kid, map[string]any{
		"iss":    op.URL(),
		"sub":    "248289761001",
		"aud":    "https://mcp.example.com",
		"exp":    time.Now().Add(time.Hour).Unix(),
		"iat":    time.Now().Unix(),
		"email":  "alice@example.com",
		"groups": []string{"mcp-users"},
	})
}

// providersFor applies one provider for op, introspecting opaque tokens.
func providersFor(t *testing.T, op *smallOP) *Providers {
	t.Helper()
	ps := NewProviders(Options{})
	err := ps.Apply(context.Background(), ProviderConfig{
		Name:              "corp",
		Generation:        1,
		IssuerURL:         op.URL(),
		Audiences:         []string{"https://mcp.example.com"},
		AllowInsecureHTTP: true,
		UsernameClaim:     "email",
		UsernamePrefix:    "oidc:",
		GroupsClaim:       "groups",
		GroupsPrefix:      "oidc:",
		Advertise:         true,
		Introspection:     &Introspection{ClientID: "switchboard-gateway", ClientSecret: "client-secret"},
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

	id, err := a.Authenticate(context.Background(), op.sign(op.Published, "k1"))
	if err != nil {
		t.Fatalf("Authenticate(provider JWT): %v", err)
	}
	if id.Username != "oidc:alice@example.com" || !slices.Equal(id.Groups, []string{"oidc:mcp-users"}) {
		t.Errorf("caller = %q %q, want oidc:alice@example.com [oidc:mcp-users]", id.Username, id.Groups)
	}
	if id.Key != NewCaller(id.UserInfo()).Key {
		t.Errorf("the key of a provider's caller differs from the key of the same Kubernetes user")
	}

	for _, kid := range []string{"k1", "k2"} {
		_, err := a.Authenticate(context.Background(), op.sign(op.Hidden, kid))
		if !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("Authenticate(JWT signed by an unpublished key, kid %s) = %v, want ErrUnauthenticated", kid, err)
		}
	}
	if calls, _ := reviews.counts(); calls != 0 {
		t.Errorf("TokenReviews = %d, want 0: the provider's issuer decides on its tokens", calls)
	}
	if n := op.Introspections(); n != 0 {
		t.Errorf("introspections = %d, want 0 for JWTs", n)
	}
}

// An opaque token goes to TokenReview first; introspection is asked only when
// TokenReview refuses it.
func TestAuthenticatorOpaqueTokensReviewedBeforeIntrospection(t *testing.T) {
	op := newSmallOP(t)
	bob := map[string]any{
		"active": true, "aud": "https://mcp.example.com", "exp": time.Now().Add(time.Hour).Unix(),
		"email": "bob@example.com", "groups": []string{"search"},
	}
	op.Activate("opaque-of-the-issuer", bob)
	reviews := &fakeReviews{valid: map[string]string{"opaque-of-the-cluster": "carol"}}
	a := NewAuthenticator(reviews, nil, AuthenticatorOptions{IdentityProviders: providersFor(t, op)})

	id, err := a.Authenticate(context.Background(), "opaque-of-the-cluster")
	if err != nil || id.Username != "carol" {
		t.Fatalf("Authenticate(cluster's opaque token) = %v, %v; want carol", id, err)
	}
	if calls, _ := reviews.counts(); calls != 1 || op.Introspections() != 0 {
		t.Errorf("reviews %d, introspections %d; want 1 and 0: TokenReview accepted it", calls, op.Introspections())
	}

	id, err = a.Authenticate(context.Background(), "opaque-of-the-issuer")
	if err != nil {
		t.Fatalf("Authenticate(issuer's opaque token): %v", err)
	}
	if id.Username != "oidc:bob@example.com" || !slices.Equal(id.Groups, []string{"oidc:search"}) {
		t.Errorf("caller = %q %q, want oidc:bob@example.com [oidc:search]", id.Username, id.Groups)
	}
	if calls, _ := reviews.counts(); calls != 2 || op.Introspections() != 1 {
		t.Errorf("reviews %d, introspections %d; want 2 and 1: reviewed first, then introspected", calls, op.Introspections())
	}

	// An issuer's opaque token that looks like a JWE (zitadel's do): malformed for the
	// API server, so introspected without a review.
	jweLike := "eyJhbGciOiJkaXIifQ.a.b.c.d"
	op.Activate(jweLike, bob)
	if id, err := a.Authenticate(context.Background(), jweLike); err != nil || id.Username != "oidc:bob@example.com" {
		t.Fatalf("Authenticate(five-segment opaque token) = %v, %v", id, err)
	}
	if calls, _ := reviews.counts(); calls != 2 || op.Introspections() != 2 {
		t.Errorf("reviews %d, introspections %d; want 2 and 2: a malformed JWT is never reviewed", calls, op.Introspections())
	}

	if _, err := a.Authenticate(context.Background(), "opaque-of-no-one"); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Authenticate(unknown opaque token) = %v, want ErrUnauthenticated", err)
	}
	if calls, _ := reviews.counts(); calls != 3 || op.Introspections() != 3 {
		t.Errorf("reviews %d, introspections %d; want 3 and 3", calls, op.Introspections())
	}
}
