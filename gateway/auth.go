package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/identity"
)

// UseVerb is the verb a caller needs on an MCPServer to call it through the gateway.
// Kubernetes RBAC accepts any verb in a Role, so a rule with resourceNames grants exactly
// the servers it names.
const UseVerb = "use"

// Authenticator tells who a request's bearer token belongs to. The manager passes the
// identity.Authenticator the catalogue uses too, so that every agent-facing endpoint
// shares one token cache and one review budget. Its errors are identity.ErrUnauthenticated (401), identity.ErrTooManyReviews
// (429) or a failed review (503).
type Authenticator interface {
	AuthenticateRequest(ctx context.Context, r *http.Request) (*identity.Caller, error)
}

// accessReviewer answers "may this caller use this server?" with SubjectAccessReview,
// caching each answer for at most ttl.
type accessReviewer struct {
	reviews authorizationv1client.SubjectAccessReviewInterface
	ttl     time.Duration
	timeout time.Duration
	cache   *cache.LRUExpireCache // caller access key + resource + object -> bool
}

// allowed reports whether caller may use the server key names.
func (a *accessReviewer) allowed(ctx context.Context, caller *identity.Caller, key connector.Key) (bool, error) {
	return a.allowedOn(ctx, caller, resourceServers, key)
}

// Resources a caller is reviewed for verb use on.
const (
	resourceServers  = "mcpservers"
	resourceToolsets = "mcptoolsets"
)

// allowedOn reports whether caller may use the object of resource (mcpservers or
// mcptoolsets) key names.
func (a *accessReviewer) allowedOn(ctx context.Context, caller *identity.Caller, resource string, key connector.Key) (bool, error) {
	cacheKey := caller.AccessKey() + "/" + resource + "/" + key.Namespace + "/" + key.Name
	if v, ok := a.cache.Get(cacheKey); ok {
		allowed, _ := v.(bool)
		return allowed, nil
	}
	if ft := frontTraceOf(ctx); ft != nil {
		ft.reviewed = true
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	review, err := a.reviews.Create(ctx, caller.AccessReview(authorizationv1.ResourceAttributes{
		Namespace: key.Namespace,
		Verb:      UseVerb,
		Group:     mcpv1alpha1.GroupVersion.Group,
		Resource:  resource,
		Name:      key.Name,
	}), metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("reviewing access to %s %s: %w", resource, key, err)
	}
	ok := review.Status.Allowed && !review.Status.Denied
	a.cache.Add(cacheKey, ok, a.ttl)
	return ok, nil
}

// watchAccess re-checks, every AccessTTL while a session lives, that its caller may
// still use the endpoint's resource, and ends the session through revoke when it may
// not: a caller that only listens on its stream sends no request that would be refused.
// It waits on a timer, not a goroutine; a review that fails is tried again at the next
// tick, and the session kept meanwhile.
func (g *Gateway) watchAccess(caller *identity.Caller, resource string, key connector.Key, ending func() bool, revoke func()) {
	if g.access == nil {
		return
	}
	var check func()
	check = func() {
		if ending() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), g.access.timeout)
		allowed, err := g.access.allowedOn(ctx, caller, resource, key)
		cancel()
		if err == nil && !allowed {
			revoke()
			return
		}
		time.AfterFunc(g.opts.AccessTTL, check)
	}
	time.AfterFunc(g.opts.AccessTTL, check)
}
