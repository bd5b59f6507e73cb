package oauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/oauth2"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// A token endpoint's error answer becomes the reason a user sees in status, whether it
// heals by itself, and whether the same grant is tried again; the endpoint's words are
// kept without the tokens it may quote.
func TestTokenResponseError(t *testing.T) {
	const endpoint = "token endpoint https://as.example.com:443"
	answer := func(status int, code, desc string) error {
		return fmt.Errorf("oauth2: %w", &oauth2.RetrieveError{
			Response: &http.Response{StatusCode: status}, ErrorCode: code, ErrorDescription: desc,
		})
	}
	for _, tc := range []struct {
		name      string
		err       error
		reason    string
		transient bool
		message   string
	}{
		{"invalid_client", answer(401, "invalid_client", "bad secret"), mcpv1alpha1.ReasonInvalidClient, false,
			`token endpoint https://as.example.com:443 rejected client "c1": answered 401 invalid_client: bad secret`},
		{"bare 401", answer(401, "", ""), mcpv1alpha1.ReasonInvalidClient, false,
			`token endpoint https://as.example.com:443 rejected client "c1": answered 401`},
		{"invalid_scope", answer(400, "invalid_scope", ""), mcpv1alpha1.ReasonInsufficientScope, false,
			`token endpoint https://as.example.com:443 refused scope "read write": answered 400 invalid_scope`},
		{"invalid_grant quoting the assertion", answer(400, "invalid_grant", "assertion eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXZhbHVl expired"),
			mcpv1alpha1.ReasonInvalidGrant, false,
			`token endpoint https://as.example.com:443 refused the grant: answered 400 invalid_grant: assertion [redacted] expired`},
		{"server error", answer(503, "", ""), mcpv1alpha1.ReasonTokenRequestFailed, true,
			`token endpoint https://as.example.com:443 answered 503`},
		{"rate limited", answer(429, "slow_down", ""), mcpv1alpha1.ReasonTokenRequestFailed, true,
			`token endpoint https://as.example.com:443 answered 429 slow_down`},
		{"other answer", answer(400, "unsupported_grant_type", ""), mcpv1alpha1.ReasonTokenRequestFailed, false,
			`token endpoint https://as.example.com:443 answered 400 unsupported_grant_type`},
	} {
		e := TokenResponseError(endpoint, "c1", []string{"read", "write"}, tc.err)
		if e == nil {
			t.Fatalf("%s: no error", tc.name)
		}
		if e.Reason != tc.reason || e.Transient != tc.transient || e.Refused == tc.transient || e.Message != tc.message {
			t.Errorf("%s: got %+v, want reason %s, transient %v, message %q", tc.name, e, tc.reason, tc.transient, tc.message)
		}
	}
	if e := TokenResponseError(endpoint, "c1", nil, errors.New("dial tcp: connection refused")); e != nil {
		t.Errorf("a failed fetch is not an OAuth answer: %+v", e)
	}
}

