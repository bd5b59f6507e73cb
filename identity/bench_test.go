package identity

import (
	"context"
	"testing"
	"time"
)

// BenchmarkAuthenticateJWT measures one ES256 JWT presented again and again, with its
// key already fetched: verified each time (routing, signature, claims, mappings and one
// CEL rule), and remembered (the default: one verification per VerifiedJWTTTL).
func BenchmarkAuthenticateJWT(b *testing.B) {
	for _, bc := range []struct {
		name string
		ttl  time.Duration
	}{{"verified", time.Nanosecond}, {"remembered", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			op := newTestOP(b, true)
			cfg := op.config("corp")
			cfg.ValidationRules = []ValidationRule{{Expression: "claims.email_verified == true"}}
			ps := NewProviders(Options{VerifiedJWTTTL: bc.ttl})
			if err := ps.Apply(context.Background(), cfg); err != nil {
				b.Fatal(err)
			}
			token := op.sign("k1", op.claims(audience))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ps.Authenticate(ctx, token); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAuthenticateOpaqueCached measures an opaque token whose introspection answer
// is remembered.
func BenchmarkAuthenticateOpaqueCached(b *testing.B) {
	op := newTestOP(b, true)
	ps := NewProviders(Options{})
	if err := ps.Apply(context.Background(), op.introspecting()); err != nil {
		b.Fatal(err)
	}
	const token = "opaque-benchmark-token"
	op.introspects(token, activeAnswer(op, audience))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ps.Authenticate(ctx, token); err != nil {
			b.Fatal(err)
		}
	}
}
