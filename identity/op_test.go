package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// testOP is an OpenID provider in the test: discovery, a key set the test changes, and
// an introspection endpoint that knows the opaque tokens the test gives it. It counts
// the requests it serves.
type testOP struct {
	t   testing.TB
	srv *httptest.Server

	mu        sync.Mutex
	keys      map[string]*ecdsa.PrivateKey // every key made, by kid
	published []string                     // kids in the key set
	opaque    map[string]map[string]any    // introspection answers by token
	keysDown  bool                         // the key set answers 503
	wrapped   http.Handler                 // serves instead of the OP's own handler when set

	jwksFetches    int
	introspections int

	clientID, clientSecret string

	mux *http.ServeMux // the OP's own handler
}

// wrap has the OP serve wrap(its own handler) from now on.
func (op *testOP) wrap(wrap func(own http.Handler) http.Handler) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.wrapped = wrap(op.mux)
}

// newTestOP starts an OP over TLS (tls) or plain http on loopback, with one published
// key "k1".
func newTestOP(t testing.TB, tls bool) *testOP {
	t.Helper()
	op := &testOP{
		t:            t,
		keys:         make(map[string]*ecdsa.PrivateKey),
		opaque:       make(map[string]map[string]any),
		clientID:     "switchboard-gateway",
		clientSecret: "s3cret-client-password",
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{
			"issuer":                 op.issuer(),
			"jwks_uri":               op.issuer() + "/keys",
			"introspection_endpoint": op.issuer() + "/introspect",
			"authorization_endpoint": op.issuer() + "/authorize",
			"token_endpoint":         op.issuer() + "/token",
		})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		op.mu.Lock()
		defer op.mu.Unlock()
		op.jwksFetches++
		if op.keysDown {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		set := jose.JSONWebKeySet{}
		for _, kid := range op.published {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: &op.keys[kid].PublicKey, KeyID: kid, Algorithm: "ES256", Use: "sig"})
		}
		writeJSON(w, set)
	})
	mux.HandleFunc("POST /introspect", func(w http.ResponseWriter, r *http.Request) {
		op.mu.Lock()
		defer op.mu.Unlock()
		op.introspections++
		id, secret, ok := r.BasicAuth()
		if !ok || id != op.clientID || secret != op.clientSecret {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		answer, known := op.opaque[r.PostFormValue("token")]
		if !known {
			answer = map[string]any{"active": false}
		}
		writeJSON(w, answer)
	})
	op.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op.mu.Lock()
		h := op.wrapped
		op.mu.Unlock()
		if h == nil {
			h = mux
		}
		h.ServeHTTP(w, r)
	}))
	op.mux = mux
	// Refused handshakes (tests of an untrusted certificate) are expected.
	op.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if tls {
		op.srv.StartTLS()
	} else {
		op.srv.Start()
	}
	t.Cleanup(op.srv.Close)
	op.addKey("k1", true)
	return op
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (op *testOP) issuer() string { return op.srv.URL }

// caPEM is the OP's certificate, PEM-encoded, for ProviderConfig.CACertPEM.
func (op *testOP) caPEM() []byte {
	if op.srv.Certificate() == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: op.srv.Certificate().Raw})
}

// addKey makes a signing key kid, published in the key set or not.
func (op *testOP) addKey(kid string, publish bool) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		op.t.Fatal(err)
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	op.keys[kid] = k
	if publish {
		op.published = append(op.published, kid)
	}
}

func (op *testOP) publish(kid string) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.published = append(op.published, kid)
}

func (op *testOP) setKeysDown(down bool) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.keysDown = down
}

func (op *testOP) counts() (jwks, introspections int) {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.jwksFetches, op.introspections
}

// sign returns a JWT with claims signed by key kid (with kid in its header).
func (op *testOP) sign(kid string, claims map[string]any) string {
	op.t.Helper()
	op.mu.Lock()
	key := op.keys[kid]
	op.mu.Unlock()
	return signWith(op.t, key, kid, claims)
}

func signWith(t testing.TB, key *ecdsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
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

// claims returns valid claims for alice, for audience aud.
func (op *testOP) claims(aud any) map[string]any {
	now := time.Now()
	return map[string]any{
		"iss":            op.issuer(),
		"sub":            "248289761001",
		"aud":            aud,
		"exp":            now.Add(time.Hour).Unix(),
		"iat":            now.Unix(),
		"email":          "alice@example.com",
		"email_verified": true,
		"groups":         []string{"mcp-users", "search"},
	}
}

// introspects makes token an opaque token the OP answers about with answer.
func (op *testOP) introspects(token string, answer map[string]any) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.opaque[token] = answer
}

// config returns a provider for the OP: audience https://mcp.example.com, username from
// email and groups from groups, both prefixed "oidc:".
func (op *testOP) config(name string) ProviderConfig {
	return ProviderConfig{
		Name:           name,
		Generation:     1,
		IssuerURL:      op.issuer(),
		Audiences:      []string{"https://mcp.example.com", "other-audience"},
		CACertPEM:      op.caPEM(),
		UsernameClaim:  "email",
		UsernamePrefix: "oidc:",
		GroupsClaim:    "groups",
		GroupsPrefix:   "oidc:",
		Advertise:      true,
	}
}

// signRaw signs claims marshalled and then changed by edit.
func signRaw(t *testing.T, key *ecdsa.PrivateKey, kid string, edit func([]byte) []byte, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.Sign(edit(payload))
	if err != nil {
		t.Fatal(err)
	}
	token, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// hs256Token signs claims with a shared secret: anyone holding it could forge one.
func hs256Token(t *testing.T, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte("0123456789abcdef0123456789abcdef")}, nil)
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

// closedURL is the URL of a loopback server that no longer listens.
func closedURL(t *testing.T) string {
	t.Helper()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	return u
}

// newDiscoveryOnly serves a discovery document without introspection_endpoint, with
// op's key set, under op's certificate; it returns its issuer URL.
func newDiscoveryOnly(t *testing.T, op *testOP) string {
	t.Helper()
	var srv *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"issuer": srv.URL, "jwks_uri": op.issuer() + "/keys"})
	})
	srv = httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}
