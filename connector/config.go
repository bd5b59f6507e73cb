package connector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/switchboard-mcp/switchboard/connector/oauth"
	"github.com/switchboard-mcp/switchboard/egress"
)

// Key names one server: the namespace and name of its MCPServer object.
type Key struct {
	// Namespace is the server's namespace.
	Namespace string
	// Name is the server's name.
	Name string
}

// String returns "namespace/name".
func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Protocol selects the MCP transport.
type Protocol string

const (
	// ProtocolAuto tries Streamable HTTP first and falls back to the legacy HTTP+SSE
	// transport as the MCP specification's backward-compatibility procedure describes.
	ProtocolAuto Protocol = "Auto"
	// ProtocolStreamableHTTP is the Streamable HTTP transport (2025-03-26 and later).
	ProtocolStreamableHTTP Protocol = "StreamableHTTP"
	// ProtocolSSE is the legacy HTTP+SSE transport (2024-11-05).
	ProtocolSSE Protocol = "SSE"
)

// Header is one configured request header, its value already resolved from a Secret
// where the spec referenced one. Values are secrets: they are only ever sent to the
// configured origin and never appear in errors, snapshots or logs.
type Header struct {
	// Name is the canonical or literal header name.
	Name string
	// Value is the header value.
	Value string
}

// HealthCheck configures the session probe.
type HealthCheck struct {
	// Interval is the time between probes. Zero means 30s.
	Interval time.Duration
	// FailureThreshold is how many consecutive probe failures mark the session down and
	// start a reconnect. Zero means 3.
	FailureThreshold int
}

// Limits bound what a server may send. Zero fields take the defaults documented on each.
type Limits struct {
	// MaxResponseBytes bounds one HTTP response body that is not an event stream.
	// Zero means 8 MiB.
	MaxResponseBytes int64
	// MaxEventBytes bounds one server-sent event. Zero means 4 MiB.
	MaxEventBytes int
	// MaxDescriptionBytes cuts tool, resource and prompt descriptions (on a UTF-8
	// boundary). Zero means 1 KiB.
	MaxDescriptionBytes int
	// MaxItems bounds the items of one list (tools, resources, templates or prompts).
	// Zero means 10,000.
	MaxItems int
	// MaxPages bounds the pages of one list. Zero means 100.
	MaxPages int
	// MaxDiscoveryBytes bounds what is kept of all lists together (names, descriptions,
	// schemas), so that many pages of huge schemas cannot exhaust memory. Zero means
	// 32 MiB.
	MaxDiscoveryBytes int64
	// MaxRedirects bounds the redirect hops of one request, whatever the egress decider
	// allows. Zero means 5.
	MaxRedirects int
}

