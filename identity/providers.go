package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"k8s.io/apimachinery/pkg/util/cache"
)

// Options tune Providers. The zero value of a field takes its default.
type Options struct {
	// Timeout bounds each request to an issuer. Default 10s.
	Timeout time.Duration
	// KeySetMinRefresh is the least time between two fetches of one issuer's key set.
	// A token signed with a key id not yet seen makes the key set be fetched again
	// (how rotation is picked up), at most this often. Default 10s.
	KeySetMinRefresh time.Duration
	// IntrospectionTTL bounds how long an active introspection answer is reused; never
	// past the token's exp. Default 1m.
	IntrospectionTTL time.Duration
	// IntrospectionNegativeTTL is how long a refusal by introspection (inactive, wrong
	// audience, expired) is reused. Default 10s.
	IntrospectionNegativeTTL time.Duration
	// IntrospectionCacheSize bounds the introspection answers kept. Default 10000.
	IntrospectionCacheSize int
	// MaxConcurrentIntrospections bounds the introspection requests in flight to all
	// issuers together. Default 16.
	MaxConcurrentIntrospections int
	// VerifiedJWTTTL bounds how long a verified JWT is remembered (by digest, never past
	// its exp), so that a caller presenting one token per request costs one signature
	// check per TTL rather than one per request. Default 10s.
	VerifiedJWTTTL time.Duration
	// VerifiedJWTCacheSize bounds the verified JWTs remembered. Default 10000.
	VerifiedJWTCacheSize int
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Timeout, 10*time.Second)
	def(&o.KeySetMinRefresh, 10*time.Second)
	def(&o.IntrospectionTTL, time.Minute)
	def(&o.IntrospectionNegativeTTL, 10*time.Second)
	def(&o.VerifiedJWTTTL, 10*time.Second)
	if o.IntrospectionCacheSize <= 0 {
		o.IntrospectionCacheSize = 10000
	}
	if o.VerifiedJWTCacheSize <= 0 {
		o.VerifiedJWTCacheSize = 10000
	}
	if o.MaxConcurrentIntrospections <= 0 {
		o.MaxConcurrentIntrospections = 16
	}
	return o
}

// maxTokenBytes bounds the tokens Authenticate looks at.
const maxTokenBytes = 16 << 10

// signingAlgorithms are the JWT signature algorithms accepted: asymmetric only (never
// HS* with a key anyone holding the key set could forge, never none). The key's type
// decides which of them verifies a given token.
var signingAlgorithms = []string{
	oidc.RS256, oidc.RS384, oidc.RS512,
	oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.PS256, oidc.PS384, oidc.PS512,
	oidc.EdDSA,
}

// Providers verifies the tokens of the applied MCPIdentityProviders. It is safe for
// concurrent use; Apply and Forget are the controller's, Authenticate the gateway's and
// the catalogue's.
type Providers struct {
	opts Options

	mu       sync.RWMutex
	byName   map[string]*provider
	byIssuer map[string]*provider
	// epoch counts Apply and Forget calls: verified JWTs and introspection answers are
	// remembered per epoch, so none outlives a change of the providers that judged it.
	epoch uint64

	verified       *cache.LRUExpireCache // epoch/token digest -> *Caller
	introspections *introspector
}

// NewProviders returns Providers with none applied.
func NewProviders(opts Options) *Providers {
	opts = opts.withDefaults()
	return &Providers{
		opts:           opts,
		byName:         make(map[string]*provider),
		byIssuer:       make(map[string]*provider),
		verified:       cache.NewLRUExpireCache(opts.VerifiedJWTCacheSize),
		introspections: newIntrospector(opts),
	}
}

// provider is one applied ProviderConfig: immutable once built.
type provider struct {
	cfg      ProviderConfig
	client   *http.Client
	keySet   *keySetTransport
	verifier *oidc.IDTokenVerifier
	rules    []compiledRule
	// introspectionURL is the issuer's introspection endpoint, "" without
	// Introspection.
	introspectionURL string
}

