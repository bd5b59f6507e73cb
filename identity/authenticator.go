package identity

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
)

// The manager authenticates the callers of the catalogue and the gateway with TokenReview.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// Authenticator authenticates bearer tokens: Kubernetes tokens with TokenReview, tokens
// of MCPIdentityProviders' issuers with [Providers]. It returns one [Caller] whichever
// vouched. It is the one door every agent-facing endpoint of the manager goes through:
// the manager builds one (through the catalogue's options) and hands it to the gateway,
// served on the same address, so that a token reviewed by one is cached for the other
// and one flood cannot spend two budgets. It is safe for concurrent use.
//
// Before it spends a review on a JWT it checks it against the cluster's ServiceAccount
// issuer (AuthenticatorOptions.ServiceAccountKeys: the API server's
// /.well-known/openid-configuration and /openid/v1/jwks): a token that names that issuer
// must be signed by one of its keys and be within its exp and nbf, or it is rejected
// without a review. A token that passes is reviewed in a lane of its own (its own slots),
// so only tokens the API server itself signed compete there: a flood of random or
// forged tokens cannot keep a fresh ServiceAccount token (a new pod, an hourly rotation)
// out. TokenReview still decides on every token that passes, for what a signature cannot
// tell: a deleted pod or Secret the token is bound to, a revoked credential, audiences.
//
// Tokens it cannot check (opaque tokens: bootstrap, static or webhook tokens; JWTs of
// another issuer, such as OIDC tokens the API server also accepts; a key id the key set
// does not have even after a refresh) go to the lane for unknown tokens, as before. A
// flood of such tokens, JWT-shaped or not, fills only that lane: it can delay other
// tokens of those kinds (they get 429 with Retry-After), never ServiceAccount tokens.
// Where only ServiceAccount tokens are used, ServiceAccountTokensOnly refuses the others
// at once (401) and a flood costs no review at all. When the key set cannot be fetched
// (an API server with no ServiceAccount issuer) every token is reviewed as an unknown
// token, as without local verification, and that is logged once.
//
// What it costs an unauthenticated caller to make the API server work is bounded:
//   - a malformed token (see [CheckTokenShape]) is rejected without a review, and so is
//     a token of the cluster's issuer whose signature or validity period is wrong;
//   - a token whose review failed is remembered, by its SHA-256 digest, for
//     NegativeTTL, in a cache of its own: failures never evict successes;
//   - identical tokens reviewed at the same time share one review;
//   - at most MaxConcurrentReviews reviews of unknown tokens run at once, on an API
//     client with its own rate limit; beyond that, Authenticate returns
//     [ErrTooManyReviews] at once (answer 429 with Retry-After) instead of queueing.
//
// A caller whose token is cached is answered from memory: no review, no slot, no wait.
// When its entry has expired, a token that authenticated within the last KnownTTL is
// reviewed again in a lane of its own (its own slots, its own API client), so a flood of
// unknown tokens cannot delay it either. Caches are LRU caches of bounded size keyed by
// the token's digest; no token is kept after Authenticate returns.
type Authenticator struct {
	unknown   reviewLane
	known     reviewLane
	verified  reviewLane
	keys      *serviceAccountVerifier // nil: no local verification
	saOnly    bool
	audiences []string
	ttl       time.Duration
	negTTL    time.Duration
	knownTTL  time.Duration
	timeout   time.Duration
	observe   func(AuthOutcome)
	providers *Providers // nil: Kubernetes tokens only

	positive *cache.LRUExpireCache // reviewDigest -> *tokenEntry, kept for knownTTL
	negative *cache.LRUExpireCache // reviewDigest -> struct{}, kept for negTTL

	mu       sync.Mutex
	inFlight map[reviewDigest]*reviewCall
}

