package catalog

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/identity"
)

// The catalogue authenticates callers with an identity.Authenticator and authorizes them
// with SubjectAccessReview.
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

// maxParallelReviews bounds the SubjectAccessReviews one request runs at a time.
const maxParallelReviews = 8

// caller is an authenticated client of the catalogue.
type caller struct {
	*identity.Caller
	// all is set in AuthNone mode: the caller sees every namespace.
	all bool
}

// anonymous is the caller of every request in AuthNone mode.
var anonymous = &caller{Caller: identity.Anonymous, all: true}

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

// gatekeeper authenticates callers with the identity.Authenticator and authorizes them with
// SubjectAccessReview, on an API client of its own so that no flood of tokens spends
// its budget, caching the answers.
type gatekeeper struct {
	mode    AuthMode
	authn   *identity.Authenticator
	access  authorizationv1client.SubjectAccessReviewInterface
	ttl     time.Duration
	timeout time.Duration

	accessCache *cache.LRUExpireCache // caller access key + namespace -> bool

	metrics *metrics
}

// authenticate returns the caller of r, or an error of the identity.Authenticator:
// identity.ErrUnauthenticated, identity.ErrTooManyReviews or a failed review.
func (g *gatekeeper) authenticate(ctx context.Context, r *http.Request) (*caller, error) {
	if g.mode == AuthNone {
		return anonymous, nil
	}
	id, err := g.authn.AuthenticateRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	return &caller{Caller: id}, nil
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
	return c.AccessKey() + "/" + namespace
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
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	review, err := g.access.Create(ctx, c.AccessReview(authorizationv1.ResourceAttributes{
		Namespace: namespace,
		Verb:      "list",
		Group:     mcpv1alpha1.GroupVersion.Group,
		Resource:  "mcpservers",
	}), metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("reviewing access to namespace %q: %w", namespace, err)
	}
	ok := review.Status.Allowed && !review.Status.Denied
	g.accessCache.Add(accessKey(c, namespace), ok, g.ttl)
	return ok, nil
}