// Apply fetches cfg's discovery document and key set now and, when both are usable,
// makes Authenticate accept the tokens of cfg.Name under cfg from then on, replacing
// what was applied under that name before. When Apply fails, the tokens of cfg.Name are
// refused until an Apply succeeds: a provider that is not Ready admits no one. Its error
// is an *ApplyError with a message a person can act on.
//
// No two applied providers ever conflict (see Conflicts): Apply refuses cfg while an
// older applied provider conflicts with it (a Transient *ApplyError whose Reason is
// IssuerConflict, PrefixConflict or TokenPrefixConflict), and an applied provider
// younger than cfg that conflicts with it is forgotten when cfg is applied. The
// controller decides who is applied from every provider that exists; this keeps the
// promise while its decisions reach Apply and Forget one at a time.
func (ps *Providers) Apply(ctx context.Context, cfg ProviderConfig) error {
	ps.mu.RLock()
	conflict := ps.olderConflictLocked(&cfg)
	ps.mu.RUnlock()
	if conflict != nil {
		ps.Forget(cfg.Name)
		return conflict
	}
	p, err := ps.build(ctx, cfg)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err != nil {
		ps.forgetLocked(cfg.Name)
		return err
	}
	if conflict := ps.olderConflictLocked(&cfg); conflict != nil {
		ps.forgetLocked(cfg.Name)
		return conflict
	}
	claim := cfg.claim()
	for name, other := range ps.byName {
		if name != cfg.Name && conflictBetween(claim, other.cfg.claim()) != nil {
			ps.forgetLocked(name)
		}
	}
	ps.forgetLocked(cfg.Name)
	ps.byName[cfg.Name] = p
	ps.byIssuer[cfg.IssuerURL] = p
	return nil
}

// olderConflictLocked returns why cfg may not be applied beside an applied provider
// older than it, or nil.
func (ps *Providers) olderConflictLocked(cfg *ProviderConfig) *ApplyError {
	claim := cfg.claim()
	var oldest *Claim
	var why *Conflict
	for name, other := range ps.byName {
		o := other.cfg.claim()
		if name == cfg.Name || !older(o, claim) || (oldest != nil && !older(o, *oldest)) {
			continue
		}
		if c := conflictBetween(o, claim); c != nil {
			oldest, why = &o, c
		}
	}
	if why == nil {
		return nil
	}
	// Transient: the older provider may be deleted or changed.
	return applyErr(why.Reason, true, "%s", why.Message)
}

// Forget stops accepting the tokens of the provider named name.
func (ps *Providers) Forget(name string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.forgetLocked(name)
}

func (ps *Providers) forgetLocked(name string) {
	ps.epoch++
	p, ok := ps.byName[name]
	if !ok {
		return
	}
	delete(ps.byName, name)
	if ps.byIssuer[p.cfg.IssuerURL] == p {
		delete(ps.byIssuer, p.cfg.IssuerURL)
	}
	p.client.CloseIdleConnections()
}

// Advertised returns the issuers of the applied providers with Advertise set, sorted:
// the authorization servers protected resource metadata (RFC 9728) lists.
func (ps *Providers) Advertised() []string {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	var out []string
	for _, p := range ps.byName {
		if p.cfg.Advertise {
			out = append(out, p.cfg.IssuerURL)
		}
	}
	slices.Sort(out)
	return out
}

// Handles reports whether token is for one of the applied providers: a JWT whose
// (unverified) issuer is one of theirs, or an opaque token some provider introspects
// (see Introspection.TokenPrefix). The gateway asks it to send a token to Authenticate
// or to TokenReview, without a network call.
func (ps *Providers) Handles(token string) bool {
	if len(token) == 0 || len(token) > maxTokenBytes {
		return false
	}
	if !looksLikeJWT(token) {
		return !kubernetesBootstrapToken.MatchString(token) && ps.introspectorFor(token) != nil
	}
	claims, err := parseUnverified(token)
	if err != nil {
		return false
	}
	iss, _ := claims["iss"].(string)
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	_, ok := ps.byIssuer[iss]
	return ok
}

// introspectorFor returns the one applied provider that introspects token: the one whose
// token prefix is the longest that begins it, else the one without a token prefix; nil
// when none does. No two applied providers have the same token prefix (Apply keeps them
// apart), so the choice is never a tie.
func (ps *Providers) introspectorFor(token string) *provider {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	var best *provider
	for _, p := range ps.byName {
		in := p.cfg.Introspection
		if in == nil || !strings.HasPrefix(token, in.TokenPrefix) {
			continue
		}
		if best == nil || len(in.TokenPrefix) > len(best.cfg.Introspection.TokenPrefix) {
			best = p
		}
	}
	return best
}