// AuthenticatorOptions configure an Authenticator. Zero fields take the defaults named.
type AuthenticatorOptions struct {
	// Audiences, when set, are the audiences TokenReview must find in the token; by
	// default the API server's own.
	Audiences []string

	// TTL is how long a successful review is trusted; 10s when zero. A token that
	// expires sooner (the exp claim of a JWT) is trusted until it expires.
	TTL time.Duration

	// NegativeTTL is how long a failed review is remembered; 5s when zero.
	NegativeTTL time.Duration

	// KnownTTL is how long after its last successful review a token is re-reviewed in
	// the lane for known tokens rather than with unknown ones; 1h when zero.
	KnownTTL time.Duration

	// CacheSize bounds the tokens that authenticated, NegativeCacheSize those that did
	// not; 4096 each when zero.
	CacheSize         int
	NegativeCacheSize int

	// MaxConcurrentReviews bounds the TokenReviews in flight per lane (unknown tokens,
	// known tokens); 16 when zero.
	MaxConcurrentReviews int

	// Timeout bounds one TokenReview; 5s when zero.
	Timeout time.Duration

	// Observe, when set, is told what each authentication did, for metrics.
	Observe func(AuthOutcome)

	// ServiceAccountKeys, when set, fetches the cluster's ServiceAccount issuer and keys
	// (see [APIServerServiceAccountKeys]) to verify ServiceAccount tokens before they are
	// reviewed. Without it every token is reviewed as an unknown token.
	ServiceAccountKeys ServiceAccountKeys

	// ServiceAccountTokensOnly refuses, without a review, every token that is not a
	// ServiceAccount token of the cluster verified with ServiceAccountKeys: opaque tokens
	// and JWTs of other issuers. It has no effect while no key set could be fetched.
	ServiceAccountTokensOnly bool

	// Logger logs whether ServiceAccount tokens can be verified locally (never a token);
	// ctrl.Log.WithName("authenticator") when it has no sink.
	Logger logr.Logger

	// IdentityProviders, when set, authenticate the tokens of MCPIdentityProviders'
	// issuers: a JWT whose issuer is one of theirs is judged by its provider alone, never
	// by TokenReview; an opaque token TokenReview does not accept is asked of the one
	// provider that introspects tokens that begin as it does (the cluster's own review
	// first, so that a cluster credential never reaches an identity provider).
	IdentityProviders *Providers
}

// AuthOutcome says how an authentication was decided.
type AuthOutcome string

const (
	// AuthCached means the answer came from a cache (or from a review another caller of
	// the same token was already waiting for): no TokenReview.
	AuthCached AuthOutcome = "cached"
	// AuthReviewed means a TokenReview was sent.
	AuthReviewed AuthOutcome = "reviewed"
	// AuthMalformed means the token was rejected by its shape, without a review.
	AuthMalformed AuthOutcome = "malformed"
	// AuthThrottled means every review slot was busy: ErrTooManyReviews.
	AuthThrottled AuthOutcome = "throttled"
	// AuthForged means a token of the cluster's ServiceAccount issuer failed the local
	// check of its signature or validity period, without a review.
	AuthForged AuthOutcome = "forged"
	// AuthNotServiceAccount means a token that is not a ServiceAccount token was refused
	// without a review (ServiceAccountTokensOnly).
	AuthNotServiceAccount AuthOutcome = "not_service_account"
)

// Review client limits: each of the Authenticator's two lanes and each SubjectAccessReview
// client (the catalogue's, the gateway's) has an API client of its own with this rate
// limit (ReviewClientConfig).
const (
	reviewQPS   = 50
	reviewBurst = 100
)

// ErrTooManyReviews means every TokenReview slot is busy, or the API server throttled
// the review. HTTP front doors answer 429 with a Retry-After of [ReviewRetryAfter].
var ErrTooManyReviews = errors.New("too many token reviews in flight; retry shortly")

// ReviewRetryAfter is the Retry-After to send with ErrTooManyReviews.
const ReviewRetryAfter = time.Second

// maxBearerTokenBytes bounds the bearer tokens the Authenticator accepts. ServiceAccount
// tokens are about 1 KiB; identity provider tokens with many claims reach a few KiB.
const maxBearerTokenBytes = 8 << 10

// reviewDigest is the SHA-256 digest of a token, the only form in which a token is kept.
type reviewDigest [sha256.Size]byte

// tokenEntry is a successful review.
type tokenEntry struct {
	id         *Caller
	validUntil time.Time
}

// reviewCall is a review in flight that callers of the same token wait for.
type reviewCall struct {
	done chan struct{}
	id   *Caller
	err  error
}

// reviewLane is an API client for TokenReviews and the slots that bound them.
type reviewLane struct {
	reviews authenticationv1client.TokenReviewInterface
	slots   chan struct{}
}