// Resolver resolves host names for the connector's dialer. *net.Resolver implements
// it; tests inject their own to simulate DNS rebinding or failures.
type Resolver interface {
	// LookupNetIP looks up host, returning its addresses for network "ip", "ip4" or "ip6".
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config is everything the connector needs to hold a session to one server. Controllers
// build it from the MCPServer spec with secrets resolved; it carries no Kubernetes types.
type Config struct {
	// URL is the server endpoint, http or https. Its query string is treated as a secret.
	URL string
	// Instance names the version of the server behind URL, where the caller knows one
	// (a stdio server's serving ReplicaSet). A new Instance starts a new session, as a
	// new URL does: a server that was fixed is connected at once, not after the broken
	// version's reconnect backoff, which may have grown to MaxBackoff.
	Instance string
	// Protocol selects the transport; empty means [ProtocolAuto].
	Protocol Protocol
	// Headers are sent on every request to the URL's origin and to no other origin.
	Headers []Header
	// CABundle is PEM-encoded certificates trusted in addition to the system roots.
	CABundle []byte
	// Timeout bounds each MCP request. Zero means 30s.
	Timeout time.Duration
	// ConnectTimeout bounds establishing a session: dial, TLS, transport detection and
	// the initialize or discover exchange. Zero means Timeout.
	ConnectTimeout time.Duration
	// HealthCheck configures the probe.
	HealthCheck HealthCheck
	// Limits bound what the server may send.
	Limits Limits
	// Egress decides dials and redirect hops. Nil means [DefaultEgressDecider]. Changing
	// only the decider does not reconnect; the session's live destinations are checked
	// against the new decider and the session is dropped if one is now denied. Idle
	// keep-alive connections are closed, and an open connection is judged again before
	// its next read or write, so no request travels over a connection the new decider
	// would not open.
	Egress EgressDecider
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
	// OAuth2 obtains OAuth access tokens for the server with the client credentials
	// grant and sends them as bearer tokens to the URL's origin. Nil sends none. It is
	// the operator's own credential: beside PerCaller, the pool's session (discovery,
	// probes, status) uses it, and the gateway's Upstreams never do.
	OAuth2 *OAuth2ClientCredentials
	// WorkloadIdentity obtains OAuth access tokens for the server with the JWT-bearer
	// grant (RFC 7523), presenting a workload JWT instead of a client secret, and sends
	// them as OAuth2's are. Nil sends none. At most one of OAuth2 and WorkloadIdentity
	// is set.
	WorkloadIdentity *OAuth2WorkloadIdentity
	// PerCaller makes the gateway's Upstreams present, for each caller, a token obtained
	// by exchanging the caller's own token (see [PerCallerAuth]). Nil means every
	// Upstream presents the server's own credentials.
	PerCaller *PerCallerAuth
	// PerUser makes each person authorize the server at its own authorization server
	// (see [PerUser], [UserAuthorizer]). Nil means nobody is asked to.
	PerUser *PerUser
}

// Token endpoint client authentication methods (RFC 7591, RFC 7523).
const (
	// AuthMethodClientSecretBasic sends the client secret in HTTP Basic authentication.
	AuthMethodClientSecretBasic = oauth.AuthMethodClientSecretBasic
	// AuthMethodClientSecretPost sends the client secret in the request body.
	AuthMethodClientSecretPost = oauth.AuthMethodClientSecretPost
	// AuthMethodPrivateKeyJWT sends a client assertion signed with the private key.
	AuthMethodPrivateKeyJWT = oauth.AuthMethodPrivateKeyJWT
	// AuthMethodNone sends no client secret: client_id alone in the request body, when
	// there is one. The JWT-bearer grant of workload identity authenticates with its
	// assertion.
	AuthMethodNone = oauth.AuthMethodNone
)

// AssertionSource supplies the workload JWT a JWT-bearer grant presents: a
// ServiceAccount token requested for the audience, or a JWT another system issues.
// Implementations must be comparable, and equal exactly when they supply the same
// identity (a pointer per server, say): Ensure keeps a session whose source is the
// same value, and a source that re-reads its JWT keeps the session across rotations.
type AssertionSource interface {
	// Assertion returns a JWT for audience, the authorization server's issuer
	// identifier (its token endpoint when that is configured and no issuer pinned). A
	// source whose JWTs name their own audience ignores it. It is called when a token is
	// due, not per request. An error that is an *Error keeps its reason (set its
	// Authentication to ReasonWorkloadTokenUnavailable); any other is reported with
	// ReasonWorkloadTokenUnavailable. Errors never carry the JWT.
	Assertion(ctx context.Context, audience string) (string, error)
}

// OAuth2WorkloadIdentity configures the JWT-bearer grant with a workload JWT (RFC 7523,
// the MCP workload identity federation extension, SEP-1933). Discovery, bounds,
// redirect checks and redaction are those of OAuth2ClientCredentials; the assertion is
// sent to the token endpoint only, and never again after the token endpoint refused it
// (not within ten minutes, and not with another grant).
type OAuth2WorkloadIdentity struct {
	// Assertion supplies the workload JWT. Required.
	Assertion AssertionSource
	// ClientID, when set, is sent as client_id with the grant.
	ClientID string
	// Scopes are requested in the token request; empty discovers them as for
	// OAuth2ClientCredentials.
	Scopes []string
	// TokenURL is the token endpoint. Empty discovers it from the server's metadata.
	TokenURL string
	// Issuer, when set, pins the authorization server as OAuth2ClientCredentials.Issuer
	// does; it is also the assertion's audience.
	Issuer string
	// AllowInsecureHTTP is OAuth2ClientCredentials.AllowInsecureHTTP.
	AllowInsecureHTTP bool
}

// equal reports whether w and v configure the same token source.
func (w *OAuth2WorkloadIdentity) equal(v *OAuth2WorkloadIdentity) bool {
	if w == nil || v == nil {
		return w == nil && v == nil
	}
	return sameValue(w.Assertion, v.Assertion) && w.ClientID == v.ClientID &&
		slices.Equal(w.Scopes, v.Scopes) && w.TokenURL == v.TokenURL && w.Issuer == v.Issuer &&
		w.AllowInsecureHTTP == v.AllowInsecureHTTP
}

// OAuth2ClientCredentials configures the client credentials grant (OAuth 2.1, the MCP
// authorization extension for machine-to-machine clients). Discovery (RFC 9728, RFC
// 8414, OpenID discovery) and the token request go through the session's own dialer and
// redirect checks; tokens live in memory only.
type OAuth2ClientCredentials struct {
	// ClientID identifies the client to the authorization server.
	ClientID string
	// ClientSecret authenticates the client (client_secret_basic or _post). Exactly one
	// of ClientSecret and PrivateKey is set.
	ClientSecret string
	// PrivateKey is a PEM private key (EC P-256 for ES256, RSA for RS256) that signs a
	// fresh client assertion for every token request (private_key_jwt, RFC 7523).
	PrivateKey []byte
	// AuthMethod is one of the AuthMethod constants; empty picks one from the
	// authorization server's metadata and the credential given.
	AuthMethod string
	// Scopes are requested in the token request. Empty means the scope of the server's
	// WWW-Authenticate challenge, else its metadata's scopes_supported, else none.
	Scopes []string
	// TokenURL is the token endpoint. Empty discovers it from the server's metadata.
	TokenURL string
	// Issuer, when set, pins the authorization server: discovery goes on only when the
	// server's protected resource metadata lists exactly this issuer among its
	// authorization servers, and that server's metadata names it as its issuer;
	// otherwise the session fails with ReasonMetadataMismatch and no credential is sent
	// anywhere. Empty trusts the authorization server the MCP server names.
	Issuer string
	// AllowInsecureHTTP permits plain http metadata URLs and a plain http token
	// endpoint on a loopback address. The credential is never sent over plain http to
	// any other address.
	AllowInsecureHTTP bool
}

// equal reports whether o and p configure the same token source.
func (o *OAuth2ClientCredentials) equal(p *OAuth2ClientCredentials) bool {
	if o == nil || p == nil {
		return o == nil && p == nil
	}
	return o.ClientID == p.ClientID && o.ClientSecret == p.ClientSecret &&
		bytes.Equal(o.PrivateKey, p.PrivateKey) && o.AuthMethod == p.AuthMethod &&
		slices.Equal(o.Scopes, p.Scopes) && o.TokenURL == p.TokenURL && o.Issuer == p.Issuer &&
		o.AllowInsecureHTTP == p.AllowInsecureHTTP
}

// Defaults used where a Config or Limits field is zero.
const (
	DefaultTimeout             = 30 * time.Second
	DefaultProbeInterval       = 30 * time.Second
	DefaultFailureThreshold    = 3
	DefaultMaxResponseBytes    = 8 << 20
	DefaultMaxEventBytes       = 4 << 20
	DefaultMaxDescriptionBytes = 1 << 10
	DefaultMaxItems            = 10_000
	DefaultMaxPages            = 100
	DefaultMaxDiscoveryBytes   = 32 << 20
	DefaultMaxRedirects        = 5
)

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Protocol == "" {
		c.Protocol = ProtocolAuto
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = c.Timeout
	}
	if c.HealthCheck.Interval <= 0 {
		c.HealthCheck.Interval = DefaultProbeInterval
	}
	if c.HealthCheck.FailureThreshold <= 0 {
		c.HealthCheck.FailureThreshold = DefaultFailureThreshold
	}
	l := &c.Limits
	if l.MaxResponseBytes <= 0 {
		l.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if l.MaxEventBytes <= 0 {
		l.MaxEventBytes = DefaultMaxEventBytes
	}
	if l.MaxDescriptionBytes <= 0 {
		l.MaxDescriptionBytes = DefaultMaxDescriptionBytes
	}
	if l.MaxItems <= 0 {
		l.MaxItems = DefaultMaxItems
	}
	if l.MaxPages <= 0 {
		l.MaxPages = DefaultMaxPages
	}
	if l.MaxDiscoveryBytes <= 0 {
		l.MaxDiscoveryBytes = DefaultMaxDiscoveryBytes
	}
	if l.MaxRedirects <= 0 {
		l.MaxRedirects = DefaultMaxRedirects
	}
	if c.Egress == nil {
		c.Egress = DefaultEgressDecider()
	}
	return c
}

// validate checks what admission cannot: that the URL parses into something dialable.
// Its errors never carry the query string.
func (c Config) validate() (*url.URL, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, errors.New("endpoint URL does not parse")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("endpoint URL scheme %q is not http or https", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("endpoint URL has no host")
	}
	switch c.Protocol {
	case ProtocolAuto, ProtocolStreamableHTTP, ProtocolSSE:
	default:
		return nil, fmt.Errorf("unknown protocol %q", c.Protocol)
	}
	if c.OAuth2 != nil && c.WorkloadIdentity != nil {
		return nil, errors.New("OAuth client credentials and workload identity are mutually exclusive")
	}
	return u, nil
}

// sameSession reports whether a and b describe the same session, so that Ensure with b
// may keep the session built from a. The egress decider is compared by the session
// itself (it is swapped in place), not here.
func sameSession(a, b Config) bool {
	return a.URL == b.URL &&
		a.Instance == b.Instance &&
		a.Protocol == b.Protocol &&
		slices.Equal(a.Headers, b.Headers) &&
		bytes.Equal(a.CABundle, b.CABundle) &&
		a.Timeout == b.Timeout &&
		a.ConnectTimeout == b.ConnectTimeout &&
		a.HealthCheck == b.HealthCheck &&
		a.Limits == b.Limits &&
		sameValue(a.Resolver, b.Resolver) &&
		a.OAuth2.equal(b.OAuth2) &&
		a.WorkloadIdentity.equal(b.WorkloadIdentity) &&
		a.PerCaller.equal(b.PerCaller) &&
		a.PerUser.equal(b.PerUser)
}

// sameDecision reports whether two egress deciders allow the same connections: equal
// egress rules, or the very same decider value.
func sameDecision(a, b EgressDecider) bool {
	if ra, ok := a.(*egress.ServerRules); ok {
		rb, ok := b.(*egress.ServerRules)
		return ok && ra.Equal(rb)
	}
	return sameValue(a, b)
}

// sameValue compares two interface values without panicking on types that cannot be
// compared (a struct holding a slice, say); such values are never the same.
func sameValue(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	t := reflect.TypeOf(a)
	if t != reflect.TypeOf(b) || !t.Comparable() {
		return false
	}
	return a == b
}

// secrets returns the strings that must never appear in anything the connector emits:
// header values, the URL's raw query, its query values and its userinfo.
func (c Config) secrets() []string {
	var out []string
	add := func(s string) {
		// Very short values would mangle messages when redacted, and cannot be told
		// apart from ordinary words anyway.
		if len(strings.TrimSpace(s)) >= 3 {
			out = append(out, s)
		}
	}
	for _, h := range c.Headers {
		add(h.Value)
		// "Bearer <token>": also redact the token alone, in case a layer prints it.
		if _, tok, ok := strings.Cut(h.Value, " "); ok {
			add(tok)
		}
	}
	// A URL's query and userinfo may carry credentials: the server's, and the token
	// endpoint's, whose full URL a failed token request's error can print.
	addURL := func(raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		add(u.RawQuery)
		for _, vs := range u.Query() {
			for _, v := range vs {
				add(v)
			}
		}
		if u.User != nil {
			add(u.User.String())
			if p, ok := u.User.Password(); ok {
				add(p)
			}
		}
	}
	addURL(c.URL)
	if w := c.WorkloadIdentity; w != nil {
		addURL(w.TokenURL)
	}
	if o := c.OAuth2; o != nil {
		addURL(o.TokenURL)
		add(o.ClientSecret)
		// Every line of the key's PEM body, and the whole of it.
		add(string(o.PrivateKey))
		for line := range strings.Lines(string(o.PrivateKey)) {
			if line = strings.TrimSpace(line); !strings.HasPrefix(line, "-----") && len(line) >= 16 {
				add(line)
			}
		}
	}
	if pc := c.PerCaller; pc != nil {
		for _, v := range pc.secrets() {
			add(v)
		}
		for _, raw := range pc.tokenURLs() {
			addURL(raw)
		}
	}
	if pu := c.PerUser; pu != nil {
		add(pu.ClientSecret)
	}
	// Longest first, so a value that contains another is redacted whole.
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// displayURL prints u as scheme://host:port/path: no userinfo, no query, no fragment.
func displayURL(u *url.URL) string { return oauth.DisplayURL(u) }

// DisplayURL returns the endpoint as scheme://host:port/path, fit for status and logs:
// no userinfo, no query string, no fragment. It returns "" when raw does not parse.
func DisplayURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return displayURL(u)
}
