package connector

import (
	"cmp"
	"container/list"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"

	"github.com/switchboard-mcp/switchboard/connector/oauth"
)

// Per-caller upstream credentials.
//
// A server whose credentials follow the caller (Config.PerCaller) is called by each
// gateway caller with a token of that caller's own, obtained by exchanging the token the
// caller presented to the gateway: at a security token service (tokenExchange, RFC
// 8693), or at the enterprise identity provider for an identity assertion grant that
// the server's authorization server trades for an access token (enterpriseManaged,
// SEP-990). Either way the exchange happens at the token endpoint of the identity
// provider (an MCPIdentityProvider a cluster admin wrote) the config names, and only for
// callers that provider vouched for: a caller of another provider, or a Kubernetes
// ServiceAccount, is refused before its token goes anywhere (ReasonCallerNotAllowed).
// An identity assertion grant is requested only for an authorization server the
// provider lists (ReasonAuthorizationServerNotAllowed), whatever the server's metadata
// names. The audience and scopes asked for are only those the provider lists
// (ReasonAudienceNotAllowed, ReasonScopeNotAllowed, judged before any request), and the
// resource is always the server's own URL. The tokens are cached per server config and
// caller, in one bounded LRU per pool, and used on that caller's Upstreams only. The pool's own session never acts as
// a caller: with an operator credential beside the per-caller mode (Config.OAuth2) it
// runs as usual; without one it checks the server's protected resource metadata and
// its authorization server's metadata and reports the tools as discovered per caller.

// DefaultMaxCallerTokens is the default of [Options.MaxCallerTokens].
//
// An entry holds the caller's token, the upstream token and the few secrets kept for
// redaction: 3.4 KiB measured with a 1 KiB caller token and an 800-byte upstream token
// (BenchmarkCallerCacheEntryMemory: 13.5 MiB for a full cache), and at most about
// 8 KiB once an ID-JAG and renewed tokens are kept for redaction. So 4096 entries stay
// under 32 MiB, a tenth of the manager's memory target, while covering, say, 200
// active agents each using 20 per-caller servers. An evicted entry costs one more
// exchange, never a wrong token.
const DefaultMaxCallerTokens = 4096

const (
	// maxUnknownTokenLife bounds how long a per-caller token whose response named no
	// expiry (and whose caller's token has none) is used before it is exchanged again.
	maxUnknownTokenLife = 5 * time.Minute
	// maxCallerSecrets bounds the secrets one caller entry keeps for redaction: the
	// caller's tokens, the upstream tokens and assertions of late.
	maxCallerSecrets = 6
)

// PerCallerAuth configures upstream credentials that follow the gateway's caller.
// Exactly one of its modes is set.
type PerCallerAuth struct {
	// TokenExchange exchanges the caller's token at a security token service.
	TokenExchange *TokenExchange
	// EnterpriseManaged exchanges the caller's ID token at the enterprise identity
	// provider for an identity assertion grant, which the server's authorization
	// server trades for an access token.
	EnterpriseManaged *EnterpriseManaged
}

// TokenExchange is an RFC 8693 token exchange for every caller: the caller's token is
// the subject_token; the token issued is sent to the server for that caller only. The
// resource requested is always the server's canonical URL (RFC 8707), and the audience
// and scopes only what the identity provider allows, so the token is asked for the
// server it is sent to and for nothing else.
type TokenExchange struct {
	// Provider names the identity provider whose token endpoint TokenURL is: only the
	// tokens of callers it vouched for ([Caller.Provider]) are exchanged. Required.
	Provider string
	// TokenURL is the identity provider's token endpoint, as a cluster admin named it.
	TokenURL string
	// ClientID identifies the gateway to the token service.
	ClientID string
	// ClientSecret authenticates it (client_secret_basic); empty sends client_id alone.
	ClientSecret string
	// Audience is the audience requested; empty sends none. It must be one of
	// AllowedAudiences.
	Audience string
	// Scopes are requested with every token; each must be one of AllowedScopes.
	Scopes []string
	// AllowedAudiences are the audiences the identity provider's admin allows a server
	// to request: a token for another audience is never asked for.
	AllowedAudiences []string
	// AllowedScopes are the scopes the identity provider's admin allows a server to
	// request: none may be asked for outside them.
	AllowedScopes []string
	// RequestedTokenType is the token type requested; empty means
	// [TokenTypeAccessToken]. A response of any other type is refused.
	RequestedTokenType string
	// SubjectTokenType is the type of the caller's token; empty means
	// [TokenTypeAccessToken]: the caller's token is the bearer token it presented to
	// the gateway, an access token for the gateway whoever issued it. A deployment
	// whose callers present ID tokens, and whose token service wants them named so,
	// sets [TokenTypeIDToken].
	SubjectTokenType string
	// AllowInsecureHTTP permits a plain http token endpoint and metadata URLs on a
	// loopback address. The caller's token never goes over plain http to any other.
	AllowInsecureHTTP bool
}

