package connector

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"

	"github.com/switchboard-mcp/switchboard/connector/oauth"
)

// Per-person upstream credentials (perUser).
//
// A perUser server is called by each person with a token of their own account at the
// server's authorization server, obtained with the authorization code flow (OAuth 2.1,
// PKCE with S256, RFC 8707 resource) that the person runs once in their browser. The
// gateway's broker (gateway/userauth) runs the browser's side: it keeps the state and
// the PKCE verifier, proves the person, and hands the connector what the browser
// brought back. Everything that goes to the authorization server (the authorization
// URL's parameters, the code exchange, the refreshes) is the connector's, through the
// server's own HTTP stack: the egress decider, bounded responses, no redirect of a
// token request. The tokens are stored in a GrantStore and sent to the server for
// that person only.
//
// Where a person's token may come from and go to is a cluster admin's decision (the
// MCPIdentityProvider's spec.perUser): the authorization server must be one of
// PerUser.AuthorizationServers and the server's URL one of PerUser.Resources, or no
// person is sent anywhere. Only callers of PerUser.Provider have persons to authorize;
// a Kubernetes (ServiceAccount) caller is refused with a message naming a workload
// credential instead.

const (
	// maxCachedGrants bounds the grants an authorizer keeps decrypted in memory; an
	// evicted one is read from the store again.
	maxCachedGrants = 4096
	// grantCacheLife is how long a grant read from the store is used before it is read
	// again, so a revocation on another replica takes effect within it.
	grantCacheLife = 15 * time.Second
	// metadataLife is how long discovered metadata is used before it is fetched again.
	metadataLife = 10 * time.Minute
	// grantReadTimeout bounds reading (and refreshing) a person's grant to learn
	// whether they hold one.
	grantReadTimeout = 30 * time.Second
)

// PerUser configures each person's own authorization at the server's authorization
// server.
type PerUser struct {
	// Provider names the identity provider whose callers are the persons: only they
	// may authorize, and only their grants are used. Required.
	Provider string
	// Issuer pins the server's authorization server; empty discovers it from the
	// server's protected resource metadata.
	Issuer string
	// ClientID is Switchboard's client at the authorization server.
	ClientID string
	// ClientSecret authenticates it (client_secret_basic); empty makes it a public
	// client.
	ClientSecret string
	// Scopes are requested; empty means the protected resource metadata's
	// scopes_supported.
	Scopes []string
	// AuthorizationServers are the issuer identifiers a cluster admin allows; the
	// server's authorization server must be one of them. At least one is required.
	AuthorizationServers []string
	// Resources are the server URLs a cluster admin allows persons' tokens to be sent
	// to: the server's canonical URL must equal one or lie beneath one at a path
	// boundary. At least one is required.
	Resources []string
	// AllowedScopes, when set, are the only scopes that may be requested: configured
	// scopes outside them are refused, discovered ones dropped.
	AllowedScopes []string
	// AllowInsecureHTTP permits plain http metadata, authorization and token endpoints
	// on a loopback address.
	AllowInsecureHTTP bool
	// DynamicClientRegistration says a cluster admin lets a server without a ClientID
	// register Switchboard as a client at its authorization server (RFC 7591).
	DynamicClientRegistration bool
}

// OAuthClient is Switchboard's client at an authorization server: the configured one,
// or one it registered (RFC 7591). Secret is a secret, empty for a public client.
type OAuthClient struct {
	ID, Secret string
}

// equal reports whether a and b configure the same per-person authorization.
func (a *PerUser) equal(b *PerUser) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Provider == b.Provider && a.Issuer == b.Issuer && a.ClientID == b.ClientID && a.ClientSecret == b.ClientSecret &&
		slices.Equal(a.Scopes, b.Scopes) && slices.Equal(a.AuthorizationServers, b.AuthorizationServers) &&
		slices.Equal(a.Resources, b.Resources) && slices.Equal(a.AllowedScopes, b.AllowedScopes) &&
		a.AllowInsecureHTTP == b.AllowInsecureHTTP && a.DynamicClientRegistration == b.DynamicClientRegistration
}