// Authenticate returns who token says the caller is, or a *TokenError: matching
// ErrUnauthenticated when the token is refused (401), ErrIssuerUnavailable when its
// issuer could not be asked (503). A JWT is judged by the provider its (unverified)
// issuer names, alone: signature by a key that issuer publishes, iss exactly, aud one of
// the provider's audiences, exp and nbf, then the claim mappings and validation rules.
// Any other token is judged by introspection at the one provider that introspects
// tokens that begin as it does (see Introspection.TokenPrefix), and sent to no other.
func (ps *Providers) Authenticate(ctx context.Context, token string) (*Caller, error) {
	if token == "" {
		return nil, refuse("", ReasonMalformed, "no token")
	}
	if len(token) > maxTokenBytes {
		return nil, refuse("", ReasonMalformed, "the token is longer than %d KiB", maxTokenBytes>>10)
	}
	if looksLikeJWT(token) {
		return ps.authenticateJWT(ctx, token)
	}
	return ps.authenticateOpaque(ctx, token)
}

// kubernetesBootstrapToken is the shape of a Kubernetes bootstrap token (id.secret).
// Such a token is the cluster's, not an issuer's: it is never sent to an introspection
// endpoint, where it would leak to the identity provider.
var kubernetesBootstrapToken = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)

// looksLikeJWT reports whether token has the shape of a compact JWS: three parts.
func looksLikeJWT(token string) bool {
	return strings.Count(token, ".") == 2
}

// parseUnverified decodes a JWT's payload without verifying anything, to route it to
// the provider of its issuer and to read its claims once.
func parseUnverified(token string) (map[string]any, error) {
	jws, err := parseJWS(token)
	if err != nil {
		return nil, err
	}
	return decodeClaims(jws.UnsafePayloadWithoutVerification())
}

func (ps *Providers) authenticateJWT(ctx context.Context, token string) (*Caller, error) {
	key := ps.cacheKey(token)
	if v, ok := ps.verified.Get(key); ok {
		return v.(*Caller).clone(), nil
	}
	claims, err := parseUnverified(token)
	if err != nil {
		return nil, refuse("", ReasonMalformed, "the token is not a well-formed JWT")
	}
	iss, _ := claims["iss"].(string)
	ps.mu.RLock()
	p := ps.byIssuer[iss]
	ps.mu.RUnlock()
	if p == nil {
		return nil, refuse("", ReasonUnknownIssuer, "no identity provider has the token's issuer")
	}
	caller, exp, err := p.verifyJWT(ctx, token, claims)
	if err != nil {
		return nil, err
	}
	caller.Expiry = exp
	if ttl := min(ps.opts.VerifiedJWTTTL, time.Until(exp)); ttl > 0 {
		ps.verified.Add(key, caller.clone(), ttl)
	}
	return caller, nil
}

// cacheKey is the key token's verdict is remembered under: the current epoch and the
// token's digest, never the token.
func (ps *Providers) cacheKey(token string) string {
	ps.mu.RLock()
	epoch := ps.epoch
	ps.mu.RUnlock()
	digest := tokenDigest(token)
	return fmt.Sprintf("%d/%s", epoch, hex.EncodeToString(digest[:]))
}

// verifyJWT verifies token, whose claims were decoded once already, with p alone, and
// returns the caller and the token's expiry.
func (p *provider) verifyJWT(ctx context.Context, token string, claims map[string]any) (*Caller, time.Time, error) {
	name := p.cfg.Name
	note := &keySetNote{}
	idt, err := p.verifier.Verify(context.WithValue(ctx, keySetNoteKey{}, note), token)
	if err != nil {
		var expired *oidc.TokenExpiredError
		switch {
		case note.unavailable:
			return nil, time.Time{}, unavailable(name, "the issuer's key set could not be fetched to check the token's signature")
		case note.badSignature:
			return nil, time.Time{}, refuse(name, ReasonBadSignature, "the token is not signed by a key the issuer publishes")
		case errors.As(err, &expired):
			return nil, time.Time{}, refuse(name, ReasonExpired, "the token has expired")
		case claims["nbf"] != nil:
			return nil, time.Time{}, refuse(name, ReasonNotYetValid, "the token is not valid yet (nbf)")
		default:
			return nil, time.Time{}, refuse(name, ReasonMalformed, "the token is not a valid JWT of this issuer")
		}
	}
	if !slices.ContainsFunc(idt.Audience, func(a string) bool { return slices.Contains(p.cfg.Audiences, a) }) {
		return nil, time.Time{}, refuse(name, ReasonWrongAudience, "the token is not for this audience (aud names none of the provider's audiences)")
	}
	caller, err := p.mapCaller(ctx, claims)
	if err != nil {
		return nil, time.Time{}, err
	}
	return caller, idt.Expiry, nil
}