// EnterpriseManaged is enterprise-managed authorization (SEP-990) for every caller.
type EnterpriseManaged struct {
	// IdentityProvider is where the caller's ID token is exchanged for an identity
	// assertion grant.
	IdentityProvider IdentityProvider
	// ClientID identifies the gateway to the server's authorization server, which is
	// discovered (RFC 9728, RFC 8414).
	ClientID string
	// ClientSecret authenticates it (client_secret_basic); empty sends client_id alone.
	ClientSecret string
	// Scopes are requested with every token; empty means the server's challenge, else
	// its metadata's scopes_supported.
	Scopes []string
	// AllowInsecureHTTP permits plain http token endpoints and metadata URLs on a
	// loopback address.
	AllowInsecureHTTP bool
}

// IdentityProvider is the enterprise identity provider's token endpoint, the gateway's
// client there, and the authorization servers its grants may be requested for.
type IdentityProvider struct {
	// Name names the identity provider: only the tokens of callers it vouched for
	// ([Caller.Provider]) are exchanged. Required.
	Name string
	// TokenURL is the identity provider's token endpoint, as a cluster admin named it.
	TokenURL string
	// ClientID identifies the gateway to the identity provider.
	ClientID string
	// ClientSecret authenticates it (client_secret_basic); empty sends client_id alone.
	ClientSecret string
	// AuthorizationServers are the issuer identifiers of the authorization servers an
	// identity assertion grant may be requested for; the one the server's metadata
	// names must be among them, compared exactly. At least one is required.
	AuthorizationServers []string
	// Scopes, when set, are the only scopes a grant and its access token may be
	// requested with: configured scopes outside them are refused, discovered ones
	// outside them are dropped. Empty leaves the scopes to the server.
	Scopes []string
}

// equal reports whether a and b configure the same per-caller credentials.
func (a *PerCallerAuth) equal(b *PerCallerAuth) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.TokenExchange.equal(b.TokenExchange) && a.EnterpriseManaged.equal(b.EnterpriseManaged)
}

// equal reports whether x and y configure the same token exchange.
func (x *TokenExchange) equal(y *TokenExchange) bool {
	if x == nil || y == nil {
		return x == nil && y == nil
	}
	return x.Provider == y.Provider && x.TokenURL == y.TokenURL && x.ClientID == y.ClientID && x.ClientSecret == y.ClientSecret &&
		x.Audience == y.Audience && slices.Equal(x.Scopes, y.Scopes) &&
		slices.Equal(x.AllowedAudiences, y.AllowedAudiences) && slices.Equal(x.AllowedScopes, y.AllowedScopes) &&
		x.RequestedTokenType == y.RequestedTokenType && x.SubjectTokenType == y.SubjectTokenType &&
		x.AllowInsecureHTTP == y.AllowInsecureHTTP
}

// equal reports whether m and n configure the same enterprise-managed authorization.
func (m *EnterpriseManaged) equal(n *EnterpriseManaged) bool {
	if m == nil || n == nil {
		return m == nil && n == nil
	}
	p, q := m.IdentityProvider, n.IdentityProvider
	return p.Name == q.Name && p.TokenURL == q.TokenURL && p.ClientID == q.ClientID && p.ClientSecret == q.ClientSecret &&
		slices.Equal(p.AuthorizationServers, q.AuthorizationServers) && slices.Equal(p.Scopes, q.Scopes) && m.ClientID == n.ClientID &&
		m.ClientSecret == n.ClientSecret && slices.Equal(m.Scopes, n.Scopes) &&
		m.AllowInsecureHTTP == n.AllowInsecureHTTP
}

// clone returns a deep copy of a, which the caller's later changes cannot reach.
func (a *PerCallerAuth) clone() PerCallerAuth {
	var out PerCallerAuth
	if t := a.TokenExchange; t != nil {
		c := *t
		c.Scopes = slices.Clone(t.Scopes)
		c.AllowedAudiences = slices.Clone(t.AllowedAudiences)
		c.AllowedScopes = slices.Clone(t.AllowedScopes)
		out.TokenExchange = &c
	}
	if m := a.EnterpriseManaged; m != nil {
		c := *m
		c.Scopes = slices.Clone(m.Scopes)
		c.IdentityProvider.AuthorizationServers = slices.Clone(m.IdentityProvider.AuthorizationServers)
		c.IdentityProvider.Scopes = slices.Clone(m.IdentityProvider.Scopes)
		out.EnterpriseManaged = &c
	}
	return out
}

// secrets returns the client secrets of the config.
func (a *PerCallerAuth) secrets() []string {
	var out []string
	if t := a.TokenExchange; t != nil {
		out = append(out, t.ClientSecret)
	}
	if m := a.EnterpriseManaged; m != nil {
		out = append(out, m.IdentityProvider.ClientSecret, m.ClientSecret)
	}
	return out
}