// Allowed checks, without any I/O, that the config may send persons of the server at
// serverURL anywhere: the server's URL among the allowed resources, a pinned issuer
// among the allowed authorization servers, and every configured scope allowed. Its
// errors carry the reason the controller puts in status.
func (a *PerUser) Allowed(serverURL string) *Error {
	u, err := url.Parse(serverURL)
	if err != nil || u.Host == "" {
		return newError(ReasonInvalidSpec, "the server's URL does not parse")
	}
	if a.Provider == "" {
		return authError(ReasonInvalidSpec, ReasonInvalidClient, "perUser names no identity provider whose callers may authorize")
	}
	if a.ClientID == "" && !a.DynamicClientRegistration {
		return authError(ReasonClientRegistrationNotAllowed, ReasonClientRegistrationNotAllowed,
			"perUser names no clientID, and identity provider %q does not let servers register a client dynamically (spec.perUser.dynamicClientRegistration)", a.Provider)
	}
	if !resourceAllowed(oauth.CanonicalResource(u), a.Resources) {
		return authError(ReasonResourceNotAllowed, ReasonResourceNotAllowed,
			"identity provider %q does not list the server's URL %s among spec.perUser.resources: no person's token is obtained for it",
			a.Provider, displayURL(u))
	}
	if len(a.AuthorizationServers) == 0 {
		return authError(ReasonAuthorizationServerNotAllowed, ReasonAuthorizationServerNotAllowed,
			"identity provider %q lists no spec.perUser.authorizationServers", a.Provider)
	}
	if a.Issuer != "" && !issuerAllowed(a.Issuer, a.AuthorizationServers) {
		return authError(ReasonAuthorizationServerNotAllowed, ReasonAuthorizationServerNotAllowed,
			"identity provider %q does not list the pinned issuer %s among spec.perUser.authorizationServers", a.Provider, oauth.QuoteURL(a.Issuer))
	}
	if len(a.AllowedScopes) > 0 {
		for _, s := range a.Scopes {
			if !slices.Contains(a.AllowedScopes, s) {
				return authError(ReasonScopeNotAllowed, ReasonScopeNotAllowed,
					"identity provider %q does not list scope %q among spec.perUser.scopes", a.Provider, TruncateUTF8(s, 256))
			}
		}
	}
	return nil
}

// Reasons of per-person authorization.
const (
	// ReasonResourceNotAllowed means the server's URL is not one its identity provider
	// lets persons' tokens be sent to.
	ReasonResourceNotAllowed = mcpv1alpha1.ReasonResourceNotAllowed
	// ReasonAuthorizationRequired means the caller holds no grant for the server (or
	// its grant was refused on refresh and removed): the person authorizes at the URL
	// the gateway elicits, and the call is retried.
	ReasonAuthorizationRequired = mcpv1alpha1.ReasonAuthorizationRequired
	// ReasonClientRegistrationNotAllowed means a perUser server names no client ID and
	// its identity provider does not let it register one.
	ReasonClientRegistrationNotAllowed = mcpv1alpha1.ReasonClientRegistrationNotAllowed
	// ReasonAuthorizationFailed means a person's authorization could not be completed:
	// the callback did not match the flow, or the authorization server refused the
	// code. Nothing was stored.
	ReasonAuthorizationFailed = "AuthorizationFailed"
)

// resourceAllowed reports whether resource (canonical) equals one of allowed or lies
// beneath one at a path boundary.
func resourceAllowed(resource string, allowed []string) bool {
	for _, raw := range allowed {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			continue
		}
		a := oauth.CanonicalResource(u)
		if resource == a || strings.HasPrefix(resource, a+"/") {
			return true
		}
	}
	return false
}

// issuerAllowed reports whether issuer is one of allowed, a trailing slash aside.
func issuerAllowed(issuer string, allowed []string) bool {
	return slices.ContainsFunc(allowed, func(a string) bool { return oauth.SameIssuer(a, issuer) })
}

// UserAuthorizer runs the connector's side of per-person authorization for one server:
// the authorization URL, the code exchange, the persons' tokens and their refreshes.
// It is safe for concurrent use.
type UserAuthorizer struct {
	key      Key
	cfg      PerUser
	endpoint *url.URL
	resource string
	store    GrantStore
	stack    *httpStack
	// ownStack says Close releases stack (NewUserAuthorizer's); a pool session's
	// authorizer uses the session's, which the session releases.
	ownStack bool
	// ts lends its discovery and bounded client; it holds no credential.
	ts *tokenSource
	// exchange is ts's client that follows no redirect at all: a code or a refresh
	// token goes to the token endpoint and nowhere else.
	exchange *http.Client
	ctx      context.Context
	cancel   context.CancelFunc

	metaMu sync.Mutex
	meta   *authMeta
	metaAt time.Time

	cacheMu sync.Mutex
	cache   map[string]*userEntry

	// registered are the clients this authorizer registered, by authorization server
	// and redirect URI (see client).
	registerMu sync.Mutex
	registered map[string]OAuthClient
}

// userEntry is one person's grant as last read or written, with the lock that
// serializes its refreshes on this replica.
type userEntry struct {
	mu     sync.Mutex
	grant  *Grant
	readAt time.Time
}

