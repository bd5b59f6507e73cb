package connector

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/switchboard-mcp/switchboard/connector/oauth"
	"github.com/switchboard-mcp/switchboard/egress"
	"github.com/switchboard-mcp/switchboard/internal/httpclient"
)

// OAuth bounds and timings.
const (
	// maxOAuthDocumentBytes bounds one metadata document or token response. Real ones
	// are a few KiB; a larger one is refused by the bound, never read whole.
	maxOAuthDocumentBytes = 256 << 10
	// tokenRefreshMargin is how long before its expiry a token is replaced; a token that
	// lives shorter than twice this is replaced at half its life.
	tokenRefreshMargin = 30 * time.Second
	// maxIssuedSecrets bounds the tokens and assertions remembered for redaction.
	maxIssuedSecrets = 8
	// refusedAssertionHold is how long an assertion the token endpoint refused is not
	// presented again: a grant that failed is surfaced, not retried (SEP-1933), and a
	// new assertion (a renewed or rotated JWT) is tried at once. After it, the same
	// assertion is tried once more, so a fix at the authorization server heals by
	// itself.
	refusedAssertionHold = 10 * time.Minute
)

// tokenSource obtains and holds the OAuth access tokens of one server's session, with
// the client credentials grant or, for workload identity, the JWT-bearer grant; the
// session's gateway Upstreams share it. Its fetches (protected resource metadata,
// authorization server metadata, the token endpoint, their redirects) go through the
// session's httpStack: the same dialer, egress decider and redirect checks as the MCP
// endpoint, with bounded responses, and without the configured headers. The client
// credential is sent to the token endpoint only, and only over https or plain http to
// a loopback address with AllowInsecureHTTP. Tokens live in memory only.
type tokenSource struct {
	// cfg holds the discovery settings and, for the client credentials grant, the
	// credential; for workload identity it holds no credential.
	cfg OAuth2ClientCredentials
	// assertion, when set, makes the grant JWT-bearer with the JWTs it supplies.
	assertion AssertionSource
	endpoint  *url.URL
	resource  string // the server's canonical URL, the RFC 8707 resource
	stack     *httpStack
	client    *http.Client
	ctx       context.Context
	timeout   time.Duration
	// key signs the client assertions of private_key_jwt.
	key *oauth.SigningKey
	// grant is the grant discovery requires the authorization server to support, when
	// its metadata lists grants: empty means client_credentials, anyGrant none (the
	// per-caller flows of percaller.go set it).
	grant string

	// mu serializes discovery and renewals, so concurrent 401s fetch one token.
	mu    sync.Mutex
	meta  *authMeta
	reuse oauth2.TokenSource

	// issued are the tokens and assertions minted lately.
	issued recentSecrets

	// refused is the assertion the token endpoint refused last, and why.
	refusedMu sync.Mutex
	refused   *refusal
}

// refusal is an assertion the token endpoint refused: its digest (the assertion itself
// is not kept), the error that said so and until when it is not presented again.
type refusal struct {
	digest [sha256.Size]byte
	err    *Error
	until  time.Time
}

// authMeta is what discovery (or the config) says about where and how to get a token.
type authMeta struct {
	tokenURL *url.URL
	issuer   string // empty when the token URL was configured
	method   string
	scopes   []string
	// authorizationURL, issParameter and codeChallengeMethods are what the metadata
	// says about the authorization code flow (peruser.go); the other flows ignore them.
	authorizationURL     string
	issParameter         bool
	codeChallengeMethods []string
	// registrationURL is the dynamic client registration endpoint (RFC 7591), if any.
	registrationURL string
}