// tokenURLs returns the configured token endpoints, whose query strings are secrets.
func (a *PerCallerAuth) tokenURLs() []string {
	var out []string
	if t := a.TokenExchange; t != nil {
		out = append(out, t.TokenURL)
	}
	if m := a.EnterpriseManaged; m != nil {
		out = append(out, m.IdentityProvider.TokenURL)
	}
	return out
}

// callerTokens is the per-caller credentials of one server's config, shared by the
// pool's session and its Upstreams; it ends with the session, and its cache entries
// with it. Its requests go through the session's httpStack with c.ts's client.
type callerTokens struct {
	key      Key
	cfg      PerCallerAuth
	endpoint *url.URL
	resource string // the server's canonical URL
	// ts holds no credential of its own: it lends the flows its client (bounded
	// responses, redirect checks), its checks and its discovery.
	ts    *tokenSource
	cache *callerCache
	// tokenURL is the token service's (tokenExchange) or the identity provider's
	// (enterpriseManaged) token endpoint.
	tokenURL *url.URL
	// metadataOnly says the session holds no operator credential: it checks metadata
	// instead of connecting (see watchMetadata).
	metadataOnly bool
	// closed is set, under the cache's lock, once the config is gone: an Upstream
	// still winding down uses its entry without putting it back in the cache.
	closed bool

	// discoverMu serializes discovery of the server's authorization server; meta is
	// its result (enterpriseManaged only).
	discoverMu sync.Mutex
	meta       atomic.Pointer[authMeta]
}

// newCallerTokens checks the per-caller config of cfg. Its errors never carry a secret.
func newCallerTokens(ctx context.Context, key Key, cfg Config, endpoint *url.URL, stack *httpStack, cache *callerCache) (*callerTokens, *Error) {
	pc := cfg.PerCaller.clone()
	invalid := func(format string, args ...any) *Error {
		return authError(ReasonInvalidSpec, ReasonInvalidClient, format, args...)
	}
	c := &callerTokens{
		key: key, cfg: pc, endpoint: endpoint, resource: oauth.CanonicalResource(endpoint), cache: cache,
		// The operator's own credential; a workload identity is one too.
		metadataOnly: cfg.OAuth2 == nil && cfg.WorkloadIdentity == nil,
	}
	var helper OAuth2ClientCredentials
	grant := anyGrant
	var rawURL string
	switch te, em := pc.TokenExchange, pc.EnterpriseManaged; {
	case te != nil && em != nil:
		return nil, invalid("per-caller credentials set both tokenExchange and enterpriseManaged")
	case te != nil:
		if te.Provider == "" {
			return nil, invalid("token exchange names no identity provider whose callers' tokens it may exchange")
		}
		if te.ClientID == "" {
			return nil, invalid("token exchange needs a client ID")
		}
		switch te.RequestedTokenType {
		case "", TokenTypeAccessToken, TokenTypeJWT:
		default:
			return nil, invalid("token exchange cannot request token type %q: the server takes an access token or a JWT", TruncateUTF8(te.RequestedTokenType, 128))
		}
		switch te.SubjectTokenType {
		case "", TokenTypeAccessToken, TokenTypeIDToken, TokenTypeJWT:
		default:
			return nil, invalid("unknown subject token type %q", TruncateUTF8(te.SubjectTokenType, 128))
		}
		helper = OAuth2ClientCredentials{ClientID: te.ClientID, Scopes: te.Scopes, AllowInsecureHTTP: te.AllowInsecureHTTP}
		rawURL = te.TokenURL
	case em != nil:
		if em.IdentityProvider.Name == "" {
			return nil, invalid("enterprise-managed authorization names no identity provider whose callers' tokens it may exchange")
		}
		if len(em.IdentityProvider.AuthorizationServers) == 0 {
			return nil, invalid("identity provider %q lists no authorization server an identity assertion grant may be requested for", em.IdentityProvider.Name)
		}
		if em.IdentityProvider.ClientID == "" || em.ClientID == "" {
			return nil, invalid("enterprise-managed authorization needs a client ID at the identity provider and at the server's authorization server")
		}
		helper = OAuth2ClientCredentials{ClientID: em.ClientID, Scopes: em.Scopes, AllowInsecureHTTP: em.AllowInsecureHTTP}
		rawURL, grant = em.IdentityProvider.TokenURL, oauth.GrantTypeJWTBearer
	default:
		return nil, invalid("per-caller credentials set neither tokenExchange nor enterpriseManaged")
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return nil, newError(ReasonInvalidSpec, "per-caller token URL is not an absolute http or https URL without user information")
	}
	c.tokenURL = u
	c.ts = &tokenSource{cfg: helper, endpoint: endpoint, resource: c.resource, stack: stack, ctx: ctx, timeout: cfg.Timeout, grant: grant}
	c.ts.client = &http.Client{Transport: &authTransport{stack: stack}, CheckRedirect: c.ts.checkRedirect, Timeout: cfg.Timeout}
	return c, nil
}