// NewUserAuthorizer checks cfg.PerUser and returns the authorizer of the server key
// names, whose requests go through an HTTP stack built from cfg (egress decider, CA
// bundle, limits). Its errors never carry a secret. Close releases it.
func NewUserAuthorizer(ctx context.Context, key Key, cfg Config, store GrantStore) (*UserAuthorizer, *Error) {
	if cfg.PerUser == nil {
		return nil, newError(ReasonInvalidSpec, "the server takes no per-person authorization")
	}
	if store == nil {
		return nil, newError(ReasonInvalidSpec, "per-person authorization needs a grant store")
	}
	pu, e := checkedPerUser(cfg)
	if e != nil {
		return nil, e
	}
	endpoint, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, newError(ReasonInvalidSpec, "the server's URL does not parse")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	stack, err := newHTTPStack(cfg, endpoint)
	if err != nil {
		return nil, newError(ReasonInvalidSpec, "building the HTTP client: %s", oauth.SafeText(err.Error(), 200))
	}
	u := newUserAuthorizer(ctx, key, cfg, pu, endpoint, stack, store)
	u.ownStack = true
	return u, nil
}

// checkedPerUser returns a copy of cfg.PerUser that its admin's allow-list allows.
func checkedPerUser(cfg Config) (PerUser, *Error) {
	pu := *cfg.PerUser
	pu.Scopes, pu.AuthorizationServers = slices.Clone(pu.Scopes), slices.Clone(pu.AuthorizationServers)
	pu.Resources, pu.AllowedScopes = slices.Clone(pu.Resources), slices.Clone(pu.AllowedScopes)
	if e := pu.Allowed(cfg.URL); e != nil {
		return PerUser{}, e
	}
	return pu, nil
}

// newUserAuthorizer is the authorizer of a checked config pu, whose requests go through
// stack: a pool session's own, so that a new egress decision reaches them at once.
func newUserAuthorizer(ctx context.Context, key Key, cfg Config, pu PerUser, endpoint *url.URL, stack *httpStack, store GrantStore) *UserAuthorizer {
	ctx, cancel := context.WithCancel(ctx)
	u := &UserAuthorizer{
		key: key, cfg: pu, endpoint: endpoint, resource: oauth.CanonicalResource(endpoint), store: store,
		stack: stack, ctx: ctx, cancel: cancel, cache: make(map[string]*userEntry),
	}
	u.ts = &tokenSource{
		cfg:      OAuth2ClientCredentials{ClientID: pu.ClientID, Scopes: pu.Scopes, Issuer: pu.Issuer, AllowInsecureHTTP: pu.AllowInsecureHTTP},
		endpoint: endpoint, resource: u.resource, stack: stack, ctx: ctx, timeout: cfg.Timeout, grant: anyGrant,
	}
	u.ts.client = &http.Client{Transport: &authTransport{stack: stack}, CheckRedirect: u.ts.checkRedirect, Timeout: cfg.Timeout}
	u.exchange = &http.Client{Transport: &authTransport{stack: stack}, Timeout: cfg.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			e := authError(ReasonRedirectDenied, ReasonTokenRequestFailed,
				"token endpoint %s redirected to %s: a code or refresh token is sent to the token endpoint only",
				oauth.Origin(via[0].URL), oauth.Origin(req.URL))
			captureFrom(req.Context()).set(e)
			return e
		}}
	return u
}

// Close ends the authorizer's requests and releases its HTTP stack, when it is its own.
func (u *UserAuthorizer) Close() {
	u.cancel()
	if u.ownStack {
		u.stack.close()
	}
}

// Server names the server the authorizer is for.
func (u *UserAuthorizer) Server() Key { return u.key }

// CheckCaller refuses a caller that has no person to authorize: a Kubernetes
// (ServiceAccount) caller, with a message naming what an admin can do instead, or a
// caller another identity provider vouched for.
func (u *UserAuthorizer) CheckCaller(c Caller) *Error {
	switch {
	case c.Key == "":
		return authError(ReasonUnauthorized, ReasonCallerNotAllowed, "the caller has no identity to authorize server %s for", u.key)
	case c.Provider == "":
		return authError(ReasonCallerNotAllowed, ReasonCallerNotAllowed,
			"server %s acts for each person with their own account at its authorization server, and a Kubernetes caller (a ServiceAccount) has no person to authorize it: "+
				"an admin can give the workload a credential of its own instead, an MCPServer for the same URL with spec.http.auth.oauth2.workloadIdentity or clientCredentials",
			u.key)
	case c.Provider != u.cfg.Provider:
		return authError(ReasonCallerNotAllowed, ReasonCallerNotAllowed,
			"server %s is authorized by persons of identity provider %q only, and the caller was vouched for by %q",
			u.key, u.cfg.Provider, TruncateUTF8(c.Provider, 253))
	}
	return nil
}

