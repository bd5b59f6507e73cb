package identity

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
	"github.com/go-logr/logr/funcr"
)

const testIssuer = "https://kubernetes.default.svc.cluster.local"

// testIssuerKeys is an issuer with RSA keys that signs tokens and serves its key set,
// counting fetches, or failing them while down is set.
type testIssuerKeys struct {
	t        *testing.T
	keys     map[string]*rsa.PrivateKey // kid -> key
	impostor *rsa.PrivateKey            // signs forged tokens

	mu        sync.Mutex
	published []string // kids in the key set
	fetches   int
	down      bool
}

func newTestIssuerKeys(t *testing.T, kids ...string) *testIssuerKeys {
	k := &testIssuerKeys{t: t, keys: map[string]*rsa.PrivateKey{}}
	for _, kid := range kids {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		k.keys[kid] = key
		k.published = append(k.published, kid)
	}
	return k
}

func (k *testIssuerKeys) fetch(context.Context) (string, []byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fetches++
	if k.down {
		return "", nil, errors.New("the server could not find the requested resource")
	}
	var set jose.JSONWebKeySet
	for _, kid := range k.published {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.keys[kid].PublicKey, KeyID: kid, Algorithm: "RS256", Use: "sig"})
	}
	b, err := json.Marshal(set)
	return testIssuer, b, err
}

func (k *testIssuerKeys) fetchCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.fetches
}

// sign returns a token with claims, signed with the issuer's key kid (a key of its own
// when the issuer has none of that id).
func (k *testIssuerKeys) sign(kid string, claims josejwt.Claims) string {
	key, ok := k.keys[kid]
	if !ok {
		return k.forge(kid, claims)
	}
	return k.signWith(key, kid, claims)
}

// forge returns a token with claims that names the key id kid but is signed with a key
// the issuer does not have.
func (k *testIssuerKeys) forge(kid string, claims josejwt.Claims) string {
	if k.impostor == nil {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			k.t.Fatal(err)
		}
		k.impostor = key
	}
	return k.signWith(k.impostor, kid, claims)
}

func (k *testIssuerKeys) signWith(key *rsa.PrivateKey, kid string, claims josejwt.Claims) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithHeader(jose.HeaderKey("kid"), kid))
	if err != nil {
		k.t.Fatal(err)
	}
	token, err := josejwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		k.t.Fatal(err)
	}
	return token
}

func saClaims(issuer string, expiresIn time.Duration) josejwt.Claims {
	now := time.Now()
	return josejwt.Claims{
		Issuer: issuer, Subject: "system:serviceaccount:team-a:agent", ID: rand.Text(),
		Audience:  josejwt.Audience{"https://kubernetes.default.svc"},
		IssuedAt:  josejwt.NewNumericDate(now.Add(-time.Minute)),
		NotBefore: josejwt.NewNumericDate(now.Add(-time.Minute)),
		Expiry:    josejwt.NewNumericDate(now.Add(expiresIn)),
	}
}