// enterprise reports whether the flow is enterprise-managed authorization.
func (c *callerTokens) enterprise() bool { return c.cfg.EnterpriseManaged != nil }

// provider names the identity provider whose callers' tokens the config exchanges.
func (c *callerTokens) provider() string {
	if c.enterprise() {
		return c.cfg.EnterpriseManaged.IdentityProvider.Name
	}
	return c.cfg.TokenExchange.Provider
}

// vouched reports whether caller's token was vouched for by the config's identity
// provider, the only callers whose tokens it may send anywhere. A Kubernetes token
// names no provider and never is.
func (c *callerTokens) vouched(caller Caller) bool {
	return caller.Provider != "" && caller.Provider == c.provider()
}

// callerNotAllowed is the refusal of a caller the config's identity provider did not
// vouch for. It names the provider, never the caller's token.
func (c *callerTokens) callerNotAllowed(caller Caller) *Error {
	who := "a Kubernetes token (a ServiceAccount's), which is never exchanged"
	if caller.Provider != "" {
		who = fmt.Sprintf("a token of identity provider %q", TruncateUTF8(caller.Provider, 253))
	}
	return authError(ReasonCallerNotAllowed, ReasonCallerNotAllowed,
		"server %s takes each caller's own credentials, obtained with a token of identity provider %q only; the caller presented %s, so its token was sent nowhere",
		displayURL(c.endpoint), c.provider(), who)
}

// allowAuthServer refuses an authorization server the identity provider does not list:
// no identity assertion grant is requested for it, whatever the server's metadata says.
func (c *callerTokens) allowAuthServer(m *authMeta) *Error {
	idp := c.cfg.EnterpriseManaged.IdentityProvider
	if slices.Contains(idp.AuthorizationServers, m.issuer) {
		return nil
	}
	return authError(ReasonAuthorizationServerNotAllowed, ReasonAuthorizationServerNotAllowed,
		"server %s names authorization server %s, which identity provider %q does not list in tokenExchange.authorizationServers; no identity assertion grant is requested for it",
		displayURL(c.endpoint), TruncateUTF8(DisplayURL(m.issuer), 512), idp.Name)
}

// allowRequest refuses, before any request, a config whose audience or scopes its
// identity provider does not allow (see PerCallerAuth.Allowed).
func (c *callerTokens) allowRequest() *Error { return c.cfg.Allowed() }

// Allowed reports whether the audience and scopes the config asks for are ones its
// identity provider's cluster admin allows: a token exchange may name an audience only
// from AllowedAudiences and scopes only from AllowedScopes; an enterprise-managed flow
// scopes only from IdentityProvider.Scopes once it lists any. Otherwise it returns the
// refusal, ReasonAudienceNotAllowed or ReasonScopeNotAllowed, naming the value and the
// provider. The controller judges a server's config with it before the connector is
// given it, and the connector again before every exchange: one rule in one place.
func (a *PerCallerAuth) Allowed() *Error {
	refuse := func(reason, provider, what, value, list string) *Error {
		return authError(reason, reason,
			"the server asks for %s %q, which identity provider %q does not list in spec.tokenExchange.%s; no caller's token is exchanged for it",
			what, TruncateUTF8(value, 256), provider, list)
	}
	var provider string
	var scopes, allowedScopes []string
	switch te, em := a.TokenExchange, a.EnterpriseManaged; {
	case te != nil:
		if te.Audience != "" && !slices.Contains(te.AllowedAudiences, te.Audience) {
			return refuse(ReasonAudienceNotAllowed, te.Provider, "audience", te.Audience, "audiences")
		}
		provider, scopes, allowedScopes = te.Provider, te.Scopes, te.AllowedScopes
	case em != nil && len(em.IdentityProvider.Scopes) > 0:
		provider, scopes, allowedScopes = em.IdentityProvider.Name, em.Scopes, em.IdentityProvider.Scopes
	}
	for _, s := range scopes {
		if !slices.Contains(allowedScopes, s) {
			return refuse(ReasonScopeNotAllowed, provider, "scope", s, "scopes")
		}
	}
	return nil
}

// grantScopes returns the scopes an enterprise flow's grant and token are requested
// with: those of m (the configured ones, else those the server's challenge or
// metadata names), less any the identity provider does not list when it lists any.
func (c *callerTokens) grantScopes(m *authMeta) []string {
	allowed := c.cfg.EnterpriseManaged.IdentityProvider.Scopes
	if len(allowed) == 0 {
		return m.scopes
	}
	var out []string
	for _, s := range m.scopes {
		if slices.Contains(allowed, s) {
			out = append(out, s)
		}
	}
	return out
}