// keySetNote records, for one verification, whether the key set failed it and how.
type keySetNote struct {
	unavailable  bool
	badSignature bool
}

type keySetNoteKey struct{}

// noteKeySet wraps go-oidc's remote key set to tell a verification's caller whether the
// signature was wrong or the key set could not be fetched: go-oidc's own error says
// neither in a form errors.As can read.
type noteKeySet struct{ remote *oidc.RemoteKeySet }

// VerifySignature implements oidc.KeySet.
func (k noteKeySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	payload, err := k.remote.VerifySignature(ctx, jwt)
	if err != nil {
		if note, ok := ctx.Value(keySetNoteKey{}).(*keySetNote); ok {
			var fetch *keySetFetchError
			if errors.As(err, &fetch) {
				note.unavailable = true
			} else {
				note.badSignature = true
			}
		}
	}
	return payload, err
}

// discovery is what Apply reads of an OpenID discovery document.
type discovery struct {
	Issuer                string `json:"issuer"`
	JWKSURI               string `json:"jwks_uri"`
	IntrospectionEndpoint string `json:"introspection_endpoint"`
}

// build validates cfg, fetches the discovery document and key set, and returns the
// provider, or an *ApplyError.
func (ps *Providers) build(ctx context.Context, cfg ProviderConfig) (*provider, error) {
	cfg = cloneConfig(cfg)
	if err := validateConfig(&cfg); err != nil {
		return nil, err
	}
	rules, err := compileRules(cfg.ValidationRules)
	if err != nil {
		return nil, applyErr(ReasonInvalidConfig, false, "%v", err)
	}
	base, err := newIssuerClient(&cfg, ps.opts.Timeout)
	if err != nil {
		return nil, applyErr(ReasonInvalidConfig, false, "certificate authority: %v", err)
	}
	doc, err := fetchDiscovery(ctx, base, cfg.IssuerURL, cfg.DiscoveryURL)
	if err != nil {
		return nil, err
	}
	p := &provider{cfg: cfg, rules: rules}
	jwksURL, err := endpointURL(&cfg, "jwks_uri", doc.JWKSURI)
	if err != nil {
		return nil, err
	}
	if cfg.Introspection != nil {
		if doc.IntrospectionEndpoint == "" {
			return nil, applyErr(ReasonDiscoveryFailed, false, "the issuer's discovery document has no introspection_endpoint, and introspection is configured")
		}
		u, err := endpointURL(&cfg, "introspection_endpoint", doc.IntrospectionEndpoint)
		if err != nil {
			return nil, err
		}
		p.introspectionURL = u.String()
	}
	p.keySet = &keySetTransport{next: base.Transport, url: jwksURL.String(), minInterval: ps.opts.KeySetMinRefresh}
	p.client = &http.Client{Transport: p.keySet, Timeout: base.Timeout, CheckRedirect: base.CheckRedirect}
	if err := p.fetchKeySet(ctx); err != nil {
		return nil, err
	}
	remote := oidc.NewRemoteKeySet(oidc.ClientContext(context.Background(), p.client), jwksURL.String())
	primeKeySet(ctx, remote)
	p.verifier = oidc.NewVerifier(cfg.IssuerURL, noteKeySet{remote: remote}, &oidc.Config{
		SkipClientIDCheck:    true, // aud is checked against every audience in verifyJWT
		SupportedSigningAlgs: signingAlgorithms,
	})
	return p, nil
}

