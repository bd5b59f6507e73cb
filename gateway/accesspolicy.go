package gateway

import (
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	toolscache "k8s.io/client-go/tools/cache"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/objectevents"
	"github.com/switchboard-mcp/switchboard/policy"
)

// accessPolicies are the MCPAccessPolicies the informer holds, compiled once per
// generation (policy.Compile) and indexed by namespace. A namespace's slice is sorted in
// Decide's order and replaced whole on every change, never modified, so a decision reads
// it without holding the lock.
type accessPolicies struct {
	mu    sync.RWMutex
	byKey map[connector.Key]*policy.Compiled
	byNS  map[string][]*policy.Compiled
}

// in returns the compiled policies of namespace, sorted; nil when it has none.
func (a *accessPolicies) in(namespace string) []*policy.Compiled {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.byNS[namespace]
}

// put records c, the compiled policy of key.
func (a *accessPolicies) put(key connector.Key, c *policy.Compiled) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.byKey[key] = c
	a.reindexLocked(key.Namespace)
}

// current returns the compiled policy of key when it was compiled from generation.
func (a *accessPolicies) current(key connector.Key, generation int64) (*policy.Compiled, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	c, ok := a.byKey[key]
	return c, ok && c.Generation() == generation
}

func (a *accessPolicies) remove(key connector.Key) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.byKey, key)
	a.reindexLocked(key.Namespace)
}

func (a *accessPolicies) reindexLocked(namespace string) {
	var list []*policy.Compiled
	for k, c := range a.byKey {
		if k.Namespace == namespace {
			list = append(list, c)
		}
	}
	if len(list) == 0 {
		delete(a.byNS, namespace)
		return
	}
	policy.Sort(list)
	a.byNS[namespace] = list
}

// UpdatePolicy records the latest state of an MCPAccessPolicy, compiling it when its
// generation is new; the callers of the namespace's servers and toolsets hear that their
// tools may have changed. A policy that does not compile is kept in its fail-closed form
// (policy.Compile): it refuses every request to what it selects, and its status says why.
func (g *Gateway) UpdatePolicy(obj *mcpv1alpha1.MCPAccessPolicy) {
	key := connector.Key{Namespace: obj.Namespace, Name: obj.Name}
	if _, ok := g.policies.current(key, obj.Generation); ok {
		return
	}
	c, err := policy.Compile(obj)
	if err != nil {
		g.log.V(1).Info("An access policy does not compile: it refuses every request to what it selects",
			"policy", key.String(), "reason", err.Error())
	}
	g.policies.put(key, c)
	g.policiesChanged(key.Namespace)
}

// DeletePolicy forgets an MCPAccessPolicy.
func (g *Gateway) DeletePolicy(key connector.Key) {
	g.policies.remove(key)
	g.policiesChanged(key.Namespace)
}

// PolicyEventHandler keeps the gateway's MCPAccessPolicies in step with an informer.
func (g *Gateway) PolicyEventHandler() toolscache.ResourceEventHandler {
	return objectevents.Handler(g.UpdatePolicy, func(o *mcpv1alpha1.MCPAccessPolicy) {
		g.DeletePolicy(connector.Key{Namespace: o.Namespace, Name: o.Name})
	})
}

// policiesChanged tells the clients of namespace's endpoints that their tools may have
// changed: toolset sessions recompute theirs (and tell their client when they did), and
// the clients of server sessions get notifications/tools/list_changed, after which
// their next tools/list is filtered under the new policies.
func (g *Gateway) policiesChanged(namespace string) {
	g.resyncToolsets(func(s *toolsetSession) bool { return s.key.Namespace == namespace })
	g.mu.RLock()
	var told []*session
	for _, s := range g.sessions {
		if s != nil && s.key.Namespace == namespace {
			told = append(told, s)
		}
	}
	g.mu.RUnlock()
	for _, s := range told {
		if s.isInitialized() && !s.isEnding() {
			s.notifyClient(&jsonrpc.Request{Method: "notifications/tools/list_changed"})
		}
	}
}

// policyCaller is the one conversion of who calls into what access policies judge: an
// MCPIdentityProvider caller's claims are the ones identity keeps for policies
// (identity.PolicyClaims), a Kubernetes token's none.
func policyCaller(c *identity.Caller) policy.Caller {
	return policy.Caller{Username: c.Username, UID: c.UID, Groups: c.Groups, Extra: c.Extra, Claims: c.Claims}
}

// serverTarget is the access policies' name for the endpoint of srv.
func serverTarget(srv *server) policy.Target {
	t := policy.Target{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Namespace: srv.namespace, Name: srv.name}
	if srv.obj != nil {
		t.Labels = srv.obj.Labels
	}
	return t
}

// toolsetTarget is the access policies' name for the endpoint of the toolset key names.
func (g *Gateway) toolsetTarget(key connector.Key) policy.Target {
	t := policy.Target{Kind: mcpv1alpha1.AccessPolicyTargetMCPToolset, Namespace: key.Namespace, Name: key.Name}
	if ts := g.toolset(key); ts != nil {
		t.Labels = ts.Labels
	}
	return t
}

// selecting reports whether some Enforce, and some Audit, policy of policies selects t.
func selecting(policies []*policy.Compiled, t policy.Target) (enforce, audit bool) {
	for _, p := range policies {
		if p == nil || !p.Selects(t) {
			continue
		}
		if p.Enforcement() == mcpv1alpha1.AccessPolicyAudit {
			audit = true
		} else {
			enforce = true
		}
	}
	return enforce, audit
}

// policyTool is the definition of a server's tool the access policies see: its name,
// and the annotations of its pinned definition where the server is pinned, else of the
// definition the server published in its status.
func (g *Gateway) policyTool(srv *server, name string) policy.Tool {
	srv.defsOnce.Do(func() {
		srv.defs = map[string]policy.Tool{}
		if srv.obj != nil {
			for _, t := range srv.obj.Status.Tools {
				srv.defs[t.Name] = policy.Tool{Name: t.Name, Title: t.Title, ReadOnlyHint: t.ReadOnlyHint,
					DestructiveHint: t.DestructiveHint, IdempotentHint: t.IdempotentHint, OpenWorldHint: t.OpenWorldHint}
			}
		}
		if srv.pinned == "" {
			return
		}
		for _, t := range g.pinnedSet(srv).byName {
			srv.defs[t.Name] = policy.Tool{Name: t.Name, Title: t.Title, ReadOnlyHint: &t.ReadOnlyHint,
				DestructiveHint: t.DestructiveHint, IdempotentHint: &t.IdempotentHint, OpenWorldHint: t.OpenWorldHint}
		}
	})
	if t, ok := srv.defs[name]; ok {
		return t
	}
	return policy.Tool{Name: name}
}

// hasPolicies reports whether any access policy is known in namespace.
func (g *Gateway) hasPolicies(namespace string) bool { return len(g.policies.in(namespace)) > 0 }
