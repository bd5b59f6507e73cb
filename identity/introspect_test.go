package identity

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// introspecting returns the OP's provider "corp" configured to introspect with its client.
func (op *testOP) introspecting() ProviderConfig {
	cfg := op.config("corp")
	cfg.Introspection = &Introspection{ClientID: op.clientID, ClientSecret: op.clientSecret}
	return cfg
}

func activeAnswer(op *testOP, aud any) map[string]any {
	return map[string]any{
		"active":    true,
		"iss":       op.issuer(),
		"aud":       aud,
		"client_id": "web-client",
		"exp":       time.Now().Add(time.Hour).Unix(),
		"email":     "alice@example.com",
		"groups":    []string{"mcp-users"},
	}
}

func TestIntrospection(t *testing.T) {
	op := newTestOP(t, true)
	ps := applied(t, Options{}, op.introspecting())
	ctx := context.Background()

	const active = "opaque-active-0123456789"
	op.introspects(active, activeAnswer(op, []string{audience}))
	caller, err := ps.Authenticate(ctx, active)
	if err != nil {
		t.Fatalf("an active token: %v", err)
	}
	if caller.Username != "oidc:alice@example.com" || len(caller.Groups) != 1 || caller.Groups[0] != "oidc:mcp-users" || caller.Provider != "corp" {
		t.Errorf("caller %+v", caller)
	}

	// Without aud, the client the token was issued to must be one of the audiences.
	const byClient = "opaque-client-only"
	answer := activeAnswer(op, nil)
	delete(answer, "aud")
	answer["client_id"] = audience
	op.introspects(byClient, answer)
	if _, err := ps.Authenticate(ctx, byClient); err != nil {
		t.Errorf("an active token of a client that is an audience: %v", err)
	}

	wrongClient := activeAnswer(op, nil)
	delete(wrongClient, "aud")
	op.introspects("opaque-wrong-client", wrongClient)
	expired := activeAnswer(op, audience)
	expired["exp"] = time.Now().Add(-time.Minute).Unix()
	op.introspects("opaque-expired", expired)
	op.introspects("opaque-wrong-aud", activeAnswer(op, "https://other.example.com"))
	op.introspects("opaque-inactive", map[string]any{"active": false, "email": "alice@example.com"})
	op.introspects("opaque-active-string", map[string]any{"active": "true", "aud": audience, "email": "alice@example.com"})
	otherIss := activeAnswer(op, audience)
	otherIss["iss"] = "https://login.evil.example.com"
	op.introspects("opaque-other-issuer", otherIss)

	for token, reason := range map[string]Reason{
		"opaque-unknown":       ReasonInactive,
		"opaque-inactive":      ReasonInactive,
		"opaque-active-string": ReasonInactive,
		"opaque-wrong-aud":     ReasonWrongAudience,
		"opaque-wrong-client":  ReasonWrongAudience,
		"opaque-expired":       ReasonExpired,
		"opaque-other-issuer":  ReasonUnknownIssuer,
	} {
		t.Run(token, func(t *testing.T) {
			refused(t, ps, token, reason, op.clientSecret, "alice@example.com", "web-client")
		})
	}
}

func TestIntrospectionAnswersAreCached(t *testing.T) {
	op := newTestOP(t, true)
	ps := applied(t, Options{}, op.introspecting())
	ctx := context.Background()
	const token = "opaque-cached"
	op.introspects(token, activeAnswer(op, audience))

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := ps.Authenticate(ctx, token); err != nil {
				t.Errorf("Authenticate: %v", err)
			}
		})
	}
	wg.Wait()
	for range 5 {
		if _, err := ps.Authenticate(ctx, token); err != nil {
			t.Fatalf("Authenticate: %v", err)
		}
	}
	if _, n := op.counts(); n != 1 {
		t.Errorf("25 authentications of one token asked the issuer %d times, want 1", n)
	}

	// Refusals are remembered too.
	for range 5 {
		refused(t, ps, "opaque-nobody-knows", ReasonInactive)
	}
	if _, n := op.counts(); n != 2 {
		t.Errorf("5 refusals of one unknown token asked the issuer %d times in all, want 2 with the first token", n-1)
	}

	// An answer is not kept past the token's exp.
	const shortLived = "opaque-short-lived"
	answer := activeAnswer(op, audience)
	answer["exp"] = time.Now().Add(2 * time.Second).Unix()
	op.introspects(shortLived, answer)
	if _, err := ps.Authenticate(ctx, shortLived); err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "a cached answer to end with the token's exp", func() error {
		_, err := ps.Authenticate(ctx, shortLived)
		if err == nil {
			return errors.New("Authenticate passes the token")
		}
		if te := (*TokenError)(nil); !errors.As(err, &te) || te.Reason != ReasonExpired {
			return fmt.Errorf("Authenticate answers %w, want reason %s", err, ReasonExpired)
		}
		return nil
	})

	// A forgotten provider's answers are gone with it.
	ps.Forget("corp")
	refused(t, ps, token, ReasonUnknownIssuer)
}

func TestIntrospectionFailuresAreUnavailable(t *testing.T) {
	op := newTestOP(t, true)
	ctx := context.Background()
	wrongSecret := op.introspecting()
	wrongSecret.Introspection.ClientSecret = "not-the-secret-" + strings.Repeat("z", 8)
	ps := applied(t, Options{}, wrongSecret)
	const token = "opaque-active-token"
	op.introspects(token, activeAnswer(op, audience))

	_, err := ps.Authenticate(ctx, token)
	if !errors.Is(err, ErrIssuerUnavailable) || errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("rejected client credentials: %v, want ErrIssuerUnavailable (503)", err)
	}
	if !strings.Contains(err.Error(), "credentials") {
		t.Errorf("%q does not point at the client credentials", err)
	}
	assertClean(t, err, token, wrongSecret.Introspection.ClientSecret)

	// Failures are not remembered: once the issuer answers, the token passes.
	if err := ps.Apply(ctx, op.introspecting()); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Authenticate(ctx, token); err != nil {
		t.Fatalf("after fixing the credentials: %v", err)
	}

	op.srv.Close()
	_, err = ps.Authenticate(ctx, "opaque-while-down")
	if !errors.Is(err, ErrIssuerUnavailable) {
		t.Fatalf("issuer down: %v, want ErrIssuerUnavailable", err)
	}
	assertClean(t, err, "opaque-while-down", op.clientSecret)
}

func TestIntrospectionNeedsTheEndpointInDiscovery(t *testing.T) {
	op := newTestOP(t, true)
	cfg := op.introspecting()
	// An issuer whose discovery document lacks introspection_endpoint.
	srv := newDiscoveryOnly(t, op)
	cfg.IssuerURL = srv
	var ae *ApplyError
	if err := NewProviders(Options{}).Apply(context.Background(), cfg); !errors.As(err, &ae) || !strings.Contains(err.Error(), "introspection_endpoint") {
		t.Fatalf("Apply: %v, want an error naming introspection_endpoint", err)
	}
}