// metadata returns the server's authorization server's metadata, discovered at most
// every metadataLife, and refuses an authorization server the admin does not allow or
// one unfit for the flow.
func (u *UserAuthorizer) metadata(fresh bool) (*authMeta, *Error) {
	u.metaMu.Lock()
	defer u.metaMu.Unlock()
	if u.meta != nil && !fresh && time.Since(u.metaAt) < metadataLife {
		return u.meta, nil
	}
	m, e := u.ts.discover(oauth.Challenge{})
	if e != nil {
		return nil, e
	}
	if !issuerAllowed(m.issuer, u.cfg.AuthorizationServers) {
		return nil, authError(ReasonAuthorizationServerNotAllowed, ReasonAuthorizationServerNotAllowed,
			"the authorization server %s of server %s is not among identity provider %q's spec.perUser.authorizationServers: nobody is sent there",
			oauth.QuoteURL(m.issuer), displayURL(u.endpoint), u.cfg.Provider)
	}
	au, err := url.Parse(m.authorizationURL)
	if err != nil || m.authorizationURL == "" || au.Host == "" || au.User != nil || au.Fragment != "" {
		return nil, authError(ReasonTokenRequestFailed, ReasonTokenRequestFailed,
			"authorization server %s names no usable authorization endpoint", oauth.QuoteURL(m.issuer))
	}
	if au.Scheme != "https" && (au.Scheme != "http" || !u.cfg.AllowInsecureHTTP || !oauth.NamesLoopback(au.Hostname())) {
		return nil, authError(ReasonTokenRequestFailed, ReasonTokenRequestFailed,
			"authorization endpoint %s is not https (plain http only to a loopback address with allowInsecureHTTP)", oauth.Origin(au))
	}
	if !slices.Contains(m.codeChallengeMethods, "S256") {
		return nil, authError(ReasonTokenRequestFailed, ReasonTokenRequestFailed,
			"authorization server %s does not advertise PKCE with S256 (code_challenge_methods_supported): no person is sent there", oauth.QuoteURL(m.issuer))
	}
	m.scopes = u.scopes(m.scopes)
	u.meta, u.metaAt = m, time.Now()
	return m, nil
}

// scopes keeps the discovered scopes the admin allows (configured ones were checked).
func (u *UserAuthorizer) scopes(in []string) []string {
	if len(u.cfg.AllowedScopes) == 0 || len(u.cfg.Scopes) > 0 {
		return in
	}
	var out []string
	for _, s := range in {
		if slices.Contains(u.cfg.AllowedScopes, s) {
			out = append(out, s)
		}
	}
	return out
}

// oauthConfig is the x/oauth2 client c of the flow with meta's endpoints.
func (u *UserAuthorizer) oauthConfig(meta *authMeta, redirectURL string, c OAuthClient) *oauth2.Config {
	style := oauth2.AuthStyleInParams
	if c.Secret != "" {
		style = oauth2.AuthStyleInHeader
	}
	return &oauth2.Config{
		ClientID:     c.ID,
		ClientSecret: c.Secret,
		Endpoint:     oauth2.Endpoint{AuthURL: meta.authorizationURL, TokenURL: meta.tokenURL.String(), AuthStyle: style},
		RedirectURL:  redirectURL,
		Scopes:       meta.scopes,
	}
}

// maxRegistrations bounds the clients one authorizer registers and keeps: one per
// authorization server and redirect URI, which are few.
const maxRegistrations = 16