// NewAuthenticator returns an Authenticator that reviews unknown tokens through unknown
// and re-reviews known ones, and reviews ServiceAccount tokens it verified, through
// known. Give each its own API client (each with its own rate limiter), as
// [NewAuthenticatorForConfig] does; known may be nil to share unknown's, at the cost of
// known callers waiting behind a flood in its rate limiter. The lanes of known and of
// verified tokens share known's rate limiter but not their slots: only tokens that
// authenticated before or that the API server signed reach them.
func NewAuthenticator(unknown, known authenticationv1client.TokenReviewInterface, opts AuthenticatorOptions) *Authenticator {
	if known == nil {
		known = unknown
	}
	opts.defaults()
	var keys *serviceAccountVerifier
	if opts.ServiceAccountKeys != nil {
		keys = newServiceAccountVerifier(opts.ServiceAccountKeys, opts.Timeout, opts.Logger)
	}
	return &Authenticator{
		unknown:   reviewLane{reviews: unknown, slots: make(chan struct{}, opts.MaxConcurrentReviews)},
		known:     reviewLane{reviews: known, slots: make(chan struct{}, opts.MaxConcurrentReviews)},
		verified:  reviewLane{reviews: known, slots: make(chan struct{}, opts.MaxConcurrentReviews)},
		keys:      keys,
		saOnly:    opts.ServiceAccountTokensOnly,
		audiences: slices.Clone(opts.Audiences),
		ttl:       opts.TTL,
		negTTL:    opts.NegativeTTL,
		knownTTL:  max(opts.KnownTTL, opts.TTL),
		timeout:   opts.Timeout,
		observe:   opts.Observe,
		providers: opts.IdentityProviders,
		positive:  cache.NewLRUExpireCache(opts.CacheSize),
		negative:  cache.NewLRUExpireCache(opts.NegativeCacheSize),
		inFlight:  make(map[reviewDigest]*reviewCall),
	}
}

// NewAuthenticatorForConfig returns an Authenticator whose two API clients (unknown
// tokens; known and verified tokens) are each built from cfg with a rate limit of 50
// requests per second (burst 100), and that verifies ServiceAccount tokens with the keys
// of cfg's API server unless opts.ServiceAccountKeys says otherwise.
func NewAuthenticatorForConfig(cfg *rest.Config, opts AuthenticatorOptions) (*Authenticator, error) {
	if opts.ServiceAccountKeys == nil {
		keys, err := APIServerServiceAccountKeys(cfg)
		if err != nil {
			return nil, err
		}
		opts.ServiceAccountKeys = keys
	}
	unknown, err := authenticationv1client.NewForConfig(ReviewClientConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("creating the TokenReview client: %w", err)
	}
	known, err := authenticationv1client.NewForConfig(ReviewClientConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("creating the TokenReview client for known tokens: %w", err)
	}
	return NewAuthenticator(unknown.TokenReviews(), known.TokenReviews(), opts), nil
}

// ReviewClientConfig is cfg with a rate limiter of its own (50 requests per second, burst
// 100), for an API client that sends reviews: TokenReviews, SubjectAccessReviews, the
// ServiceAccount issuer's keys. Each such client gets its own, so that a flood of
// requests that need reviews queues behind no other client and no other client behind it.
func ReviewClientConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst, c.RateLimiter = reviewQPS, reviewBurst, nil
	return c
}

func (o *AuthenticatorOptions) defaults() {
	if o.TTL <= 0 {
		o.TTL = 10 * time.Second
	}
	if o.NegativeTTL <= 0 {
		o.NegativeTTL = 5 * time.Second
	}
	if o.KnownTTL <= 0 {
		o.KnownTTL = time.Hour
	}
	if o.CacheSize <= 0 {
		o.CacheSize = 4096
	}
	if o.NegativeCacheSize <= 0 {
		o.NegativeCacheSize = 4096
	}
	if o.MaxConcurrentReviews <= 0 {
		o.MaxConcurrentReviews = 16
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Observe == nil {
		o.Observe = func(AuthOutcome) {}
	}
	if o.Logger.GetSink() == nil {
		o.Logger = ctrl.Log.WithName("authenticator")
	}
}

// AuthenticateRequest authenticates the bearer token of r's Authorization header. See
// [Authenticator.Authenticate].
func (a *Authenticator) AuthenticateRequest(ctx context.Context, r *http.Request) (*Caller, error) {
	token, ok := BearerToken(r)
	if !ok {
		return nil, ErrUnauthenticated
	}
	return a.Authenticate(ctx, token)
}

// BearerToken returns the token of an "Authorization: Bearer" header.
func BearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return "", false
	}
	return token, true
}