// authServer returns the server's authorization server, discovering it the first time
// (RFC 9728 and RFC 8414 or OpenID discovery, through the session's stack, with the
// resource and issuer checks of the client credentials flow). ch is the server's
// challenge, if a request got one.
func (c *callerTokens) authServer(ch oauth.Challenge) (*authMeta, *Error) {
	if m := c.meta.Load(); m != nil {
		return m, nil
	}
	c.discoverMu.Lock()
	defer c.discoverMu.Unlock()
	if m := c.meta.Load(); m != nil {
		return m, nil
	}
	m, e := c.ts.discover(ch)
	if e != nil {
		return nil, e
	}
	if e := c.allowAuthServer(m); e != nil {
		return nil, e
	}
	c.meta.Store(m)
	return m, nil
}

// scopes returns the scopes the caller's tokens are requested with.
func (c *callerTokens) scopes() []string {
	if te := c.cfg.TokenExchange; te != nil {
		return te.Scopes
	}
	if m := c.meta.Load(); m != nil {
		return c.grantScopes(m)
	}
	return c.cfg.EnterpriseManaged.Scopes
}

// upstreamTokenURL is where the tokens the server is sent come from.
func (c *callerTokens) upstreamTokenURL() *url.URL {
	if !c.enterprise() {
		return c.tokenURL
	}
	if m := c.meta.Load(); m != nil {
		return m.tokenURL
	}
	return nil
}

// fetch obtains one upstream token for a caller whose token is subject. Every token
// and assertion it receives goes to remember before it is judged.
func (c *callerTokens) fetch(subject string, remember func(string)) (*oauth2.Token, *Error) {
	// Judged here too, before anything is sent: only what the provider allows.
	if e := c.allowRequest(); e != nil {
		return nil, e
	}
	if te := c.cfg.TokenExchange; te != nil {
		want := cmp.Or(te.RequestedTokenType, TokenTypeAccessToken)
		params := url.Values{
			"grant_type":           {grantTokenExchange},
			"subject_token":        {subject},
			"subject_token_type":   {cmp.Or(te.SubjectTokenType, TokenTypeAccessToken)},
			"requested_token_type": {want},
			// Always the server the token is sent to (RFC 8707), never the author's choice.
			"resource": {c.resource},
		}
		if te.Audience != "" {
			params.Set("audience", te.Audience)
		}
		r := tokenRequest{what: "token exchange", url: c.tokenURL, clientID: te.ClientID, clientSecret: te.ClientSecret, scopes: te.Scopes, params: params}
		tok, e := c.post(r)
		if e != nil {
			return nil, e
		}
		remember(tok.AccessToken)
		if e := checkIssuedType(r, tok, want); e != nil {
			return nil, e
		}
		if want == TokenTypeAccessToken {
			if e := checkBearer(r, tok); e != nil {
				return nil, e
			}
		} else if tok.AccessToken == "" {
			return nil, authError(ReasonTokenRequestFailed, ReasonTokenRequestFailed, "token exchange at %s issued no token", oauth.Origin(c.tokenURL))
		}
		return tok, nil
	}

	em := c.cfg.EnterpriseManaged
	meta, e := c.authServer(oauth.Challenge{})
	if e != nil {
		return nil, e
	}
	// Judged again where the grant is asked for: the audience is what the IdP issues for.
	if e := c.allowAuthServer(meta); e != nil {
		return nil, e
	}
	scopes := c.grantScopes(meta)
	// The caller's ID token for an identity assertion grant (SEP-990 section 4): for
	// the server's authorization server, naming the server.
	r := tokenRequest{what: "identity assertion exchange", url: c.tokenURL, clientID: em.IdentityProvider.ClientID, clientSecret: em.IdentityProvider.ClientSecret,
		scopes: scopes, params: url.Values{
			"grant_type":           {grantTokenExchange},
			"subject_token":        {subject},
			"subject_token_type":   {TokenTypeIDToken},
			"requested_token_type": {TokenTypeIDJAG},
			"audience":             {meta.issuer},
			"resource":             {c.resource},
		}}
	jag, e := c.post(r)
	if e != nil {
		return nil, e
	}
	remember(jag.AccessToken)
	if e := checkIssuedType(r, jag, TokenTypeIDJAG); e != nil {
		return nil, e
	}
	if jag.AccessToken == "" {
		return nil, authError(ReasonTokenRequestFailed, ReasonTokenRequestFailed, "identity assertion exchange at %s issued no grant", oauth.Origin(c.tokenURL))
	}
	// The grant for an access token (SEP-990 section 5, RFC 7523 section 2.1).
	r = tokenRequest{what: "jwt-bearer grant", url: meta.tokenURL, clientID: em.ClientID, clientSecret: em.ClientSecret,
		scopes: scopes, params: url.Values{
			"grant_type": {oauth.GrantTypeJWTBearer},
			"assertion":  {jag.AccessToken},
			"resource":   {c.resource},
		}}
	tok, e := c.post(r)
	if e != nil {
		return nil, e
	}
	remember(tok.AccessToken)
	if e := checkBearer(r, tok); e != nil {
		return nil, e
	}
	return tok, nil
}