func pemOf(t *testing.T, typ string, der []byte) []byte {
	t.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func TestParseSigningKey(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalECPrivateKey(ec)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p384DER, _ := x509.MarshalPKCS8PrivateKey(p384)
	small, _ := rsa.GenerateKey(rand.Reader, 1024) //nolint:gosec // a key too short on purpose
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"EC P-256", "", pemOf(t, "EC PRIVATE KEY", ecDER)},
		{"not PEM", "private key is not PEM encoded", []byte("secret")},
		{"a certificate", `private key PEM block "CERTIFICATE" is not a private key`, pemOf(t, "CERTIFICATE", []byte{1})},
		{"garbage", "private key does not parse", pemOf(t, "PRIVATE KEY", []byte{1, 2, 3})},
		{"P-384", "EC private key is not on curve P-256 (ES256)", pemOf(t, "PRIVATE KEY", p384DER)},
		{"RSA 1024", "RSA private key is shorter than 2048 bits", pemOf(t, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(small))},
	} {
		key, alg, err := ParseSigningKey(tc.data)
		switch {
		case tc.want == "" && (err != nil || key == nil || alg != jwt.SigningMethodES256):
			t.Errorf("%s: got %v, %v", tc.name, alg, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: got error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A client assertion names the client, the token endpoint and the issuer as audiences,
// and lives briefly.
func TestClientCredentialsPrivateKeyJWT(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tokenURL, _ := url.Parse("https://as.example.com/token")
	now := time.Now()
	cc, assertion, e := ClientCredentials{
		ClientID: "c1", Key: &SigningKey{Key: ec, Alg: jwt.SigningMethodES256}, Method: AuthMethodPrivateKeyJWT,
		TokenURL: tokenURL, Issuer: "https://as.example.com", Scopes: []string{"read"}, Resource: "https://mcp.example.com/mcp",
	}.Request(now)
	if e != nil {
		t.Fatal(e)
	}
	if cc.AuthStyle != oauth2.AuthStyleInParams || cc.ClientSecret != "" ||
		cc.EndpointParams.Get("client_assertion") != assertion || cc.EndpointParams.Get("client_assertion_type") != ClientAssertionType ||
		cc.EndpointParams.Get("resource") != "https://mcp.example.com/mcp" {
		t.Fatalf("request: %+v", cc)
	}
	claims := jwt.MapClaims{}
	if _, err := jwt.ParseWithClaims(assertion, claims, func(*jwt.Token) (any, error) { return &ec.PublicKey, nil },
		jwt.WithValidMethods([]string{"ES256"}), jwt.WithIssuer("c1"), jwt.WithSubject("c1"),
		jwt.WithAudience("https://as.example.com/token"), jwt.WithAudience("https://as.example.com")); err != nil {
		t.Fatal(err)
	}
	if exp, _ := claims.GetExpirationTime(); exp == nil || exp.Sub(now) > AssertionLifetime {
		t.Errorf("assertion lives until %v", exp)
	}

	_, _, e = ClientCredentials{ClientID: "c1", Method: AuthMethodPrivateKeyJWT, TokenURL: tokenURL}.Request(now)
	if e == nil || e.Reason != mcpv1alpha1.ReasonInvalidSpec || e.Authentication != mcpv1alpha1.ReasonInvalidClient {
		t.Errorf("private_key_jwt without a key: %+v", e)
	}
}

func TestClientCredentialsSecret(t *testing.T) {
	tokenURL, _ := url.Parse("https://as.example.com/token")
	for method, style := range map[string]oauth2.AuthStyle{
		"": oauth2.AuthStyleInHeader, AuthMethodClientSecretBasic: oauth2.AuthStyleInHeader, AuthMethodClientSecretPost: oauth2.AuthStyleInParams,
	} {
		cc, assertion, e := ClientCredentials{ClientID: "c1", ClientSecret: "s", Method: method, TokenURL: tokenURL}.Request(time.Now())
		if e != nil || cc.AuthStyle != style || cc.ClientSecret != "s" || assertion != "" {
			t.Errorf("%q: got %+v, %q, %v", method, cc, assertion, e)
		}
		_, _, e = ClientCredentials{ClientID: "c1", Method: method, TokenURL: tokenURL}.Request(time.Now())
		if e == nil || !strings.Contains(e.Message, "needs a client secret") || e.Authentication != mcpv1alpha1.ReasonInvalidClient {
			t.Errorf("%q without a secret: %+v", method, e)
		}
	}
}

func TestJWTBearerRequest(t *testing.T) {
	tokenURL, _ := url.Parse("https://as.example.com/token")
	g := JWTBearer{TokenURL: tokenURL, Assertion: "a.b.c", Client: ClientAuth{ID: "c1"}, Scopes: []string{"read"}, Resource: "https://mcp.example.com"}
	cc, e := g.Request()
	if e != nil || cc.EndpointParams.Get("grant_type") != GrantTypeJWTBearer || cc.EndpointParams.Get("assertion") != "a.b.c" ||
		cc.AuthStyle != oauth2.AuthStyleInParams || cc.ClientID != "c1" {
		t.Fatalf("got %+v, %v", cc, e)
	}
	g.Client = ClientAuth{ID: "c1", Secret: "s", Method: AuthMethodClientSecretBasic}
	if cc, e = g.Request(); e != nil || cc.AuthStyle != oauth2.AuthStyleInHeader || cc.ClientSecret != "s" {
		t.Errorf("client_secret_basic: %+v, %v", cc, e)
	}
	g.Client = ClientAuth{ID: "c1", Method: AuthMethodPrivateKeyJWT}
	if _, e = g.Request(); e == nil || e.Message != `token endpoint auth method "private_key_jwt" cannot be used with the JWT-bearer grant` {
		t.Errorf("private_key_jwt: %+v", e)
	}
	g.Client = ClientAuth{ID: "c1", Method: AuthMethodClientSecretPost}
	if _, e = g.Request(); e == nil || e.Message != "token endpoint auth method client_secret_post needs a client secret" {
		t.Errorf("no secret: %+v", e)
	}
}

func TestCheckToken(t *testing.T) {
	tokenURL, _ := url.Parse("https://as.example.com/token")
	issued := time.Now()
	if e := CheckToken(&oauth2.Token{AccessToken: "t", TokenType: "mac"}, tokenURL, issued, 30*time.Second); e == nil ||
		e.Message != "token endpoint https://as.example.com:443 issued no bearer token" {
		t.Errorf("mac token: %+v", e)
	}
	short := &oauth2.Token{AccessToken: "t", TokenType: "bearer", Expiry: issued.Add(20 * time.Second)}
	if e := CheckToken(short, tokenURL, issued, 30*time.Second); e != nil || !short.Expiry.Equal(issued.Add(40*time.Second)) {
		t.Errorf("a 20s token is due at %v (after 10s, with the 30s margin), %v", short.Expiry.Sub(issued), e)
	}
	long := &oauth2.Token{AccessToken: "t", Expiry: issued.Add(time.Hour)}
	if e := CheckToken(long, tokenURL, issued, 30*time.Second); e != nil || !long.Expiry.Equal(issued.Add(time.Hour)) {
		t.Errorf("an hour's token: %v, %v", long.Expiry.Sub(issued), e)
	}
}

// A credential that cannot be used fails when it is configured, and says why without
// quoting it.
func TestCheckClientCredential(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(ec)
	key := pemOf(t, "PRIVATE KEY", der)
	for _, tc := range []struct {
		name, id, secret, method, want string
		key                            []byte
	}{
		{name: "secret", id: "c1", secret: "s3cret"},
		{name: "key", id: "c1", key: key, method: AuthMethodPrivateKeyJWT},
		{name: "no client ID", secret: "s3cret", want: "OAuth client credentials need a client ID"},
		{name: "unknown method", id: "c1", secret: "s3cret", method: "tls_client_auth", want: `unknown token endpoint auth method "tls_client_auth"`},
		{name: "both", id: "c1", secret: "s3cret", key: key, want: "OAuth client credentials set both a client secret and a private key"},
		{name: "key for a secret method", id: "c1", key: key, method: AuthMethodClientSecretPost, want: "token endpoint auth method client_secret_post needs a client secret, not a private key"},
		{name: "secret for private_key_jwt", id: "c1", secret: "s3cret", method: AuthMethodPrivateKeyJWT, want: "token endpoint auth method private_key_jwt needs a private key, not a client secret"},
		{name: "neither", id: "c1", want: "OAuth client credentials need a client secret or a private key"},
		{name: "a key that does not parse", id: "c1", key: []byte("s3cret"), want: "private key is not PEM encoded"},
	} {
		k, e := CheckClientCredential(tc.id, tc.secret, tc.key, tc.method)
		switch {
		case tc.want == "" && (e != nil || (k != nil) != (tc.key != nil)):
			t.Errorf("%s: got %v, %+v", tc.name, k, e)
		case tc.want != "" && (e == nil || e.Message != tc.want || e.Reason != mcpv1alpha1.ReasonInvalidSpec || e.Authentication != mcpv1alpha1.ReasonInvalidClient):
			t.Errorf("%s: got %+v, want %q", tc.name, e, tc.want)
		case e != nil && strings.Contains(e.Message, "s3cret"):
			t.Errorf("%s: the message quotes the credential: %q", tc.name, e.Message)
		}
	}
}

func TestDefaultAuthMethod(t *testing.T) {
	for _, tc := range []struct {
		key       bool
		supported []string
		want      string
	}{
		{true, []string{AuthMethodClientSecretPost}, AuthMethodPrivateKeyJWT},
		{false, nil, AuthMethodClientSecretBasic},
		{false, []string{AuthMethodClientSecretPost}, AuthMethodClientSecretPost},
		{false, []string{AuthMethodClientSecretPost, AuthMethodClientSecretBasic}, AuthMethodClientSecretBasic},
	} {
		if got := DefaultAuthMethod(tc.key, tc.supported); got != tc.want {
			t.Errorf("DefaultAuthMethod(%v, %q) = %s, want %s", tc.key, tc.supported, got, tc.want)
		}
	}
}

// A credential goes over https, or plain http to a loopback address by itself when
// allowed; never to a name that only resolves to one.
func TestCheckTokenURL(t *testing.T) {
	for raw, want := range map[string]bool{
		"https://as.example.com/token":  true,
		"http://127.0.0.1:8080/token":   true,
		"http://localhost/token":        true,
		"http://[::1]/token":            true,
		"http://as.example.com/token":   false,
		"http://127.0.0.1.nip.io/token": false,
		"ftp://as.example.com/token":    false,
	} {
		u, _ := url.Parse(raw)
		e := CheckTokenURL(u, true, "client credential")
		if (e == nil) != want {
			t.Errorf("%s: got %+v", raw, e)
		}
		if e != nil && (e.Reason != mcpv1alpha1.ReasonTokenRequestFailed || !strings.Contains(e.Message, "the client credential is sent only over https")) {
			t.Errorf("%s: %+v", raw, e)
		}
	}
	u, _ := url.Parse("http://127.0.0.1/token")
	if e := CheckTokenURL(u, false, "workload JWT"); e == nil || e.Message != "token endpoint http://127.0.0.1:80 is not https: the workload JWT is sent only over https (or plain http to a loopback address with allowInsecureHTTP)" {
		t.Errorf("plain http without allowInsecureHTTP: %+v", e)
	}
}