// Authenticate returns who token belongs to. Its errors are ErrUnauthenticated (also for
// a malformed token), ErrTooManyReviews, or a failed review (the API server could not
// be asked), which never carries the token.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (*Caller, error) {
	expiry, err := CheckTokenShape(token)
	if err != nil {
		if a.opaqueForProviders(token) {
			// Not a token the API server would take (an issuer's opaque token that begins
			// with "eyJ" and has dots, as zitadel's encrypted ones do), but one an
			// introspecting provider may: no TokenReview, introspection only.
			return a.authenticateProvider(ctx, token)
		}
		a.observe(AuthMalformed)
		return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if a.providers == nil || !a.providers.Handles(token) {
		return a.authenticateKubernetes(ctx, token, expiry)
	}
	if expiry.IsZero() {
		// An opaque token: the cluster's, or an introspecting issuer's.
		id, err := a.authenticateKubernetes(ctx, token, expiry)
		if !errors.Is(err, ErrUnauthenticated) {
			return id, err
		}
	}
	return a.authenticateProvider(ctx, token)
}

// opaqueForProviders reports whether token, refused by CheckTokenShape, is still one to
// ask the identity providers about: printable ASCII within the size bound, not three
// segments (a JWT of that shape is malformed for everyone), and some provider
// introspects opaque tokens.
func (a *Authenticator) opaqueForProviders(token string) bool {
	if a.providers == nil || checkTokenBytes(token) != nil || strings.Count(token, ".") == 2 {
		return false
	}
	return a.providers.Handles(token)
}

// authenticateProvider authenticates a token of an MCPIdentityProvider's issuer.
func (a *Authenticator) authenticateProvider(ctx context.Context, token string) (*Caller, error) {
	caller, err := a.providers.Authenticate(ctx, token)
	switch {
	case errors.Is(err, ErrIssuerUnavailable):
		// The message names the provider and why, never the token.
		return nil, fmt.Errorf("authenticating the bearer token: %w", err)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	return caller, nil
}

// authenticateKubernetes authenticates a token of the cluster: a cache, or a TokenReview
// in the lane the token belongs in.
func (a *Authenticator) authenticateKubernetes(ctx context.Context, token string, expiry time.Time) (*Caller, error) {
	key := reviewDigest(sha256.Sum256([]byte(token)))
	known := false
	if v, ok := a.positive.Get(key); ok {
		if e := v.(*tokenEntry); time.Now().Before(e.validUntil) {
			a.observe(AuthCached)
			return e.id, nil
		}
		known = true
	}
	if _, ok := a.negative.Get(key); ok {
		a.observe(AuthCached)
		return nil, ErrUnauthenticated
	}
	lane, err := a.lane(ctx, token, known)
	if err != nil {
		return nil, err
	}

	a.mu.Lock()
	if call, ok := a.inFlight[key]; ok {
		a.mu.Unlock()
		a.observe(AuthCached)
		select {
		case <-call.done:
			return call.id, call.err
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the review of the bearer token: %w", ctx.Err())
		}
	}
	select {
	case lane.slots <- struct{}{}:
	default:
		a.mu.Unlock()
		a.observe(AuthThrottled)
		return nil, ErrTooManyReviews
	}
	call := &reviewCall{done: make(chan struct{})}
	a.inFlight[key] = call
	a.mu.Unlock()

	a.observe(AuthReviewed)
	call.id, call.err = a.review(ctx, lane, key, token, expiry)
	<-lane.slots
	a.mu.Lock()
	delete(a.inFlight, key)
	a.mu.Unlock()
	close(call.done)
	return call.id, call.err
}

// lane returns the lane to review token in, after checking it against the cluster's
// ServiceAccount keys: known tokens (authenticated before) are re-reviewed in the known
// lane, ServiceAccount tokens that verify in the verified lane, others in the unknown
// lane. A token of the cluster's issuer that does not verify is rejected here, and so is
// any token that is not a ServiceAccount token with ServiceAccountTokensOnly.
func (a *Authenticator) lane(ctx context.Context, token string, known bool) (*reviewLane, error) {
	v := unverified
	if a.keys != nil {
		v = a.keys.check(ctx, token)
	}
	switch {
	case v == forged:
		a.observe(AuthForged)
		return nil, fmt.Errorf("%w: a ServiceAccount token whose signature does not verify with the cluster's keys, or that has expired", ErrUnauthenticated)
	case known:
		return &a.known, nil
	case v == verified:
		return &a.verified, nil
	case a.saOnly && a.keys.ready(ctx):
		a.observe(AuthNotServiceAccount)
		return nil, fmt.Errorf("%w: only ServiceAccount tokens of this cluster are accepted", ErrUnauthenticated)
	default:
		return &a.unknown, nil
	}
}

// review asks the API server about token and caches the answer. The review outlives a
// caller that gives up, since others may be waiting for it; the timeout bounds it.
func (a *Authenticator) review(ctx context.Context, lane *reviewLane, key reviewDigest, token string, expiry time.Time) (*Caller, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
	defer cancel()
	review, err := lane.reviews.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.audiences},
	}, metav1.CreateOptions{})
	switch {
	case apierrors.IsTooManyRequests(err):
		return nil, fmt.Errorf("%w: %w", ErrTooManyReviews, err)
	case err != nil:
		// The error comes from the API server and never carries the token.
		return nil, fmt.Errorf("reviewing the bearer token: %w", err)
	}
	st := &review.Status
	if !st.Authenticated || !a.audienceMatches(st.Audiences) {
		a.positive.Remove(key)
		a.negative.Add(key, struct{}{}, a.negTTL)
		return nil, ErrUnauthenticated
	}
	validUntil := time.Now().Add(a.ttl)
	if !expiry.IsZero() && expiry.Before(validUntil) {
		validUntil = expiry
	}
	id := NewCaller(st.User)
	id.Expiry = expiry
	a.negative.Remove(key)
	a.positive.Add(key, &tokenEntry{id: id, validUntil: validUntil}, a.knownTTL)
	return id, nil
}