// close forgets every caller's tokens: the config they were obtained for is gone.
func (c *callerTokens) close() { c.cache.purge(c) }

// bearerFor returns the bearer source of an Upstream acting for caller.
func (c *callerTokens) bearerFor(caller Caller) (*callerBearer, *Error) {
	if caller.Token != "" && !c.vouched(caller) {
		return nil, c.callerNotAllowed(caller)
	}
	if caller.Key == "" || caller.Token == "" {
		return nil, authError(ReasonUnauthorized, ReasonTokenRequestFailed,
			"server %s takes each caller's own credentials, and the caller has no token to exchange", displayURL(c.endpoint))
	}
	if !caller.Expiry.IsZero() && !time.Now().Before(caller.Expiry) {
		return nil, callerExpired()
	}
	e := c.present(caller)
	return &callerBearer{tokens: c, caller: caller.Key, entry: e}, nil
}

// present makes caller's token the subject of its later exchanges on this server, or
// drops its upstream tokens when that token has expired.
func (c *callerTokens) present(caller Caller) *callerEntry {
	if caller.Token != "" && !c.vouched(caller) {
		// Not a token this config may send anywhere: it is kept nowhere either.
		return nil
	}
	k := callerCacheKey{c, caller.Key}
	if caller.Token == "" || (!caller.Expiry.IsZero() && !time.Now().Before(caller.Expiry)) {
		// Nothing to exchange: an entry there is drops its tokens, none is made.
		e := c.cache.getOrAdd(k, nil)
		if e != nil && caller.Token != "" {
			e.present(caller)
		}
		return e
	}
	e := c.cache.getOrAdd(k, &callerEntry{tokens: c, key: caller.Key})
	e.present(caller)
	return e
}

// callerExpired is the failure of a request whose caller's token has expired.
func callerExpired() *Error {
	return authError(ReasonUnauthorized, ReasonTokenRequestFailed,
		"the caller's token has expired; its upstream tokens were dropped")
}

// callerEntry is one caller's tokens for one server config.
type callerEntry struct {
	tokens *callerTokens
	key    string

	// renewMu serializes renewals; fetchMu the exchanges themselves, so that a renewal
	// and a due refresh never exchange for the caller at once.
	renewMu sync.Mutex
	fetchMu sync.Mutex

	mu      sync.Mutex
	subject string    // the caller's newest token; "" once dropped
	expiry  time.Time // the subject's expiry; zero when unknown
	reuse   oauth2.TokenSource

	// secrets are the caller's token and the tokens obtained with it, for redaction.
	secrets recentSecrets
}

// present takes the caller's newest token.
func (e *callerEntry) present(caller Caller) {
	if caller.Token == "" {
		return
	}
	expired := !caller.Expiry.IsZero() && !time.Now().Before(caller.Expiry)
	e.mu.Lock()
	same := e.subject == caller.Token
	if expired {
		e.subject, e.expiry, e.reuse = "", time.Time{}, nil
	} else {
		e.subject, e.expiry = caller.Token, caller.Expiry
	}
	e.mu.Unlock()
	if !same {
		e.remember(caller.Token)
	}
}

// live fails when the caller's token has expired, dropping its upstream tokens.
func (e *callerEntry) live() *Error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.subject != "" && (e.expiry.IsZero() || time.Now().Before(e.expiry)) {
		return nil
	}
	e.subject, e.expiry, e.reuse = "", time.Time{}, nil
	return callerExpired()
}

// current returns the caller's token for the server, exchanging the caller's token the
// first time. It returns "" while the server's authorization server is unknown
// (enterpriseManaged): the server's 401 then names its metadata (renew).
func (e *callerEntry) current() (string, *Error) {
	if err := e.live(); err != nil {
		return "", err
	}
	e.mu.Lock()
	reuse := e.reuse
	e.mu.Unlock()
	if reuse == nil {
		if e.tokens.enterprise() && e.tokens.meta.Load() == nil {
			return "", nil
		}
		return e.renew("", oauth.Challenge{})
	}
	tok, err := reuse.Token()
	if err != nil {
		return "", asCallerError(err)
	}
	return tok.AccessToken, nil
}

// renew returns a token other than rejected: one another request obtained meanwhile, or
// a new one from a new exchange.
func (e *callerEntry) renew(rejected string, ch oauth.Challenge) (string, *Error) {
	e.renewMu.Lock()
	defer e.renewMu.Unlock()
	if err := e.live(); err != nil {
		return "", err
	}
	e.mu.Lock()
	reuse := e.reuse
	e.mu.Unlock()
	if reuse != nil {
		if tok, err := reuse.Token(); err == nil && tok.AccessToken != rejected {
			return tok.AccessToken, nil
		}
	}
	if e.tokens.enterprise() {
		if _, err := e.tokens.authServer(ch); err != nil {
			return "", err
		}
	}
	reuse = oauth2.ReuseTokenSourceWithExpiry(nil, &callerFetcher{e: e}, tokenRefreshMargin)
	tok, err := reuse.Token()
	if err != nil {
		return "", asCallerError(err)
	}
	e.mu.Lock()
	if e.subject != "" {
		e.reuse = reuse
	}
	e.mu.Unlock()
	return tok.AccessToken, nil
}

