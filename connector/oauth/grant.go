package oauth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// Token endpoint client authentication methods (RFC 7591, RFC 7523).
const (
	// AuthMethodClientSecretBasic sends the client secret in HTTP Basic authentication.
	AuthMethodClientSecretBasic = "client_secret_basic"
	// AuthMethodClientSecretPost sends the client secret in the request body.
	AuthMethodClientSecretPost = "client_secret_post"
	// AuthMethodPrivateKeyJWT sends a client assertion signed with the private key.
	AuthMethodPrivateKeyJWT = "private_key_jwt"
	// AuthMethodNone sends no client secret: client_id alone in the request body, when
	// there is one.
	AuthMethodNone = "none"
)

const (
	// GrantTypeJWTBearer is the JWT-bearer authorization grant (RFC 7523 section 2.1).
	GrantTypeJWTBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer" //nolint:gosec // a grant type name, not a credential
	// ClientAssertionType is the client_assertion_type of a JWT client assertion
	// (RFC 7523 section 2.2).
	ClientAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
	// AssertionLifetime is how long a client assertion is valid.
	AssertionLifetime = 2 * time.Minute
)

// ParseSigningKey reads a PEM EC P-256 or RSA (2048 bits or more) private key and
// returns it with the JWT signing method it signs with. Its errors never quote the key.
func ParseSigningKey(data []byte) (crypto.Signer, jwt.SigningMethod, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, nil, errors.New("private key is not PEM encoded")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, nil, fmt.Errorf("private key PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		return nil, nil, errors.New("private key does not parse")
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, nil, errors.New("EC private key is not on curve P-256 (ES256)")
		}
		return k, jwt.SigningMethodES256, nil
	case *rsa.PrivateKey:
		if k.N.BitLen() < 2048 {
			return nil, nil, errors.New("RSA private key is shorter than 2048 bits")
		}
		return k, jwt.SigningMethodRS256, nil
	default:
		return nil, nil, errors.New("private key is neither EC P-256 nor RSA")
	}
}

// SigningKey is a client's private key and the JWT signing method it signs with
// ([ParseSigningKey]).
type SigningKey struct {
	Key crypto.Signer
	Alg jwt.SigningMethod
}

// CheckClientCredential checks the credential of the client credentials grant: a
// client ID, and a client secret or a PEM private key fit for method (empty lets
// [DefaultAuthMethod] pick it). It returns the parsed key, if any. Its errors (Reason
// mcpv1alpha1.ReasonInvalidSpec, Authentication mcpv1alpha1.ReasonInvalidClient)
// never carry the secret or key material.
func CheckClientCredential(clientID, secret string, privateKey []byte, method string) (*SigningKey, *Error) {
	if clientID == "" {
		return nil, invalidClient("OAuth client credentials need a client ID")
	}
	switch method {
	case "", AuthMethodClientSecretBasic, AuthMethodClientSecretPost, AuthMethodPrivateKeyJWT:
	default:
		return nil, invalidClient("unknown token endpoint auth method %q", method)
	}
	switch {
	case len(privateKey) > 0 && secret != "":
		return nil, invalidClient("OAuth client credentials set both a client secret and a private key")
	case len(privateKey) > 0:
		if method != "" && method != AuthMethodPrivateKeyJWT {
			return nil, invalidClient("token endpoint auth method %s needs a client secret, not a private key", method)
		}
		key, alg, err := ParseSigningKey(privateKey)
		if err != nil {
			return nil, invalidClient("%s", err.Error())
		}
		return &SigningKey{Key: key, Alg: alg}, nil
	case secret != "":
		if method == AuthMethodPrivateKeyJWT {
			return nil, invalidClient("token endpoint auth method private_key_jwt needs a private key, not a client secret")
		}
		return nil, nil
	default:
		return nil, invalidClient("OAuth client credentials need a client secret or a private key")
	}
}

// DefaultAuthMethod picks the client authentication method of the client credentials
// grant when none is configured: private_key_jwt for a key; for a secret
// client_secret_basic unless the authorization server lists its supported methods and
// they hold client_secret_post and not client_secret_basic.
func DefaultAuthMethod(hasKey bool, supported []string) string {
	if hasKey {
		return AuthMethodPrivateKeyJWT
	}
	if len(supported) > 0 && !slices.Contains(supported, AuthMethodClientSecretBasic) && slices.Contains(supported, AuthMethodClientSecretPost) {
		return AuthMethodClientSecretPost
	}
	return AuthMethodClientSecretBasic
}

// CheckTokenURL refuses a token endpoint a credential must not be sent to: anything but
// https, except plain http to a host that names a loopback address by itself
// ([NamesLoopback]) with allowInsecureHTTP. credential names what the request carries
// ("client credential", "workload JWT"), for the message.
func CheckTokenURL(u *url.URL, allowInsecureHTTP bool, credential string) *Error {
	if u.Scheme == "https" {
		return nil
	}
	if u.Scheme == "http" && allowInsecureHTTP && NamesLoopback(u.Hostname()) {
		return nil
	}
	return discoveryError(mcpv1alpha1.ReasonTokenRequestFailed,
		"token endpoint %s is not https: the %s is sent only over https (or plain http to a loopback address with allowInsecureHTTP)",
		Origin(u), credential)
}