// Which lane a token is reviewed in, or whether it is rejected without a review, is
// decided by the local check against the issuer's keys.
func TestAuthenticatorChecksServiceAccountTokensLocally(t *testing.T) {
	issuer := newTestIssuerKeys(t, "k1", "k2")
	valid := issuer.sign("k1", saClaims(testIssuer, time.Hour))
	parts := strings.Split(valid, ".")
	tampered := parts[0] + "." + strings.Split(issuer.sign("k1", josejwt.Claims{Issuer: testIssuer, Subject: "system:serviceaccount:kube-system:admin", Expiry: josejwt.NewNumericDate(time.Now().Add(time.Hour))}), ".")[1] + "." + parts[2]
	for _, tc := range []struct {
		name, token string
		saOnly      bool
		// lane is "unknown", "verified", or "" for a rejection without a review.
		lane string
	}{
		{"ServiceAccount token", valid, false, "verified"},
		{"ServiceAccount token signed by the second key", issuer.sign("k2", saClaims(testIssuer, time.Hour)), false, "verified"},
		{"legacy ServiceAccount token", issuer.sign("k1", josejwt.Claims{Issuer: legacyIssuer, Subject: "system:serviceaccount:team-a:agent"}), false, "verified"},
		{"claims of another token under a valid signature", tampered, false, ""},
		{"signed by another key under one of the issuer's key ids", issuer.forge("k1", saClaims(testIssuer, time.Hour)), false, ""},
		{"a key id the issuer has not published", issuer.sign("k3", saClaims(testIssuer, time.Hour)), false, "unknown"},
		{"expired", issuer.sign("k1", saClaims(testIssuer, -2*time.Minute)), false, ""},
		{"not valid yet", issuer.sign("k1", josejwt.Claims{Issuer: testIssuer, NotBefore: josejwt.NewNumericDate(time.Now().Add(time.Hour))}), false, ""},
		{"another issuer", issuer.sign("k1", saClaims("https://oidc.example", time.Hour)), false, "unknown"},
		{"opaque token", "abcdef.0123456789abcdef", false, "unknown"},
		{"another issuer, ServiceAccount tokens only", issuer.sign("k1", saClaims("https://oidc.example", time.Hour)), true, ""},
		{"opaque token, ServiceAccount tokens only", "abcdef.0123456789abcdef", true, ""},
		{"ServiceAccount token, ServiceAccount tokens only", valid, true, "verified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unknown := &fakeReviews{valid: map[string]string{tc.token: "alice"}}
			known := &fakeReviews{valid: map[string]string{tc.token: "alice"}}
			a := NewAuthenticator(unknown, known, AuthenticatorOptions{ServiceAccountKeys: issuer.fetch, ServiceAccountTokensOnly: tc.saOnly})
			_, err := a.Authenticate(context.Background(), tc.token)
			u, _ := unknown.counts()
			k, _ := known.counts()
			switch tc.lane {
			case "":
				if !errors.Is(err, ErrUnauthenticated) || u+k != 0 {
					t.Errorf("Authenticate = %v after %d reviews; want ErrUnauthenticated without a review", err, u+k)
				}
			case "verified":
				if err != nil || k != 1 || u != 0 {
					t.Errorf("Authenticate = %v; %d reviews in the lane for unknown tokens, %d in the others; want one review in the verified lane", err, u, k)
				}
			case "unknown":
				if err != nil || u != 1 || k != 0 {
					t.Errorf("Authenticate = %v; %d reviews in the lane for unknown tokens, %d in the others; want one there", err, u, k)
				}
			}
		})
	}
}

// Unknown key ids cost at most one key set fetch per refresh interval, however many
// tokens name them; a key set that cannot be fetched leaves every token to TokenReview,
// logged once.
func TestAuthenticatorFetchesKeysSparinglyAndFallsBack(t *testing.T) {
	issuer := newTestIssuerKeys(t, "k1")
	reviews := &fakeReviews{valid: map[string]string{}}
	a := NewAuthenticator(reviews, nil, AuthenticatorOptions{ServiceAccountKeys: issuer.fetch, MaxConcurrentReviews: 1000})
	if _, err := a.Authenticate(context.Background(), issuer.sign("k1", saClaims(testIssuer, time.Hour))); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Authenticate = %v", err)
	}
	for range 50 {
		_, _ = a.Authenticate(context.Background(), issuer.sign("made-up", saClaims(testIssuer, time.Hour)))
	}
	if n := issuer.fetchCount(); n > 2 {
		t.Errorf("%d key set fetches for 50 tokens with an unknown key id; want at most 2", n)
	}

	down := newTestIssuerKeys(t, "k1")
	down.down = true
	var mu sync.Mutex
	var logged []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, args)
	}, funcr.Options{})
	reviews = &fakeReviews{valid: map[string]string{}}
	b := NewAuthenticator(reviews, nil, AuthenticatorOptions{ServiceAccountKeys: down.fetch, ServiceAccountTokensOnly: true, Logger: log})
	for i := range 3 {
		token := down.sign("k1", saClaims(testIssuer, time.Hour))
		if i == 2 {
			token = "abcdef.0123456789abcdef"
		}
		if _, err := b.Authenticate(context.Background(), token); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("Authenticate = %v", err)
		}
	}
	if calls, _ := reviews.counts(); calls != 3 {
		t.Errorf("TokenReviews without a key set = %d, want 3: every token is reviewed as before", calls)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logged) != 1 || !strings.Contains(logged[0], "Cannot verify ServiceAccount tokens locally") {
		t.Errorf("log lines = %q; want one saying tokens cannot be verified locally", logged)
	}
}