// client returns the client the flow at meta's authorization server uses: the
// configured one or, where the admin allows it and the server offers it, one registered
// for redirectURL (a public client using PKCE, unless the authorization server issues a
// secret), registered once per authorization server and redirect URI on this replica.
// The flow and the grant keep the client they used, so that any replica can finish and
// refresh them.
func (u *UserAuthorizer) client(meta *authMeta, redirectURL string) (OAuthClient, *Error) {
	if u.cfg.ClientID != "" {
		return OAuthClient{ID: u.cfg.ClientID, Secret: u.cfg.ClientSecret}, nil
	}
	u.registerMu.Lock()
	defer u.registerMu.Unlock()
	key := meta.issuer + "\x00" + redirectURL
	if c, ok := u.registered[key]; ok {
		return c, nil
	}
	if meta.registrationURL == "" {
		return OAuthClient{}, authError(ReasonTokenRequestFailed, ReasonTokenRequestFailed,
			"authorization server %s offers no dynamic client registration (registration_endpoint), and server %s names no perUser.clientID", oauth.QuoteURL(meta.issuer), u.key)
	}
	ru, err := url.Parse(meta.registrationURL)
	if err != nil || ru.Host == "" || ru.User != nil || ru.Fragment != "" ||
		(ru.Scheme != "https" && (ru.Scheme != "http" || !u.cfg.AllowInsecureHTTP || !oauth.NamesLoopback(ru.Hostname()))) {
		return OAuthClient{}, authError(ReasonTokenRequestFailed, ReasonTokenRequestFailed,
			"the registration endpoint of authorization server %s is not an https URL (plain http only to a loopback address with allowInsecureHTTP)", oauth.QuoteURL(meta.issuer))
	}
	ctx, cancel := context.WithTimeout(u.ctx, u.ts.timeout)
	defer cancel()
	capture := &fetchCapture{}
	ctx = context.WithValue(ctx, fetchCaptureKey{}, capture)
	reg, err := oauthex.RegisterClient(ctx, meta.registrationURL, &oauthex.ClientRegistrationMetadata{
		RedirectURIs:            []string{redirectURL},
		TokenEndpointAuthMethod: "none",
		GrantTypes:              []string{"authorization_code", "refresh_token"},
		ResponseTypes:           []string{"code"},
		ClientName:              "Switchboard",
		Scope:                   strings.Join(meta.scopes, " "),
		// The browser comes back to the gateway, a web server.
		ApplicationType: "web",
	}, u.exchange)
	if err != nil {
		if e := capture.get(); e != nil {
			return OAuthClient{}, e // a denied redirect or dial: its own reason
		}
		detail := "it did not answer with a client"
		if regErr, ok := errors.AsType[*oauthex.ClientRegistrationError](err); ok {
			detail = fmt.Sprintf("it answered %s", oauth.SafeText(regErr.ErrorCode, 64))
		}
		// Never err's text: a malformed answer is quoted in it whole, secret and all.
		return OAuthClient{}, authError(ReasonTokenRequestFailed, ReasonTokenRequestFailed,
			"registering Switchboard as a client at %s failed: %s", oauth.Origin(ru), detail)
	}
	c := OAuthClient{ID: reg.ClientID, Secret: reg.ClientSecret}
	if u.registered == nil || len(u.registered) >= maxRegistrations {
		u.registered = make(map[string]OAuthClient)
	}
	u.registered[key] = c
	return c, nil
}

// AuthorizationRequest is what the broker hands the connector to start a person's
// authorization.
type AuthorizationRequest struct {
	// Caller is the person; checked with CheckCaller.
	Caller Caller
	// State is the flow's state parameter, which the broker checks on the callback.
	State string
	// Verifier is the flow's PKCE code verifier (oauth2.GenerateVerifier); only its
	// S256 challenge leaves the manager here.
	Verifier string
	// RedirectURL is the gateway's callback, <gateway public URL>/oauth2/callback.
	RedirectURL string
}

// Authorization is where a person's browser is sent, and what the broker keeps of it
// to finish the flow: the issuer to check the callback against and the client to
// exchange the code with.
type Authorization struct {
	// URL is the authorization server's authorization endpoint with the request.
	URL string
	// Issuer is the issuer identifier of the authorization server.
	Issuer string
	// Client is the client the request names; its Secret is a secret.
	Client OAuthClient
}

// AuthorizationURL returns the authorization of r: the URL of the authorization
// server's authorization endpoint the person's browser is sent to, with the issuer and
// the client the broker keeps with the flow. Its errors never carry a secret.
func (u *UserAuthorizer) AuthorizationURL(r AuthorizationRequest) (*Authorization, *Error) {
	if e := u.CheckCaller(r.Caller); e != nil {
		return nil, e
	}
	if r.State == "" || r.Verifier == "" || r.RedirectURL == "" {
		return nil, newError(ReasonInvalidSpec, "an authorization needs a state, a PKCE verifier and a redirect URL")
	}
	meta, e := u.metadata(false)
	if e != nil {
		return nil, e
	}
	client, e := u.client(meta, r.RedirectURL)
	if e != nil {
		return nil, e
	}
	c := u.oauthConfig(meta, r.RedirectURL, client)
	return &Authorization{
		URL:    c.AuthCodeURL(r.State, oauth2.S256ChallengeOption(r.Verifier), oauth2.SetAuthURLParam("resource", u.resource)),
		Issuer: meta.issuer,
		Client: client,
	}, nil
}

// Completion is what the broker hands the connector once the person's browser came
// back to the callback with a code, after the broker checked the state.
type Completion struct {
	// Caller is the person the flow was started for (the flow's, never the
	// callback's): the grant is stored for Caller.Key.
	Caller Caller
	// Username is the person's username, kept with the grant for the admin's list.
	Username string
	// Code is the authorization code the callback carried.
	Code string
	// Verifier is the flow's PKCE code verifier.
	Verifier string
	// RedirectURL is the redirect URL the authorization was started with.
	RedirectURL string
	// Issuer is the issuer AuthorizationURL returned for the flow.
	Issuer string
	// Iss is the callback's iss parameter (RFC 9207); empty when it carried none.
	Iss string
	// Client is the client AuthorizationURL returned for the flow.
	Client OAuthClient
}