// ClientAssertion signs a fresh client assertion (RFC 7523): iss and sub the client ID,
// aud the token endpoint (and the issuer, when known and other than it), a unique jti,
// a life of AssertionLifetime from now.
func (k SigningKey) ClientAssertion(clientID string, tokenURL *url.URL, issuer string, now time.Time) (string, error) {
	aud := jwt.ClaimStrings{tokenURL.String()}
	if issuer != "" && issuer != tokenURL.String() {
		aud = append(aud, issuer)
	}
	claims := jwt.RegisteredClaims{
		Issuer:    clientID,
		Subject:   clientID,
		Audience:  aud,
		ID:        rand.Text(),
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now.Add(-5 * time.Second)),
		ExpiresAt: jwt.NewNumericDate(now.Add(AssertionLifetime)),
	}
	return jwt.NewWithClaims(k.Alg, claims).SignedString(k.Key)
}

// ClientCredentials is one token request of the client credentials grant (RFC 6749
// section 4.4): the client, how it authenticates, and what it asks for.
type ClientCredentials struct {
	// ClientID and ClientSecret are the client's credential; Key, for
	// private_key_jwt, signs its assertion instead of a secret.
	ClientID     string
	ClientSecret string
	Key          *SigningKey
	// Method is the token endpoint auth method (AuthMethod...).
	Method string
	// TokenURL is the token endpoint; Issuer the authorization server's issuer, if
	// known, the assertion's second audience.
	TokenURL *url.URL
	Issuer   string
	// Scopes are asked for; Resource is the server's canonical URL (RFC 8707).
	Scopes   []string
	Resource string
}

// Request builds the token request for golang.org/x/oauth2/clientcredentials, and the
// client assertion it carries for private_key_jwt (empty otherwise) so that its caller
// can redact it. Its errors (Reason mcpv1alpha1.ReasonInvalidSpec, Authentication
// mcpv1alpha1.ReasonInvalidClient) never carry key material.
func (g ClientCredentials) Request(now time.Time) (cc *clientcredentials.Config, assertion string, e *Error) {
	params := url.Values{"resource": {g.Resource}}
	cc = &clientcredentials.Config{
		ClientID:       g.ClientID,
		TokenURL:       g.TokenURL.String(),
		Scopes:         g.Scopes,
		EndpointParams: params,
	}
	switch g.Method {
	case AuthMethodPrivateKeyJWT:
		if g.Key == nil {
			return nil, "", invalidClient("token endpoint auth method private_key_jwt needs a private key")
		}
		signed, err := g.Key.ClientAssertion(g.ClientID, g.TokenURL, g.Issuer, now)
		if err != nil {
			return nil, "", invalidClient("signing the client assertion failed")
		}
		assertion = signed
		params.Set("client_assertion_type", ClientAssertionType)
		params.Set("client_assertion", assertion)
		cc.AuthStyle = oauth2.AuthStyleInParams
	case AuthMethodClientSecretPost:
		cc.ClientSecret = g.ClientSecret
		cc.AuthStyle = oauth2.AuthStyleInParams
	default:
		cc.ClientSecret = g.ClientSecret
		cc.AuthStyle = oauth2.AuthStyleInHeader
	}
	if cc.ClientSecret == "" && g.Method != AuthMethodPrivateKeyJWT {
		return nil, "", invalidClient("token endpoint auth method %s needs a client secret", g.Method)
	}
	return cc, assertion, nil
}

// ClientAuth is how a token request authenticates its client: ID (omitted when empty)
// and, for client_secret_basic or client_secret_post, Secret. AuthMethodNone (or
// empty) sends client_id alone in the body.
type ClientAuth struct {
	ID, Secret, Method string
}

// JWTBearer is one token request of the JWT-bearer grant (RFC 7523 section 2.1).
type JWTBearer struct {
	// TokenURL is the token endpoint; Assertion the JWT presented as the grant.
	TokenURL  *url.URL
	Assertion string
	// Client is how the client authenticates, if at all.
	Client ClientAuth
	// Scopes are asked for; Resource is the server's canonical URL (RFC 8707).
	Scopes   []string
	Resource string
}