// newTokenSource checks the credentials and returns the session's token source. Its
// errors never carry key material.
func newTokenSource(ctx context.Context, cfg Config, endpoint *url.URL, stack *httpStack) (*tokenSource, *Error) {
	a := &tokenSource{
		endpoint: endpoint,
		resource: oauth.CanonicalResource(endpoint),
		stack:    stack,
		ctx:      ctx,
		timeout:  cfg.Timeout,
	}
	if w := cfg.WorkloadIdentity; w != nil {
		if w.Assertion == nil {
			return nil, authError(ReasonInvalidSpec, ReasonWorkloadTokenUnavailable, "workload identity needs a source of workload JWTs")
		}
		a.assertion = w.Assertion
		a.cfg = OAuth2ClientCredentials{
			ClientID: w.ClientID, AuthMethod: AuthMethodNone, Scopes: w.Scopes,
			TokenURL: w.TokenURL, Issuer: w.Issuer, AllowInsecureHTTP: w.AllowInsecureHTTP,
		}
	} else {
		a.cfg = *cfg.OAuth2
		if e := a.checkClientCredentials(); e != nil {
			return nil, e
		}
	}
	o := a.cfg
	if o.TokenURL != "" {
		u, err := url.Parse(o.TokenURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, newError(ReasonInvalidSpec, "token URL is not an absolute http or https URL")
		}
	}
	if o.Issuer != "" {
		u, err := url.Parse(o.Issuer)
		switch {
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
			return nil, newError(ReasonInvalidSpec, "issuer is not an absolute http or https URL without user information, query or fragment")
		case u.Scheme == "http" && !o.AllowInsecureHTTP:
			return nil, newError(ReasonInvalidSpec, "issuer %s is not https; set allowInsecureHTTP to allow plain http", displayURL(u))
		}
	}
	a.client = &http.Client{
		Transport:     &authTransport{stack: stack},
		CheckRedirect: a.checkRedirect,
		Timeout:       cfg.Timeout,
	}
	return a, nil
}

// checkClientCredentials checks the client credentials grant's credential and parses
// its private key, if any.
func (a *tokenSource) checkClientCredentials() *Error {
	o := a.cfg
	key, oe := oauth.CheckClientCredential(o.ClientID, o.ClientSecret, o.PrivateKey, o.AuthMethod)
	if oe != nil {
		return fromOAuth(oe)
	}
	a.key = key
	return nil
}

// current returns the token to send, refreshing it shortly before it expires, or ""
// before the first token was obtained (the server's 401 starts discovery).
func (a *tokenSource) current() (string, *Error) {
	a.mu.Lock()
	reuse := a.reuse
	a.mu.Unlock()
	if reuse == nil {
		return "", nil
	}
	tok, err := reuse.Token()
	if err != nil {
		return "", a.asError(err)
	}
	return tok.AccessToken, nil
}

// renew returns a token other than rejected (the token a request was refused with, or
// "" when it carried none): one another request obtained meanwhile, or a new one. The
// first call discovers where to get it, using the server's challenge.
func (a *tokenSource) renew(rejected string, ch oauth.Challenge) (string, *Error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reuse != nil {
		if tok, err := a.reuse.Token(); err == nil && tok.AccessToken != rejected {
			return tok.AccessToken, nil
		}
	}
	if a.meta == nil {
		meta, e := a.discover(ch)
		if e != nil {
			return "", e
		}
		a.meta = meta
	}
	a.reuse = oauth2.ReuseTokenSourceWithExpiry(nil, &tokenFetcher{a: a, meta: a.meta}, tokenRefreshMargin)
	tok, err := a.reuse.Token()
	if err != nil {
		a.reuse = nil
		return "", a.asError(err)
	}
	return tok.AccessToken, nil
}

// tokenEndpoint returns the origin of the token endpoint, once known.
func (a *tokenSource) tokenEndpoint() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.meta == nil || a.reuse == nil {
		return ""
	}
	return oauth.Origin(a.meta.tokenURL)
}

// scopes returns the scopes tokens are requested with, as one string.
func (a *tokenSource) scopeText() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.meta == nil || len(a.meta.scopes) == 0 {
		return "no scope"
	}
	return fmt.Sprintf("scope %q", strings.Join(a.meta.scopes, " "))
}

// remember keeps a minted secret for redaction: the last maxIssuedSecrets of them, in a
// new list for every one, so that a redactor reading the list never waits.
func (a *tokenSource) remember(secret string) { a.issued.add(secret, maxIssuedSecrets) }

// issuedSecrets returns the tokens and assertions minted lately, for the redactor.
func (a *tokenSource) issuedSecrets() *secretList { return a.issued.get() }

