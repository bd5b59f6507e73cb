package identity

import (
	"context"
	"strings"
	"testing"
	"time"
)

// FuzzAuthenticate presents tokens made from a good one: whatever it accepts maps to the
// identity the OP signed, and no refusal repeats the token.
func FuzzAuthenticate(f *testing.F) {
	op := newTestOP(f, true)
	cfg := op.config("corp")
	cfg.Introspection = &Introspection{ClientID: op.clientID, ClientSecret: op.clientSecret}
	ps := NewProviders(Options{Timeout: 2 * time.Second})
	if err := ps.Apply(context.Background(), cfg); err != nil {
		f.Fatal(err)
	}
	good := op.sign("k1", op.claims(audience))
	f.Add(good)
	parts := strings.Split(good, ".")
	f.Add(parts[0] + "." + parts[1] + ".")
	f.Add(parts[0] + ".." + parts[2])
	f.Add("." + parts[1] + "." + parts[2])
	f.Add(good + "=")
	f.Add("eyJhbGciOiJub25lIn0." + parts[1] + ".")
	f.Add("opaque")
	f.Fuzz(func(t *testing.T, token string) {
		caller, err := ps.Authenticate(context.Background(), token)
		if err == nil {
			if caller.Username != "oidc:alice@example.com" {
				t.Fatalf("accepted %q as %+v", token, caller)
			}
			return
		}
		if len(token) >= 16 && strings.Contains(err.Error(), token) {
			t.Fatalf("the refusal %q repeats the token", err)
		}
		if strings.Contains(err.Error(), op.clientSecret) {
			t.Fatalf("the refusal %q holds the client secret", err)
		}
	})
}