// remember keeps a secret of the caller's for redaction: the last maxCallerSecrets of
// them, in a new list for every one.
func (e *callerEntry) remember(secret string) { e.secrets.add(secret, maxCallerSecrets) }

// secretList returns the caller's secrets, for the redactor.
func (e *callerEntry) secretList() *secretList { return e.secrets.get() }

// asCallerError turns what a fetch returned into an *Error with Authentication set.
func asCallerError(err error) *Error {
	e := classify(err, nil)
	if e.Authentication != "" {
		return e
	}
	out := *e
	out.Authentication = ReasonTokenRequestFailed
	return &out
}

// callerFetcher obtains one upstream token for its entry's caller; the
// oauth2.ReuseTokenSourceWithExpiry around it calls it when the token is due.
type callerFetcher struct{ e *callerEntry }

// Token implements oauth2.TokenSource.
func (f *callerFetcher) Token() (*oauth2.Token, error) {
	e := f.e
	e.fetchMu.Lock()
	defer e.fetchMu.Unlock()
	e.mu.Lock()
	subject, expiry := e.subject, e.expiry
	e.mu.Unlock()
	if subject == "" || (!expiry.IsZero() && !time.Now().Before(expiry)) {
		return nil, callerExpired()
	}
	issued := time.Now()
	tok, err := e.tokens.fetch(subject, e.remember)
	if err != nil {
		return nil, err
	}
	// Only what the stack needs: the response's other members may hold more secrets.
	out := &oauth2.Token{AccessToken: tok.AccessToken, TokenType: "Bearer", Expiry: tok.Expiry}
	if out.Expiry.IsZero() {
		out.Expiry = issued.Add(maxUnknownTokenLife)
	}
	// Never used past the caller's own token.
	if !expiry.IsZero() && expiry.Before(out.Expiry) {
		out.Expiry = expiry
	}
	// Replace a short-lived token at half its life rather than on every request.
	if life := out.Expiry.Sub(issued); life < 2*tokenRefreshMargin {
		out.Expiry = issued.Add(life/2 + tokenRefreshMargin)
	}
	return out, nil
}

// callerBearer is the bearer source of one Upstream acting for one caller.
type callerBearer struct {
	tokens *callerTokens
	caller string

	mu    sync.Mutex
	entry *callerEntry
	// merged is the caller's secrets with the session's issued ones, for the
	// Upstream's redactor; rebuilt when either list changes.
	mergedFrom [2]*secretList
	merged     *secretList
}

// live returns the caller's cache entry, putting the Upstream's back if it was evicted.
func (b *callerBearer) live() *callerEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.entry = b.tokens.cache.getOrAdd(callerCacheKey{b.tokens, b.caller}, b.entry)
	return b.entry
}

func (b *callerBearer) current() (string, *Error) { return b.live().current() }

func (b *callerBearer) renew(rejected string, ch oauth.Challenge) (string, *Error) {
	return b.live().renew(rejected, ch)
}

func (b *callerBearer) insufficientScope(ch oauth.Challenge) *Error {
	asked := "a scope it did not name"
	if ch.Scope != "" {
		asked = fmt.Sprintf("scope %q", TruncateUTF8(ch.Scope, 256))
	}
	return authError(ReasonInsufficientScope, ReasonInsufficientScope,
		"server %s answered insufficient_scope: it asks for %s; the caller's token was requested with %s",
		displayURL(b.tokens.endpoint), asked, oauth.ScopeText(b.tokens.scopes()))
}

func (b *callerBearer) tokenEndpoint() string {
	if u := b.tokens.upstreamTokenURL(); u != nil {
		return oauth.Origin(u)
	}
	return "the caller's exchange"
}