// authError returns an error of reason that sets the Authenticated reason auth.
func authError(reason, auth, format string, args ...any) *Error {
	e := newError(reason, format, args...)
	e.Authentication = auth
	return e
}

// asError turns what a token fetch returned into an *Error with Authentication set.
func (a *tokenSource) asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		if e.Authentication == "" {
			out := *e
			out.Authentication = ReasonTokenRequestFailed
			return &out
		}
		return e
	}
	e = classify(err, nil)
	out := *e
	out.Authentication = ReasonTokenRequestFailed
	return &out
}

// insufficientScope is the failure of a request the server answered insufficient_scope.
func (a *tokenSource) insufficientScope(ch oauth.Challenge) *Error {
	asked := "a scope it did not name"
	if ch.Scope != "" {
		asked = fmt.Sprintf("scope %q", TruncateUTF8(ch.Scope, 256))
	}
	return authError(ReasonInsufficientScope, ReasonInsufficientScope,
		"server %s answered insufficient_scope: it asks for %s; the token was requested with %s",
		displayURL(a.endpoint), asked, a.scopeText())
}

// discover finds the token endpoint: the configured one, or the MCP authorization
// discovery (oauth.Discover) through the source's client, validating resource and
// issuer.
func (a *tokenSource) discover(ch oauth.Challenge) (*authMeta, *Error) {
	meta := &authMeta{method: a.cfg.AuthMethod, scopes: a.cfg.Scopes}
	if len(meta.scopes) == 0 && ch.Scope != "" {
		meta.scopes = oauth.BoundedScopes(strings.Fields(ch.Scope)) // from the server's header: bounded like metadata's
	}
	if a.cfg.TokenURL != "" {
		u, _ := url.Parse(a.cfg.TokenURL)
		if e := a.checkTokenURL(u); e != nil {
			return nil, e
		}
		// Nothing is discovered; a pinned issuer is the assertion's second audience.
		meta.tokenURL, meta.issuer = u, a.cfg.Issuer
		if meta.method == "" {
			meta.method = a.defaultMethod(nil)
		}
		return meta, nil
	}
	grant := a.grantType()
	if grant == anyGrant {
		grant = ""
	}
	found, err := oauth.Discover(oauth.Discovery{
		Endpoint:          a.endpoint,
		Resource:          a.resource,
		Scopes:            meta.scopes,
		Issuer:            a.cfg.Issuer,
		Grant:             grant,
		AllowInsecureHTTP: a.cfg.AllowInsecureHTTP,
		Fetch:             a.fetchMetadata,
	}, ch)
	if err != nil {
		return nil, discoveryFailure(err)
	}
	if e := a.checkTokenURL(found.TokenURL); e != nil {
		return nil, e
	}
	meta.scopes = found.Scopes
	meta.tokenURL, meta.issuer = found.TokenURL, found.Issuer
	meta.authorizationURL, meta.issParameter = found.AuthorizationURL, found.IssParameter
	meta.codeChallengeMethods = found.CodeChallengeMethods
	meta.registrationURL = found.RegistrationURL
	if meta.method == "" {
		meta.method = a.defaultMethod(found.AuthMethods)
	}
	return meta, nil
}

// discoveryFailure is the *Error of a failed discovery: discovery's own verdict, or
// the failed fetch's.
func discoveryFailure(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var de *oauth.Error
	if errors.As(err, &de) {
		return fromOAuth(de)
	}
	return authError(ReasonTokenRequestFailed, ReasonTokenRequestFailed, "discovery failed")
}

// fromOAuth is the *Error of a verdict of connector/oauth: its reason, its
// Authenticated reason (Reason unless it says otherwise), whether it heals by itself
// and whether the token endpoint refused the grant.
func fromOAuth(de *oauth.Error) *Error {
	auth := de.Authentication
	if auth == "" {
		auth = de.Reason
	}
	e := authError(de.Reason, auth, "%s", de.Message)
	e.Transient = de.Transient
	e.refused = de.Refused
	return e
}

// grantType is the grant_type of the token requests: client_credentials, or the
// JWT-bearer grant for workload identity.
func (a *tokenSource) grantType() string {
	if a.grant != "" {
		return a.grant
	}
	if a.assertion != nil {
		return oauth.GrantTypeJWTBearer
	}
	return "client_credentials"
}

