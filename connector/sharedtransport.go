package connector

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/switchboard-mcp/switchboard/internal/httpclient"
)

// Shared transports.
//
// Every session has its own httpStack (headers, OAuth token source, redirect checks,
// limits, observer, egress decider), but the http.Transports beneath them, with their
// connection pools, TLS roots and idle keep-alive connections, are shared between the
// stacks whose connection settings are equal. Before they were shared, each server paid
// for a copy of the system roots, two transports and an idle connection with its read and
// write goroutines; a fleet of servers on a few origins now keeps a few idle connections
// in all.
//
// A shared transport is keyed on every setting that shapes a connection (the CA bundle,
// the connect timeout, which also bounds the TLS handshake, and the resolver) and on the
// decision identity of the egress decider: two deciders share a transport only when
// sameDecision says they allow exactly the same dials and redirects (for egress rules,
// [egress.ServerRules.Equal]). The security invariants follow from that key:
//   - a connection in a shared pool was admitted by a decider that decides like every
//     decider of the stacks that use the pool, so no stack ever reuses a connection its
//     own decider would not open. The dial is judged by the decider of the stack whose
//     request caused it, as it was when the request started (a binding: the decider and
//     the transport chosen for it are one value, read once per request);
//   - a stack whose decider changes is not mutated in place: it acquires the shared
//     transport of the new decision (so every later request dials, or reuses, only
//     connections that decision admitted) and releases the old one. Responses still
//     being read from the old transport are judged again against the new decider
//     before their next read (judgedBody), so nothing more arrives over a connection
//     the new decision denies, and the session re-judges its live destinations as before;
//   - what is per server stays per request: configured headers, OAuth tokens and session
//     headers are set by the stack's roundTripper on each request, only for the
//     configured origin, and the shared transport sees nothing but the finished request.
//
// A transport with no stack left is dropped and its idle connections closed.
var transports = &transportCache{entries: map[transportKey][]*sharedTransport{}}

// transportKey is what a shared transport is keyed on besides the resolver and the
// egress decision, which are compared by value, not hashed.
type transportKey struct {
	caBundle       string
	connectTimeout time.Duration
}

// sharedTransport is one pair of transports (plain http and https) with its connection
// pools, used by every stack whose settings equal its key.
type sharedTransport struct {
	key      transportKey
	resolver Resolver
	// decider is the decision every stack using this transport makes; it never changes.
	decider EgressDecider
	dialer  net.Dialer
	httpclient.Transports
	refs int // guarded by transportCache.mu
}

// transportCache holds the shared transports.
type transportCache struct {
	mu      sync.Mutex
	entries map[transportKey][]*sharedTransport
}

// acquire returns the shared transport for cfg's connection settings and decider d,
// creating it when no stack uses one yet. Every acquire is matched by one release.
func (c *transportCache) acquire(cfg Config, d EgressDecider) (*sharedTransport, error) {
	key := transportKey{caBundle: string(cfg.CABundle), connectTimeout: cfg.ConnectTimeout}
	resolver := cfg.Resolver
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.entries[key] {
		if sameValue(t.resolver, resolver) && sameDecision(t.decider, d) {
			t.refs++
			return t, nil
		}
	}
	t, err := newSharedTransport(key, resolver, d)
	if err != nil {
		return nil, err
	}
	t.refs = 1
	c.entries[key] = append(c.entries[key], t)
	return t, nil
}

// release gives up one use of t; the last one closes its idle connections and forgets it.
func (c *transportCache) release(t *sharedTransport) {
	c.mu.Lock()
	t.refs--
	last := t.refs == 0
	if last {
		list := c.entries[t.key]
		for i, e := range list {
			if e == t {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(c.entries, t.key)
		} else {
			c.entries[t.key] = list
		}
	}
	c.mu.Unlock()
	if last {
		t.CloseIdleConnections()
	}
}

// count returns how many shared transports exist for cfg's connection settings.
func (c *transportCache) count(cfg Config) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries[transportKey{caBundle: string(cfg.CABundle), connectTimeout: cfg.ConnectTimeout}])
}

func newSharedTransport(key transportKey, resolver Resolver, d EgressDecider) (*sharedTransport, error) {
	roots, err := httpclient.RootsWith([]byte(key.caBundle))
	if err != nil {
		return nil, newError(ReasonInvalidSpec, "CA bundle holds no PEM certificate")
	}
	t := &sharedTransport{
		key:      key,
		resolver: resolver,
		decider:  d,
		dialer:   net.Dialer{Timeout: key.connectTimeout, KeepAlive: 30 * time.Second},
	}
	t.Transports = httpclient.NewTransports(httpclient.Options{
		Roots:          roots,
		Dial:           func(scheme string) httpclient.DialFunc { return t.dialFunc(scheme) },
		ConnectTimeout: key.connectTimeout,
		// Shared by every server on an origin and by every gateway session calling
		// one: as many kept as are busy at once, so neither a fleet probing nor agents
		// calling in parallel dial for every request. An idle connection costs its
		// buffers and two goroutines, about 20 KiB, and is closed after a minute and a
		// half idle.
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
	})
	return t, nil
}

// binding is a stack's decider together with the shared transport of its decision. A
// request reads it once, so the transport it travels on and the decider that judges its
// dials always belong together.
type binding struct {
	box       *deciderBox
	transport *sharedTransport
}

// dialRequest is what a dial learns from the request that caused it: the stack (for its
// observer) and the binding the request started under (whose decider judges the dial).
type dialRequest struct {
	stack   *httpStack
	binding *binding
}

type dialRequestKey struct{}

// dialRequestFrom returns the dialRequest a request context carries.
func dialRequestFrom(ctx context.Context) (dialRequest, bool) {
	r, ok := ctx.Value(dialRequestKey{}).(dialRequest)
	return r, ok && r.stack != nil && r.binding != nil
}

// retain takes one more use of t.
func (t *sharedTransport) retain() {
	transports.mu.Lock()
	t.refs++
	transports.mu.Unlock()
}
