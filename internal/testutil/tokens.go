package testutil

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// ForgedToken returns a JWT that claims to be what model is (a ServiceAccount token of
// the cluster): model's header (algorithm and key id) and issuer, a subject and expiry of
// its own, and a random signature. No key the cluster holds signed it.
func ForgedToken(tb testing.TB, model string) string {
	tb.Helper()
	parts := strings.Split(model, ".")
	if len(parts) != 3 {
		tb.Fatalf("the model token is not a compact JWS")
	}
	claims, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		tb.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(claims, &c); err != nil {
		tb.Fatal(err)
	}
	c["sub"] = "system:serviceaccount:forged:" + randomHex(tb, 6)
	c["exp"] = time.Now().Add(time.Hour).Unix()
	return parts[0] + "." + encodeJSON(tb, c) + "." + randomSignature(tb)
}

// ForeignToken returns a JWT of a random issuer that is not the cluster's, with a random
// key id and signature, as a flood of made-up OIDC tokens would send.
func ForeignToken(tb testing.TB) string {
	tb.Helper()
	header := map[string]any{"alg": "RS256", "kid": randomHex(tb, 8), "typ": "JWT"}
	claims := map[string]any{
		"iss": "https://issuer-" + randomHex(tb, 6) + ".example",
		"sub": randomHex(tb, 8),
		"aud": []string{"switchboard"},
		"exp": time.Now().Add(time.Hour).Unix(),
	}
	return encodeJSON(tb, header) + "." + encodeJSON(tb, claims) + "." + randomSignature(tb)
}

func encodeJSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func randomSignature(tb testing.TB) string {
	tb.Helper()
	sig := make([]byte, 256)
	if _, err := rand.Read(sig); err != nil {
		tb.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(sig)
}

func randomHex(tb testing.TB, n int) string {
	tb.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}
