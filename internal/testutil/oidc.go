package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/go-jose/go-jose/v4"
)

// OP is an OpenID provider on plain http loopback, for the tests of what judges its
// tokens: a discovery document, a key set publishing one ES256 key (key id "k1"), a
// second key it never publishes (to sign forgeries with), and an RFC 7662 introspection
// endpoint that answers for the opaque tokens Activate made active and counts the
// requests it receives.
type OP struct {
	t   testing.TB
	srv *httptest.Server
	// Published signs what the key set vouches for; Hidden signs what it does not.
	Published, Hidden *ecdsa.PrivateKey

	mu             sync.Mutex
	active         map[string]map[string]any
	introspections int
	clientID       string
	clientSecret   string
}

// StartOP starts an OP that ends with the test. Its introspection endpoint takes any
// client until RequireClient says otherwise.
func StartOP(t testing.TB) *OP {
	t.Helper()
	op := &OP{t: t, active: map[string]map[string]any{}}
	for _, k := range []**ecdsa.PrivateKey{&op.Published, &op.Hidden} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		*k = key
	}
	write := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		write(w, map[string]any{"issuer": op.URL(), "jwks_uri": op.URL() + "/keys", "introspection_endpoint": op.URL() + "/introspect"})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		write(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &op.Published.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	mux.HandleFunc("POST /introspect", func(w http.ResponseWriter, r *http.Request) {
		op.mu.Lock()
		defer op.mu.Unlock()
		if op.clientID != "" {
			if id, secret, ok := r.BasicAuth(); !ok || id != op.clientID || secret != op.clientSecret {
				http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
				return
			}
		}
		op.introspections++
		answer, ok := op.active[r.PostFormValue("token")]
		if !ok {
			answer = map[string]any{"active": false}
		}
		write(w, answer)
	})
	op.srv = httptest.NewServer(mux)
	t.Cleanup(op.srv.Close)
	return op
}

// URL is the OP's issuer URL.
func (op *OP) URL() string { return op.srv.URL }

// RequireClient makes the introspection endpoint answer only the client id with secret
// (client_secret_basic), and 401 invalid_client to any other.
func (op *OP) RequireClient(id, secret string) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.clientID, op.clientSecret = id, secret
}

// Sign returns a compact JWT of claims signed with key under key id kid.
func (op *OP) Sign(key *ecdsa.PrivateKey, kid string, claims map[string]any) string {
	op.t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		op.t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
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

// Activate makes token an active opaque token whose introspection answer is answer.
func (op *OP) Activate(token string, answer map[string]any) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.active[token] = answer
}

// Introspections is how many introspection requests the OP answered.
func (op *OP) Introspections() int {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.introspections
}