// Request builds the token request for golang.org/x/oauth2/clientcredentials:
// grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer, the assertion, the client's
// authentication, the scopes and the resource. Its errors (Reason
// mcpv1alpha1.ReasonInvalidSpec, Authentication mcpv1alpha1.ReasonInvalidClient)
// never carry the assertion.
func (g JWTBearer) Request() (*clientcredentials.Config, *Error) {
	cc := &clientcredentials.Config{
		ClientID: g.Client.ID,
		TokenURL: g.TokenURL.String(),
		Scopes:   g.Scopes,
		// clientcredentials lets grant_type be replaced, and only it.
		EndpointParams: url.Values{"grant_type": {GrantTypeJWTBearer}, "assertion": {g.Assertion}, "resource": {g.Resource}},
		AuthStyle:      oauth2.AuthStyleInParams,
	}
	switch g.Client.Method {
	case AuthMethodClientSecretBasic:
		cc.ClientSecret, cc.AuthStyle = g.Client.Secret, oauth2.AuthStyleInHeader
	case AuthMethodClientSecretPost:
		cc.ClientSecret = g.Client.Secret
	case "", AuthMethodNone:
	default:
		return nil, invalidClient("token endpoint auth method %q cannot be used with the JWT-bearer grant", g.Client.Method)
	}
	if cc.ClientSecret == "" && g.Client.Method != "" && g.Client.Method != AuthMethodNone {
		return nil, invalidClient("token endpoint auth method %s needs a client secret", g.Client.Method)
	}
	return cc, nil
}

// invalidClient is a token request the configuration cannot make.
func invalidClient(format string, args ...any) *Error {
	e := discoveryError(mcpv1alpha1.ReasonInvalidSpec, format, args...)
	e.Authentication = mcpv1alpha1.ReasonInvalidClient
	return e
}

// CheckToken refuses a token response that is not a bearer access token, from the
// token endpoint at tokenURL, and makes a token that lives shorter than twice margin
// due at half its life (plus margin, which its user takes off again), rather than on
// every request.
func CheckToken(tok *oauth2.Token, tokenURL *url.URL, issued time.Time, margin time.Duration) *Error {
	if tok.AccessToken == "" || !strings.EqualFold(tok.Type(), "Bearer") {
		return discoveryError(mcpv1alpha1.ReasonTokenRequestFailed,
			"token endpoint %s issued no bearer token", Origin(tokenURL))
	}
	if !tok.Expiry.IsZero() {
		if life := tok.Expiry.Sub(issued); life < 2*margin {
			tok.Expiry = issued.Add(life/2 + margin)
		}
	}
	return nil
}

// TokenResponseError reads a token endpoint's OAuth error answer (an
// *oauth2.RetrieveError in err) of a request of clientID with scopes; endpoint names
// where it went ("token endpoint https://as.example.com", "token exchange at
// https://sts.example.com"). It returns nil when err is no such answer. The endpoint's
// own words (error, error_description) are kept short and scrubbed of anything that
// looks like a token ([SafeText]); what the request carried is never quoted. An answer
// that is not transient (429 or 5xx) is Refused: the same grant would be refused again.
func TokenResponseError(endpoint, clientID string, scopes []string, err error) *Error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return nil
	}
	status := 0
	if re.Response != nil {
		status = re.Response.StatusCode
	}
	detail := fmt.Sprintf("answered %d", status)
	if re.ErrorCode != "" {
		detail += " " + SafeText(re.ErrorCode, 64)
	}
	if re.ErrorDescription != "" {
		detail += ": " + SafeText(re.ErrorDescription, 200)
	}
	var e *Error
	switch {
	case re.ErrorCode == "invalid_client" || re.ErrorCode == "unauthorized_client" || (re.ErrorCode == "" && status == 401): // Unauthorized
		client := "the client"
		if clientID != "" {
			client = fmt.Sprintf("client %q", TruncateUTF8(clientID, 128))
		}
		e = discoveryError(mcpv1alpha1.ReasonInvalidClient, "%s rejected %s: %s", endpoint, client, detail)
	case re.ErrorCode == "invalid_scope":
		e = discoveryError(mcpv1alpha1.ReasonInsufficientScope, "%s refused %s: %s", endpoint, ScopeText(scopes), detail)
	case re.ErrorCode == "invalid_grant":
		e = discoveryError(mcpv1alpha1.ReasonInvalidGrant, "%s refused the grant: %s", endpoint, detail)
	default:
		e = discoveryError(mcpv1alpha1.ReasonTokenRequestFailed, "%s %s", endpoint, detail)
		e.Transient = status == 429 || status >= 500 // Too Many Requests, or a server error
	}
	e.Refused = !e.Transient
	return e
}

// ScopeText says which scopes a token was requested with.
func ScopeText(scopes []string) string {
	if len(scopes) == 0 {
		return "no scope"
	}
	return fmt.Sprintf("scope %q", TruncateUTF8(strings.Join(scopes, " "), 256))
}

var (
	jwtLike = regexp.MustCompile(`[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`)
	// tokenLike is an unbroken run of token characters long enough to be an opaque
	// token, or a piece of one: a token service that quotes the token it refused, even
	// cut or re-encoded, has it redacted. Words and URLs of an error description are
	// shorter or broken by other characters.
	tokenLike = regexp.MustCompile(`[A-Za-z0-9_~+/=-]{32,}`)
)

// SafeText keeps server text printable, at most n bytes and free of values that look
// like tokens, JWTs or opaque.
func SafeText(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	s = jwtLike.ReplaceAllString(s, "[redacted]")
	return TruncateUTF8(tokenLike.ReplaceAllString(s, "[redacted]"), n)
}