// Complete exchanges the code for the person's tokens and stores them as the person's
// grant for the server. The callback's iss must name the flow's authorization server
// when present, and be present when the authorization server advertises it (RFC 9207);
// the token endpoint answers within the bounds of the stack and is not followed on a
// redirect. Nothing is stored when anything fails. Its errors never carry a secret.
func (u *UserAuthorizer) Complete(ctx context.Context, c Completion) *Error {
	if e := u.CheckCaller(c.Caller); e != nil {
		return e
	}
	meta, e := u.metadata(false)
	if e != nil {
		return e
	}
	if !oauth.SameIssuer(meta.issuer, c.Issuer) {
		return authError(ReasonAuthorizationFailed, ReasonMetadataMismatch,
			"the authorization was started at %s, and server %s's authorization server is now %s: the code is not exchanged",
			oauth.QuoteURL(c.Issuer), u.key, oauth.QuoteURL(meta.issuer))
	}
	switch {
	case c.Iss != "" && c.Iss != meta.issuer:
		return authError(ReasonAuthorizationFailed, ReasonMetadataMismatch,
			"the authorization response names issuer %s, not the authorization server %s the person was sent to (RFC 9207): the code is not exchanged",
			oauth.QuoteURL(c.Iss), oauth.QuoteURL(meta.issuer))
	case c.Iss == "" && meta.issParameter:
		return authError(ReasonAuthorizationFailed, ReasonMetadataMismatch,
			"the authorization response names no issuer, and authorization server %s always does (RFC 9207): the code is not exchanged", oauth.QuoteURL(meta.issuer))
	}
	if e := u.ts.checkTokenURL(meta.tokenURL); e != nil {
		return e
	}
	if c.Code == "" || c.Verifier == "" {
		return authError(ReasonAuthorizationFailed, ReasonAuthorizationFailed, "the authorization response carries no code")
	}
	ctx, cancel := context.WithTimeout(ctx, u.ts.timeout)
	defer cancel()
	capture := &fetchCapture{}
	ctx = context.WithValue(ctx, fetchCaptureKey{}, capture)
	ctx = context.WithValue(ctx, oauth2.HTTPClient, u.exchange)
	if c.Client.ID == "" {
		return authError(ReasonAuthorizationFailed, ReasonAuthorizationFailed, "the authorization names no client")
	}
	cfg := u.oauthConfig(meta, c.RedirectURL, c.Client)
	tok, err := cfg.Exchange(ctx, c.Code, oauth2.VerifierOption(c.Verifier), oauth2.SetAuthURLParam("resource", u.resource))
	if err != nil {
		e := tokenRequestError("token endpoint "+oauth.Origin(meta.tokenURL), c.Client.ID, meta.scopes, err, capture)
		if e.Reason != ReasonTokenRequestFailed {
			return e // a denied redirect, a response over the bound: its own reason
		}
		out := *e
		out.Reason = ReasonAuthorizationFailed
		return &out
	}
	if e := checkUserToken(meta, tok); e != nil {
		return e
	}
	g := &Grant{
		Key: GrantKey{Caller: c.Caller.Key, Server: u.key}, Username: c.Username, Issuer: meta.issuer,
		AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, Expiry: tok.Expiry, Updated: time.Now(),
		Client: c.Client,
	}
	if err := u.store.SaveGrant(ctx, g); err != nil {
		return newError(ReasonAuthorizationFailed, "storing the grant failed: %s", oauth.SafeText(err.Error(), 200))
	}
	u.remember(g)
	return nil
}

// checkUserToken refuses a token response that carries no bearer access token.
func checkUserToken(meta *authMeta, tok *oauth2.Token) *Error {
	if tok.AccessToken == "" || (tok.TokenType != "" && !strings.EqualFold(tok.TokenType, "bearer")) {
		return authError(ReasonAuthorizationFailed, ReasonTokenRequestFailed,
			"token endpoint %s issued no bearer token (token_type %q)", oauth.Origin(meta.tokenURL), oauth.SafeText(tok.TokenType, 32))
	}
	return nil
}

// entry returns the cache entry of callerKey, making one when there is none.
func (u *UserAuthorizer) entry(callerKey string) *userEntry {
	u.cacheMu.Lock()
	defer u.cacheMu.Unlock()
	if e, ok := u.cache[callerKey]; ok {
		return e
	}
	if len(u.cache) >= maxCachedGrants {
		for k, e := range u.cache {
			if e.mu.TryLock() {
				stale := time.Since(e.readAt) >= grantCacheLife
				e.mu.Unlock()
				if stale {
					delete(u.cache, k)
				}
			}
		}
		if len(u.cache) >= maxCachedGrants {
			clear(u.cache)
		}
	}
	e := &userEntry{}
	u.cache[callerKey] = e
	return e
}

