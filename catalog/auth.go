package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// The catalogue authenticates callers with TokenReview and authorizes them with
// SubjectAccessReview.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// AuthMode selects how the catalogue authenticates callers.
type AuthMode string

const (
	// AuthTokenReview authenticates bearer tokens with TokenReview and shows each caller
	// the namespaces where SubjectAccessReview allows it to list mcpservers. It is the
	// default.
	AuthTokenReview AuthMode = "tokenreview"
	// AuthNone lets every caller see every namespace, without a token. It exists for
	// `switchboard dev` only.
	AuthNone AuthMode = "none"
)

// ParseAuthMode parses the value of the --catalog-auth flag.
func ParseAuthMode(s string) (AuthMode, error) {
	switch m := AuthMode(s); m {
	case AuthTokenReview, AuthNone:
		return m, nil
	case "":
		return AuthTokenReview, nil
	default:
		return "", fmt.Errorf("unknown catalogue auth mode %q: want %q or %q", s, AuthTokenReview, AuthNone)
	}
}

// errUnauthenticated means the request carries no valid bearer token.
var errUnauthenticated = errors.New("a valid bearer token (a ServiceAccount token) is required")

// maxTokenBytes bounds the bearer tokens the catalogue sends to TokenReview.
const maxTokenBytes = 8 << 10

// maxParallelReviews bounds the SubjectAccessReviews one request runs at a time.
const maxParallelReviews = 8

// caller is an authenticated client of the catalogue.
type caller struct {
	user authenticationv1.UserInfo
	// key identifies the user in the access cache.
	key string
	// all is set in AuthNone mode: the caller sees every namespace.
	all bool
}

// anonymous is the caller of every request in AuthNone mode.
var anonymous = &caller{user: authenticationv1.UserInfo{Username: "system:anonymous"}, key: "anonymous", all: true}

// scope is the set of namespaces a caller may see.
type scope struct {
	all bool
	ns  map[string]struct{}
}

func (s scope) allows(namespace string) bool {
	if s.all {
		return true
	}
	_, ok := s.ns[namespace]
	return ok
}

// gatekeeper authenticates and authorizes callers, caching both reviews.
type gatekeeper struct {
	mode      AuthMode
	tokens    authenticationv1client.TokenReviewInterface
	access    authorizationv1client.SubjectAccessReviewInterface
	audiences []string
	ttl       time.Duration
	timeout   time.Duration

	tokenCache  *cache.LRUExpireCache // sha256(token) -> *caller (nil when not authenticated)
	accessCache *cache.LRUExpireCache // caller key + namespace -> bool

	metrics *metrics
}

// authenticate returns the caller of r, or errUnauthenticated.
func (g *gatekeeper) authenticate(ctx context.Context, r *http.Request) (*caller, error) {
	if g.mode == AuthNone {
		return anonymous, nil
	}
	token, ok := bearerToken(r)
	if !ok {
		return nil, errUnauthenticated
	}
	sum := sha256.Sum256([]byte(token))
	cacheKey := string(sum[:])
	if v, ok := g.tokenCache.Get(cacheKey); ok {
		g.metrics.authCache("token", true)
		if c, _ := v.(*caller); c != nil {
			return c, nil
		}
		return nil, errUnauthenticated
	}
	g.metrics.authCache("token", false)
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	review, err := g.tokens.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: g.audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		// The error comes from the API server and never carries the token.
		return nil, fmt.Errorf("reviewing the bearer token: %w", err)
	}
	if !review.Status.Authenticated {
		g.tokenCache.Add(cacheKey, (*caller)(nil), g.ttl)
		return nil, errUnauthenticated
	}
	c := &caller{user: review.Status.User, key: userKey(review.Status.User)}
	g.tokenCache.Add(cacheKey, c, g.ttl)
	return c, nil
}

// bearerToken returns the token of an "Authorization: Bearer" header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" || len(token) > maxTokenBytes {
		return "", false
	}
	return token, true
}

// userKey identifies a user for the access cache: name, uid, groups and extra.
func userKey(u authenticationv1.UserInfo) string {
	h := sha256.New()
	write := func(s string) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	write(u.Username)
	write(u.UID)
	groups := slices.Clone(u.Groups)
	slices.Sort(groups)
	for _, g := range groups {
		write("g:" + g)
	}
	keys := make([]string, 0, len(u.Extra))
	for k := range u.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		write("e:" + k)
		for _, v := range u.Extra[k] {
			write(v)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// scope returns the namespaces among candidates the caller may list mcpservers in. A
// caller allowed to list them cluster-wide sees every namespace.
func (g *gatekeeper) scope(ctx context.Context, c *caller, candidates []string) (scope, error) {
	if c.all {
		return scope{all: true}, nil
	}
	all, err := g.allowed(ctx, c, metav1.NamespaceAll)
	if err != nil || all {
		return scope{all: all}, err
	}
	s := scope{ns: make(map[string]struct{})}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
		slots    = make(chan struct{}, maxParallelReviews)
	)
	for _, ns := range candidates {
		if ok, cached := g.cachedAccess(c, ns); cached {
			if ok {
				s.ns[ns] = struct{}{}
			}
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			ok, err := g.allowed(ctx, c, ns)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && firstErr == nil:
				firstErr = err
			case ok:
				s.ns[ns] = struct{}{}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return scope{}, firstErr
	}
	return s, nil
}

func accessKey(c *caller, namespace string) string {
	return c.key + "/" + namespace
}

func (g *gatekeeper) cachedAccess(c *caller, namespace string) (allowed, cached bool) {
	v, ok := g.accessCache.Get(accessKey(c, namespace))
	if !ok {
		return false, false
	}
	allowed, _ = v.(bool)
	return allowed, true
}

// allowed reports whether the caller may list mcpservers in namespace ("" meaning every
// namespace), asking SubjectAccessReview on a cache miss.
func (g *gatekeeper) allowed(ctx context.Context, c *caller, namespace string) (bool, error) {
	if ok, cached := g.cachedAccess(c, namespace); cached {
		g.metrics.authCache("access", true)
		return ok, nil
	}
	g.metrics.authCache("access", false)
	extra := make(map[string]authorizationv1.ExtraValue, len(c.user.Extra))
	for k, v := range c.user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	review, err := g.access.Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   c.user.Username,
			UID:    c.user.UID,
			Groups: c.user.Groups,
			Extra:  extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace,
				Verb:      "list",
				Group:     mcpv1alpha1.GroupVersion.Group,
				Resource:  "mcpservers",
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("reviewing access to namespace %q: %w", namespace, err)
	}
	ok := review.Status.Allowed && !review.Status.Denied
	g.accessCache.Add(accessKey(c, namespace), ok, g.ttl)
	return ok, nil
}