// audienceMatches reports whether a review's audiences include one asked for, as
// TokenReview's documentation asks of clients that set spec.audiences.
func (a *Authenticator) audienceMatches(got []string) bool {
	if len(a.audiences) == 0 {
		return true
	}
	for _, aud := range got {
		if slices.Contains(a.audiences, aud) {
			return true
		}
	}
	return false
}

// checkTokenBytes rejects a bearer token that is empty, longer than 8 KiB or has a byte
// outside printable ASCII.
func checkTokenBytes(token string) error {
	if token == "" || len(token) > maxBearerTokenBytes {
		return fmt.Errorf("%w: its length must be between 1 and %d bytes", errMalformedToken, maxBearerTokenBytes)
	}
	for i := range len(token) {
		if c := token[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: it must be printable ASCII without spaces", errMalformedToken)
		}
	}
	return nil
}

// errMalformedToken is the error CheckTokenShape wraps.
var errMalformedToken = errors.New("malformed bearer token")

// CheckTokenShape rejects a bearer token that no Kubernetes API server authenticator
// would accept, so it costs no TokenReview. A token is malformed when:
//   - it is empty or longer than 8 KiB;
//   - it has a byte outside printable ASCII (0x21 to 0x7E): no spaces, control
//     characters or non-ASCII, which RFC 6750 bearer tokens never contain and which
//     the API server would cut at the first space anyway;
//   - it looks like a JWT, that is it begins with "eyJ" (base64url of `{"`, how every
//     JWT header begins) and has a dot, but is not a signed compact JWS: exactly three
//     non-empty base64url segments (no padding), the first a JSON object with an "alg"
//     other than "none", the second a JSON object.
//
// Everything else is left to TokenReview: ServiceAccount and OIDC tokens are JWTs of that
// shape, bootstrap tokens (abcdef.0123456789abcdef) and static or webhook tokens are
// opaque strings of printable ASCII. For a JWT with an exp claim, CheckTokenShape returns
// the expiry (unverified: it only shortens how long a review is cached).
func CheckTokenShape(token string) (expiry time.Time, err error) {
	if err := checkTokenBytes(token); err != nil {
		return time.Time{}, err
	}
	if !strings.HasPrefix(token, "eyJ") || !strings.Contains(token, ".") {
		return time.Time{}, nil // opaque
	}
	segments := strings.Split(token, ".")
	if len(segments) != 3 {
		return time.Time{}, fmt.Errorf("%w: a JWT has three segments, not %d", errMalformedToken, len(segments))
	}
	var header struct {
		Alg string `json:"alg"`
	}
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	for i, into := range []any{&header, &claims, nil} {
		b, err := base64.RawURLEncoding.DecodeString(segments[i])
		if err != nil || len(b) == 0 {
			return time.Time{}, fmt.Errorf("%w: JWT segment %d is not base64url", errMalformedToken, i+1)
		}
		if into != nil && (b[0] != '{' || json.Unmarshal(b, into) != nil) {
			return time.Time{}, fmt.Errorf("%w: JWT segment %d is not a JSON object", errMalformedToken, i+1)
		}
	}
	if header.Alg == "" || strings.EqualFold(header.Alg, "none") {
		return time.Time{}, fmt.Errorf("%w: a JWT must be signed", errMalformedToken)
	}
	if claims.Exp != nil && *claims.Exp > 0 && *claims.Exp < float64(1<<40) {
		return time.Unix(int64(*claims.Exp), 0), nil
	}
	return time.Time{}, nil
}