// primeKeySet makes remote load the key set now (from the key set transport, which
// holds what fetchKeySet just fetched): go-oidc's remote key set loads keys only when a
// token names one it lacks, and tokens of known keys should pass even while the issuer
// is down. It verifies a throwaway token of a key no issuer has, which fails, after the
// load.
func primeKeySet(ctx context.Context, remote *oidc.RemoteKeySet) {
	if token := primingToken(); token != "" {
		_, _ = remote.VerifySignature(ctx, token)
	}
}

// primingToken is a JWT signed by a key made for it and thrown away.
var primingToken = sync.OnceValue(func() string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return ""
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "switchboard-priming-key"}}, nil)
	if err != nil {
		return ""
	}
	jws, err := signer.Sign([]byte("{}"))
	if err != nil {
		return ""
	}
	token, err := jws.CompactSerialize()
	if err != nil {
		return ""
	}
	return token
})

func cloneConfig(cfg ProviderConfig) ProviderConfig {
	cfg.Audiences = slices.Clone(cfg.Audiences)
	cfg.CACertPEM = slices.Clone(cfg.CACertPEM)
	cfg.ValidationRules = slices.Clone(cfg.ValidationRules)
	if cfg.Introspection != nil {
		in := *cfg.Introspection
		cfg.Introspection = &in
	}
	return cfg
}

// validateConfig checks what needs no network. The API's admission checks most of it
// already; this keeps the package safe whatever builds its config.
func validateConfig(cfg *ProviderConfig) error {
	bad := func(format string, args ...any) error {
		return applyErr(ReasonInvalidConfig, false, format, args...)
	}
	if cfg.Name == "" {
		return bad("the provider has no name")
	}
	u, err := url.Parse(cfg.IssuerURL)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return bad("the issuer URL must be an absolute https URL")
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return bad("the issuer URL must have no user information, query or fragment")
	}
	if err := checkScheme(cfg, u); err != nil {
		return bad("the issuer URL %s", err)
	}
	if cfg.DiscoveryURL != "" {
		d, err := url.Parse(cfg.DiscoveryURL)
		if err != nil || d.Host == "" || (d.Scheme != "https" && d.Scheme != "http") {
			return bad("the discovery URL must be an absolute https URL")
		}
		if d.User != nil || d.RawQuery != "" || d.ForceQuery || d.Fragment != "" {
			return bad("the discovery URL must have no user information, query or fragment")
		}
		if err := checkScheme(cfg, d); err != nil {
			return bad("the discovery URL %s", err)
		}
	}
	if len(cfg.Audiences) == 0 || slices.Contains(cfg.Audiences, "") {
		return bad("at least one audience is required, and none may be empty")
	}
	if cfg.UsernameClaim == "" {
		return bad("the username claim is required")
	}
	for what, prefix := range map[string]string{"username": cfg.UsernamePrefix, "groups": cfg.GroupsPrefix} {
		if strings.HasPrefix(prefix, reservedPrefix) {
			return bad("the %s prefix must not start with %q, which Kubernetes reserves", what, reservedPrefix)
		}
	}
	if in := cfg.Introspection; in != nil && (in.ClientID == "" || in.ClientSecret == "") {
		return bad("introspection needs a client ID and a client secret")
	}
	return nil
}

// checkScheme allows https, and http only with AllowInsecureHTTP to a loopback host (an
// IP literal or localhost; the dial checks the address it resolves to as well).
func checkScheme(cfg *ProviderConfig, u *url.URL) error {
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if !cfg.AllowInsecureHTTP {
			return fmt.Errorf("%s is http: use https, or set allowInsecureHTTP for a loopback issuer", redactURL(u))
		}
		host := u.Hostname()
		if a, err := netip.ParseAddr(host); (err == nil && a.Unmap().IsLoopback()) || strings.EqualFold(host, "localhost") {
			return nil
		}
		return fmt.Errorf("%s is http to a host that is not loopback: allowInsecureHTTP allows loopback addresses only", redactURL(u))
	default:
		return fmt.Errorf("%s is neither https nor http", redactURL(u))
	}
}