// defaultMethod picks the client authentication method for the credential given:
// none for workload identity (the assertion authenticates); private_key_jwt for a key;
// for a secret client_secret_basic unless the server supports only client_secret_post.
func (a *tokenSource) defaultMethod(supported []string) string {
	if a.assertion != nil {
		return AuthMethodNone
	}
	return oauth.DefaultAuthMethod(a.key != nil, supported)
}

// checkTokenURL refuses a token endpoint the credential must not be sent to: anything
// but https, except plain http to a loopback address with AllowInsecureHTTP.
func (a *tokenSource) checkTokenURL(u *url.URL) *Error {
	if oe := oauth.CheckTokenURL(u, a.cfg.AllowInsecureHTTP, a.credentialName()); oe != nil {
		return fromOAuth(oe)
	}
	return nil
}

// credentialName names what the token request carries, for messages.
func (a *tokenSource) credentialName() string {
	if a.assertion != nil {
		return "workload JWT"
	}
	return "client credential"
}

// fetchMetadata is discovery's fetch (oauth.Fetch): getJSON, its failure classified
// and said to be of fetching what from u.
func (a *tokenSource) fetchMetadata(what string, u *url.URL, v any) (int, error) {
	status, e := a.getJSON(u, v)
	if e != nil {
		e = a.asError(e)
		out := *e
		out.Message = fmt.Sprintf("fetching %s from %s: %s", what, displayURL(u), e.Message)
		return 0, &out
	}
	return status, nil
}

// getJSON fetches u and, on 200, decodes the bounded body into v.
func (a *tokenSource) getJSON(u *url.URL, v any) (int, *Error) {
	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	defer cancel()
	capture := &fetchCapture{}
	ctx = context.WithValue(ctx, fetchCaptureKey{}, capture)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, newError(ReasonTokenRequestFailed, "building the request failed")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, capture.errorOr(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		if e := capture.get(); e != nil {
			return 0, e
		}
		return 0, newError(ReasonTokenRequestFailed, "the document is not JSON")
	}
	return resp.StatusCode, nil
}

// checkRedirect judges a redirect of a metadata or token request: the session's
// redirect checks, and never a token request to another origin (a 307 or 308 would
// carry the credential along).
func (a *tokenSource) checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0]
	if first.Method == http.MethodPost && !egress.SameOrigin(first.URL, req.URL) {
		e := authError(ReasonRedirectDenied, ReasonTokenRequestFailed,
			"token endpoint %s redirected to %s: the %s is sent only to the token endpoint",
			oauth.Origin(first.URL), oauth.Origin(req.URL), a.credentialName())
		captureFrom(req.Context()).set(e)
		return e
	}
	if err := a.stack.checkRedirect(req, via); err != nil {
		var e *Error
		if errors.As(err, &e) {
			captureFrom(req.Context()).set(e)
		}
		return err
	}
	return nil
}

// tokenFetcher requests one token with the source's grant; the
// oauth2.ReuseTokenSourceWithExpiry around it calls it when the token is due.
type tokenFetcher struct {
	a    *tokenSource
	meta *authMeta
}

// Token implements oauth2.TokenSource.
func (f *tokenFetcher) Token() (*oauth2.Token, error) {
	var tok *oauth2.Token
	var e *Error
	if f.a.assertion != nil {
		tok, e = f.a.workloadToken(f.meta)
	} else {
		tok, e = f.a.clientCredentialsToken(f.meta)
	}
	if e != nil {
		return nil, e
	}
	return tok, nil
}

// clientCredentialsToken requests one token with the client credentials grant.
func (a *tokenSource) clientCredentialsToken(meta *authMeta) (*oauth2.Token, *Error) {
	// Judged again at every request: a token endpoint on a host that now resolves
	// elsewhere than loopback gets no credential over plain http.
	if e := a.checkTokenURL(meta.tokenURL); e != nil {
		return nil, e
	}
	cc, assertion, oe := oauth.ClientCredentials{
		ClientID:     a.cfg.ClientID,
		ClientSecret: a.cfg.ClientSecret,
		Key:          a.key,
		Method:       meta.method,
		TokenURL:     meta.tokenURL,
		Issuer:       meta.issuer,
		Scopes:       meta.scopes,
		Resource:     a.resource,
	}.Request(time.Now())
	if oe != nil {
		return nil, fromOAuth(oe)
	}
	if assertion != "" {
		a.remember(assertion)
	}
	return a.requestToken(a.ctx, cc, meta.tokenURL, meta.scopes)
}