// redactor returns the Upstream's redactor: the session's configured secrets, and its
// issued ones together with the caller's.
func (b *callerBearer) redactor(session redactor) redactor {
	return redactor{configured: session.configured, issued: func() *secretList {
		own := &noSecrets
		if session.issued != nil {
			own = session.issued()
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		theirs := b.entry.secretList()
		if b.merged == nil || b.mergedFrom != [2]*secretList{own, theirs} {
			l := newSecretList(append(slices.Clone(own.text), theirs.text...))
			b.merged, b.mergedFrom = &l, [2]*secretList{own, theirs}
		}
		return b.merged
	}}
}

// callerCacheKey names one caller's entry: the server config (its callerTokens, which
// also names the server's namespace and name) and the caller's stable identity.
type callerCacheKey struct {
	tokens *callerTokens
	caller string
}

// callerCache is the pool's LRU of caller entries, bounded in entries overall. An
// Upstream that holds an evicted entry puts it back on its next request.
type callerCache struct {
	mu  sync.Mutex
	max int
	ll  *list.List // of *callerCacheItem, most recently used first
	m   map[callerCacheKey]*list.Element
}

type callerCacheItem struct {
	key   callerCacheKey
	entry *callerEntry
}

func newCallerCache(max int) *callerCache {
	if max <= 0 {
		max = DefaultMaxCallerTokens
	}
	return &callerCache{max: max, ll: list.New(), m: make(map[callerCacheKey]*list.Element)}
}

// getOrAdd returns the entry of k, making e (when not nil) the entry if there is none;
// for a config that is gone it returns e and keeps nothing.
func (c *callerCache) getOrAdd(k callerCacheKey, e *callerEntry) *callerEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[k]; ok {
		c.ll.MoveToFront(el)
		return el.Value.(*callerCacheItem).entry
	}
	if e == nil || k.tokens.closed {
		return e
	}
	c.m[k] = c.ll.PushFront(&callerCacheItem{key: k, entry: e})
	for c.ll.Len() > c.max {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.m, last.Value.(*callerCacheItem).key)
	}
	return e
}

// purge forgets every entry of a server config.
func (c *callerCache) purge(t *callerTokens) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t.closed = true
	for el := c.ll.Front(); el != nil; {
		next := el.Next()
		if it := el.Value.(*callerCacheItem); it.key.tokens == t {
			c.ll.Remove(el)
			delete(c.m, it.key)
		}
		el = next
	}
}

// len returns the number of entries.
func (c *callerCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

// PerCaller reports whether the upstream credentials of the server key names follow the
// caller, so that the gateway must name the caller to [Pool.OpenUpstream] and present
// its newest token with [Pool.PresentCaller].
func (p *Pool) PerCaller(key Key) bool {
	s := p.current(key)
	return s != nil && (s.cfg.PerCaller != nil || s.cfg.PerUser != nil)
}

// PresentCaller hands the connector the caller's newest token before a request on a
// per-caller server, so that renewals exchange a live token. A token that has expired
// drops the caller's upstream tokens for the server. It does nothing for other servers.
func (p *Pool) PresentCaller(key Key, caller Caller) {
	s := p.current(key)
	if s == nil || s.callers == nil || caller.Key == "" {
		return
	}
	s.callers.present(caller)
}

// watchMetadata is the life of the session of a per-caller server without an operator
// credential: it cannot call the server, and never acts as a caller, so it checks what
// it can (the server's protected resource metadata and its authorization server's
// metadata, through the session's stack) at every probe interval, and reports the
// tools as discovered per caller.
func (s *session) watchMetadata() {
	transport := TransportStreamableHTTP
	if s.cfg.Protocol == ProtocolSSE {
		transport = TransportSSE
	}
	// Upstreams open on the transport assumed, whatever the checks say.
	s.update(func(snap *Snapshot) {
		snap.Transport = transport
		snap.ToolsPerCaller = true
	})
	attempt := 0
	for {
		e := s.checkMetadata()
		if s.ctx.Err() != nil {
			return
		}
		delay := s.cfg.HealthCheck.Interval
		if e != nil {
			attempt++
			s.mu.Lock()
			ready := s.snap.State == StateReady
			s.mu.Unlock()
			if ready {
				s.probeFailed(e)
			} else {
				s.fail(e, true)
			}
			delay = s.pool.backoff(attempt)
		} else {
			attempt = 0
			s.mu.Lock()
			wasReady := s.snap.State == StateReady
			s.mu.Unlock()
			if !wasReady {
				s.logger().Info("Server metadata checked; tools are discovered per caller")
			}
			s.update(func(snap *Snapshot) {
				snap.State = StateReady
				if snap.ConnectedAt.IsZero() {
					snap.ConnectedAt = time.Now()
				}
				snap.LastError = nil
				snap.ConsecutiveFailures = 0
			})
		}
		s.settle()
		if !s.sleep(delay) {
			return
		}
	}
}

// checkMetadata fetches the server's protected resource metadata and its authorization
// server's metadata; the enterprise flow keeps what it found for its callers.
func (s *session) checkMetadata() *Error {
	if s.users != nil {
		_, e := s.users.metadata(true)
		return s.red.scrubError(e)
	}
	c := s.callers
	if e := c.allowRequest(); e != nil {
		return s.red.scrubError(e)
	}
	m, e := c.ts.discover(oauth.Challenge{})
	if e != nil {
		return s.red.scrubError(e)
	}
	if c.enterprise() {
		if e := c.allowAuthServer(m); e != nil {
			c.meta.Store(nil)
			return s.red.scrubError(e)
		}
		c.meta.Store(m) // what the callers' next exchanges name as the audience
	}
	return nil
}