// remember caches g as read now.
func (u *UserAuthorizer) remember(g *Grant) {
	e := u.entry(g.Key.Caller)
	e.mu.Lock()
	e.grant, e.readAt = g, time.Now()
	e.mu.Unlock()
}

// forget drops the cached grant of callerKey.
func (u *UserAuthorizer) forget(callerKey string) {
	u.cacheMu.Lock()
	defer u.cacheMu.Unlock()
	delete(u.cache, callerKey)
}

// authorizationRequired is the answer to a caller without a usable grant.
func (u *UserAuthorizer) authorizationRequired(why string) *Error {
	return authError(ReasonAuthorizationRequired, ReasonAuthorizationRequired,
		"server %s acts for each person with their own account, and %s: the person authorizes it at the URL the gateway gives", u.key, why)
}

// Token returns the caller's access token for the server, refreshing it shortly before
// it expires. A caller without a grant, or whose refresh the authorization server
// refused (the grant is then removed), gets ReasonAuthorizationRequired. A token is
// never served to another caller than the one whose grant it is.
func (u *UserAuthorizer) Token(ctx context.Context, c Caller) (string, *Error) {
	return u.token(ctx, c, "")
}

// Renew returns a token other than rejected (one the server refused): a refreshed one,
// or ReasonAuthorizationRequired when there is none to be had.
func (u *UserAuthorizer) Renew(ctx context.Context, c Caller, rejected string) (string, *Error) {
	return u.token(ctx, c, rejected)
}

func (u *UserAuthorizer) token(ctx context.Context, c Caller, rejected string) (string, *Error) {
	if e := u.CheckCaller(c); e != nil {
		return "", e
	}
	k := GrantKey{Caller: c.Key, Server: u.key}
	e := u.entry(c.Key)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.grant == nil || time.Since(e.readAt) >= grantCacheLife || (rejected != "" && e.grant.AccessToken == rejected) {
		g, err := u.store.LoadGrant(ctx, k)
		switch {
		case errors.Is(err, ErrNoGrant):
			e.grant = nil
			return "", u.authorizationRequired("the caller has not authorized it yet")
		case err != nil:
			return "", newError(ReasonTokenRequestFailed, "reading the caller's grant failed: %s", oauth.SafeText(err.Error(), 200))
		}
		if g.Key != k {
			return "", newError(ReasonTokenRequestFailed, "the grant store answered with another grant")
		}
		e.grant, e.readAt = g, time.Now()
	}
	g := e.grant
	due := !g.Expiry.IsZero() && time.Until(g.Expiry) < tokenRefreshMargin
	if !due && g.AccessToken != rejected {
		return g.AccessToken, nil
	}
	if g.RefreshToken == "" {
		_ = u.store.DeleteGrant(ctx, k)
		e.grant = nil
		return "", u.authorizationRequired("the caller's token has expired and came with no refresh token")
	}
	ng, err := u.refresh(ctx, g)
	if err != nil {
		if !err.refused {
			return "", err
		}
		// Another replica may have refreshed (and rotated the refresh token) first.
		if cur, lerr := u.store.LoadGrant(ctx, k); lerr == nil && cur.RefreshToken != g.RefreshToken && cur.AccessToken != rejected {
			e.grant, e.readAt = cur, time.Now()
			return cur.AccessToken, nil
		}
		_ = u.store.DeleteGrant(ctx, k)
		e.grant = nil
		return "", u.authorizationRequired(fmt.Sprintf("the authorization server refused to refresh the caller's grant (%s), which was removed", err.Message))
	}
	if serr := u.store.SaveGrant(ctx, ng); serr != nil {
		return "", newError(ReasonTokenRequestFailed, "storing the refreshed grant failed: %s", oauth.SafeText(serr.Error(), 200))
	}
	e.grant, e.readAt = ng, time.Now()
	return ng.AccessToken, nil
}