// workloadToken requests one token with the JWT-bearer grant and a workload JWT from
// the assertion source, for the audience discovery found. An assertion the token
// endpoint refused is not sent again for refusedAssertionHold: the refusal is
// returned instead, and no other grant is tried.
func (a *tokenSource) workloadToken(meta *authMeta) (*oauth2.Token, *Error) {
	audience := meta.issuer
	if audience == "" {
		audience = meta.tokenURL.String()
	}
	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	assertion, err := a.assertion.Assertion(ctx, audience)
	cancel()
	if err != nil {
		return nil, assertionError(err)
	}
	if assertion == "" {
		return nil, authError(ReasonTokenRequestFailed, ReasonWorkloadTokenUnavailable, "the workload JWT is empty")
	}
	a.remember(assertion)
	digest := sha256.Sum256([]byte(assertion))
	if e := a.refusedBefore(digest); e != nil {
		return nil, e
	}
	tok, e := a.jwtBearer(a.ctx, meta.tokenURL, assertion, oauth.ClientAuth{ID: a.cfg.ClientID, Method: AuthMethodNone}, meta.scopes)
	if e != nil && e.refused {
		a.refusedMu.Lock()
		a.refused = &refusal{digest: digest, err: e, until: time.Now().Add(refusedAssertionHold)}
		a.refusedMu.Unlock()
	}
	return tok, e
}

// refusedBefore returns the refusal of the assertion with digest while it holds.
func (a *tokenSource) refusedBefore(digest [sha256.Size]byte) *Error {
	a.refusedMu.Lock()
	defer a.refusedMu.Unlock()
	if r := a.refused; r != nil && r.digest == digest && time.Now().Before(r.until) {
		return r.err
	}
	return nil
}

// assertionError is the failure of an AssertionSource, with Authentication set.
func assertionError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		out := *e
		if out.Authentication == "" {
			out.Authentication = ReasonWorkloadTokenUnavailable
		}
		return &out
	}
	e = classify(err, nil)
	out := *e
	out.Authentication = ReasonWorkloadTokenUnavailable
	out.Message = "obtaining the workload JWT: " + e.Message
	return &out
}

// jwtBearer performs one JWT-bearer token request (RFC 7523 section 2.1):
// grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer, the assertion, the client's
// authentication, the scopes and the server's canonical URL as resource (RFC 8707),
// through the source's client (egress, redirect checks, bounded responses). The
// assertion and the token issued are remembered for redaction; its errors are
// classified as for every token request (invalid_grant is ReasonInvalidGrant) and
// never carry the assertion. Workload identity sends a workload JWT with it; the
// per-caller enterprise-managed mode an ID-JAG.
func (a *tokenSource) jwtBearer(ctx context.Context, tokenURL *url.URL, assertion string, auth oauth.ClientAuth, scopes []string) (*oauth2.Token, *Error) {
	// Judged again at every request, as for client credentials.
	if e := a.checkTokenURL(tokenURL); e != nil {
		return nil, e
	}
	a.remember(assertion)
	cc, oe := oauth.JWTBearer{
		TokenURL: tokenURL, Assertion: assertion, Client: auth,
		Scopes: scopes, Resource: a.resource,
	}.Request()
	if oe != nil {
		return nil, fromOAuth(oe)
	}
	return a.requestToken(ctx, cc, tokenURL, scopes)
}