// endpointURL parses an endpoint the discovery document names and checks its scheme as
// the issuer's.
func endpointURL(cfg *ProviderConfig, field, raw string) (*url.URL, error) {
	if raw == "" {
		return nil, applyErr(ReasonDiscoveryFailed, false, "the issuer's discovery document has no %s", field)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil {
		return nil, applyErr(ReasonDiscoveryFailed, false, "the issuer's discovery document has an unusable %s", field)
	}
	if err := checkScheme(cfg, u); err != nil {
		return nil, applyErr(ReasonDiscoveryFailed, false, "the discovery document's %s %s", field, err)
	}
	return u, nil
}

// fetchDiscovery fetches and decodes the issuer's OpenID discovery document, from
// discoveryURL when set and from the issuer's well-known location otherwise, and checks
// that it names the issuer exactly.
func fetchDiscovery(ctx context.Context, client *http.Client, issuer, discoveryURL string) (*discovery, error) {
	location := discoveryURL
	if location == "" {
		location = strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration"
	}
	u, err := url.Parse(location)
	if err != nil {
		return nil, applyErr(ReasonInvalidConfig, false, "the discovery URL does not parse")
	}
	where := redactURL(u)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, applyErr(ReasonInvalidConfig, false, "the issuer URL does not make a request")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fetchFailed(ReasonDiscoveryFailed, "fetching the discovery document "+where, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, applyErr(ReasonDiscoveryFailed, true, "fetching the discovery document %s: the issuer answered %s%s", where, resp.Status, redirectHint(resp.StatusCode))
	}
	body, err := readBounded(resp.Body, maxDiscoveryBytes)
	if err != nil {
		return nil, fetchFailed(ReasonDiscoveryFailed, "reading the discovery document "+where, err)
	}
	var doc discovery
	if err := jsonv2.Unmarshal(body, &doc); err != nil {
		return nil, applyErr(ReasonDiscoveryFailed, true, "the discovery document %s is not a JSON object of discovery metadata", where)
	}
	if doc.Issuer != issuer {
		return nil, applyErr(ReasonDiscoveryFailed, false, "the discovery document %s names issuer %q, not %q: the issuer URL must match it exactly (mind a trailing slash)", where, doc.Issuer, issuer)
	}
	return &doc, nil
}

// fetchFailed turns a failed request into an *ApplyError, telling a refused address
// (fix the configuration or DNS) from an unreachable issuer (try again).
func fetchFailed(reason Reason, what string, err error) *ApplyError {
	err = describeHTTPError(err)
	var refused *refusedAddressError
	var fetch *keySetFetchError
	switch {
	case errors.As(err, &refused):
		return applyErr(ReasonAddressRefused, false, "%s: %v", what, refused)
	case errors.As(err, &fetch):
		return fetchFailed(reason, what, fetch.err)
	default:
		return applyErr(reason, true, "%s: %v", what, err)
	}
}

// fetchKeySet fetches the key set through the key set transport, which keeps it for the
// remote key set's first fetch, and checks that it holds a key go-oidc can verify with
// (none needed when the provider introspects: its tokens may all be opaque).
func (p *provider) fetchKeySet(ctx context.Context) error {
	where := redactURL(mustParse(p.keySet.url))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.keySet.url, nil)
	if err != nil {
		return applyErr(ReasonDiscoveryFailed, false, "the discovery document's jwks_uri does not make a request")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return fetchFailed(ReasonKeySetFailed, "fetching the key set "+where, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := readBounded(resp.Body, maxKeySetBytes)
	if err != nil {
		return fetchFailed(ReasonKeySetFailed, "reading the key set "+where, err)
	}
	var set struct {
		Keys []jsontext.Value `json:"keys"`
	}
	if err := jsonv2.Unmarshal(body, &set); err != nil {
		return applyErr(ReasonKeySetFailed, true, "the key set %s is not a JSON Web Key Set", where)
	}
	usable := 0
	for _, k := range set.Keys {
		if usableKey(k) {
			usable++
		}
	}
	if usable == 0 && p.cfg.Introspection == nil {
		return applyErr(ReasonKeySetFailed, true, "the key set %s holds no signing key this gateway can verify with (RSA, ECDSA or Ed25519)", where)
	}
	return nil
}

func mustParse(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		return &url.URL{}
	}
	return u
}

// tokenDigest is the key a token is cached under: never the token itself.
func tokenDigest(token string) [sha256.Size]byte {
	return sha256.Sum256([]byte(token))
}