// refresh renews g with its refresh token, through the client that follows no
// redirect. A refusal the same request would meet again is marked refused.
func (u *UserAuthorizer) refresh(ctx context.Context, g *Grant) (*Grant, *Error) {
	meta, e := u.metadata(false)
	if e != nil {
		return nil, e
	}
	if !oauth.SameIssuer(meta.issuer, g.Issuer) {
		out := authError(ReasonMetadataMismatch, ReasonMetadataMismatch,
			"the caller's grant was issued by %s, and server %s's authorization server is now %s", oauth.QuoteURL(g.Issuer), u.key, oauth.QuoteURL(meta.issuer))
		out.refused = true
		return nil, out
	}
	if e := u.ts.checkTokenURL(meta.tokenURL); e != nil {
		return nil, e
	}
	ctx, cancel := context.WithTimeout(ctx, u.ts.timeout)
	defer cancel()
	capture := &fetchCapture{}
	ctx = context.WithValue(ctx, fetchCaptureKey{}, capture)
	ctx = context.WithValue(ctx, oauth2.HTTPClient, u.exchange)
	// oauth2 refreshes a token only once it is within ten seconds of expiry: the copy
	// handed to it has expired, so it refreshes now.
	old := &oauth2.Token{AccessToken: g.AccessToken, RefreshToken: g.RefreshToken, TokenType: "Bearer", Expiry: time.Now().Add(-time.Minute)}
	client := g.Client
	if client.ID == "" {
		client = OAuthClient{ID: u.cfg.ClientID, Secret: u.cfg.ClientSecret}
	}
	tok, err := u.oauthConfig(meta, "", client).TokenSource(ctx, old).Token()
	if err != nil {
		return nil, tokenRequestError("token endpoint "+oauth.Origin(meta.tokenURL), client.ID, meta.scopes, err, capture)
	}
	if e := checkUserToken(meta, tok); e != nil {
		return nil, e
	}
	ng := *g
	ng.AccessToken, ng.Expiry, ng.Updated = tok.AccessToken, tok.Expiry, time.Now()
	if tok.RefreshToken != "" {
		ng.RefreshToken = tok.RefreshToken
	}
	return &ng, nil
}

// Revoke removes the caller's grant for the server: the person authorizes again on
// their next call.
func (u *UserAuthorizer) Revoke(ctx context.Context, callerKey string) error {
	u.forget(callerKey)
	return u.store.DeleteGrant(ctx, GrantKey{Caller: callerKey, Server: u.key})
}

// userBearer is the bearer source of one Upstream acting for one person of a perUser
// server: the person's own token from their grant, never another's.
type userBearer struct {
	auth   *UserAuthorizer
	caller Caller
	ctx    context.Context
	// sent are the person's tokens the Upstream sent, for its redactor.
	sent recentSecrets
}

func (b *userBearer) current() (string, *Error) {
	tok, e := b.auth.Token(b.ctx, b.caller)
	if e == nil {
		b.sent.add(tok, maxCallerSecrets)
	}
	return tok, e
}

func (b *userBearer) renew(rejected string, _ oauth.Challenge) (string, *Error) {
	tok, e := b.auth.Renew(b.ctx, b.caller, rejected)
	if e == nil {
		b.sent.add(tok, maxCallerSecrets)
	}
	return tok, e
}

func (b *userBearer) insufficientScope(ch oauth.Challenge) *Error {
	asked := "a scope it did not name"
	if ch.Scope != "" {
		asked = fmt.Sprintf("scope %q", TruncateUTF8(ch.Scope, 256))
	}
	return authError(ReasonInsufficientScope, ReasonInsufficientScope,
		"server %s answered insufficient_scope: it asks for %s, which the person's grant does not hold; an admin can add it to perUser.scopes (and the identity provider's spec.perUser.scopes), after which the person authorizes again",
		displayURL(b.auth.endpoint), asked)
}

func (b *userBearer) tokenEndpoint() string { return "the person's grant" }

// redactor returns the Upstream's redactor: the session's secrets and the person's
// tokens it sent.
func (b *userBearer) redactor(session redactor) redactor {
	var mu sync.Mutex
	var merged *secretList
	var mergedFrom [2]*secretList
	return redactor{configured: session.configured, issued: func() *secretList {
		own := &noSecrets
		if session.issued != nil {
			own = session.issued()
		}
		theirs := b.sent.get()
		mu.Lock()
		defer mu.Unlock()
		if merged == nil || mergedFrom != [2]*secretList{own, theirs} {
			l := newSecretList(append(slices.Clone(own.text), theirs.text...))
			merged, mergedFrom = &l, [2]*secretList{own, theirs}
		}
		return merged
	}}
}

// hasGrant reports whether the person holds a usable grant for the server now, reading
// (and refreshing) it as a request would.
func (b *userBearer) hasGrant() (bool, *Error) {
	ctx, cancel := context.WithTimeout(b.ctx, grantReadTimeout)
	defer cancel()
	tok, e := b.auth.Token(ctx, b.caller)
	if e == nil {
		b.sent.add(tok, maxCallerSecrets)
	}
	switch {
	case e == nil:
		return true, nil
	case e.Reason == ReasonAuthorizationRequired:
		return false, nil
	}
	return false, e
}

// UserAuthorizer returns the authorizer of the perUser server key names, or nil when
// the server takes no per-person authorization (or the pool has no such server).
func (p *Pool) UserAuthorizer(key Key) *UserAuthorizer {
	if s := p.current(key); s != nil {
		return s.users
	}
	return nil
}