// requestToken sends one token request through the source's client, bounded by the
// source's timeout, and checks that a bearer token came back. The token is
// remembered for redaction; a token that lives shorter than twice tokenRefreshMargin
// is due at half its life.
func (a *tokenSource) requestToken(ctx context.Context, cc *clientcredentials.Config, tokenURL *url.URL, scopes []string) (tok *oauth2.Token, e *Error) {
	grant := "client_credentials"
	if cc.EndpointParams.Get("grant_type") == oauth.GrantTypeJWTBearer {
		grant = "jwt_bearer"
	}
	ctx, span := a.stack.startTokenSpan(ctx, grant, tokenURL)
	defer func() { endTokenSpan(span, e) }()
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	capture := &fetchCapture{}
	ctx = context.WithValue(ctx, fetchCaptureKey{}, capture)
	ctx = context.WithValue(ctx, oauth2.HTTPClient, a.client)
	issued := time.Now()
	tok, err := cc.Token(ctx)
	if err != nil {
		return nil, a.tokenError(tokenURL, cc.ClientID, scopes, err, capture)
	}
	a.remember(tok.AccessToken)
	if oe := oauth.CheckToken(tok, tokenURL, issued, tokenRefreshMargin); oe != nil {
		return nil, fromOAuth(oe)
	}
	return tok, nil
}

// tokenError classifies a failed token request of clientID with scopes to the token
// endpoint at tokenURL.
func (a *tokenSource) tokenError(tokenURL *url.URL, clientID string, scopes []string, err error, capture *fetchCapture) *Error {
	return tokenRequestError("token endpoint "+oauth.Origin(tokenURL), clientID, scopes, err, capture)
}

// tokenRequestError classifies a failed token request, of the operator's own flows and
// of the per-caller ones alike; endpoint names where it went ("token endpoint
// https://as.example.com", "token exchange at https://sts.example.com"). An OAuth
// error answer is read by oauth.TokenResponseError (refused unless transient); a
// failure of the fetch itself is the one the stack captured, or err classified.
func tokenRequestError(endpoint, clientID string, scopes []string, err error, capture *fetchCapture) *Error {
	if oe := oauth.TokenResponseError(endpoint, clientID, scopes, err); oe != nil {
		return fromOAuth(oe)
	}
	if e := capture.get(); e != nil {
		out := *e
		out.Authentication = ReasonTokenRequestFailed
		out.Message = fmt.Sprintf("%s: %s", endpoint, e.Message)
		return &out
	}
	e := classify(err, nil)
	if e.Reason == ReasonProtocolError {
		// oauth2's own words may quote the response body.
		return authError(ReasonTokenRequestFailed, ReasonTokenRequestFailed, "%s sent no usable token response", endpoint)
	}
	out := *e
	out.Authentication = ReasonTokenRequestFailed
	out.Message = fmt.Sprintf("%s: %s", endpoint, e.Message)
	return &out
}

// authTransport sends metadata and token requests: the session's dialer and
// transports, none of the configured headers, bounded responses.
type authTransport struct {
	stack *httpStack
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	capture := captureFrom(req.Context())
	resp, err := t.stack.send(req)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			capture.set(e)
		}
		return nil, err
	}
	if resp.ContentLength > maxOAuthDocumentBytes {
		_ = resp.Body.Close()
		e := newError(ReasonLimitExceeded, "response is larger than %d bytes", maxOAuthDocumentBytes)
		capture.set(e)
		return nil, e
	}
	resp.Body = httpclient.NewBody(resp.Body, maxOAuthDocumentBytes, func() error {
		e := newError(ReasonLimitExceeded, "response is larger than %d bytes", maxOAuthDocumentBytes)
		capture.set(e)
		return e
	})
	return resp, nil
}

// fetchCapture keeps the classified failure of one fetch, which oauth2 and
// encoding/json flatten into text.
type fetchCapture struct {
	mu sync.Mutex
	e  *Error
}

type fetchCaptureKey struct{}

func captureFrom(ctx context.Context) *fetchCapture {
	c, _ := ctx.Value(fetchCaptureKey{}).(*fetchCapture)
	return c
}

func (c *fetchCapture) set(e *Error) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.e == nil {
		c.e = e
	}
}

func (c *fetchCapture) get() *Error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.e
}

// errorOr returns the captured failure, or err classified.
func (c *fetchCapture) errorOr(err error) *Error {
	if e := c.get(); e != nil {
		return e
	}
	return classify(err, nil)
}
