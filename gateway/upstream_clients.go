package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/sessionless"
)

// upstreamClientKey names an upstream client: a server, and the caller for a server of
// the session era, whose session may hold state of its caller (roots, log level,
// subscriptions, whatever the server keeps per session) that no other caller may see.
// Servers of the sessionless era keep no state between requests: their client is shared
// by every caller, with caller "".
type upstreamClientKey struct {
	server connector.Key
	caller string
	// perCaller is the caller of a sessionless server whose credentials follow the
	// caller: its client carries that caller's upstream token. It is no session of the
	// caller's (no server slot, no elicitation on a session).
	perCaller string
}

// upstreamClient is a go-sdk client session with one server that the stateless front
// door relays requests to. Its first user connects it; the others wait for ready.
type upstreamClient struct {
	key   upstreamClientKey
	ready chan struct{}
	err   error // set before ready closes
	cs    *mcp.ClientSession
	up    *connector.Upstream // the connector's connection cs runs on
	// pin is what the pin remembers of this client's connection (see observePin).
	pin pinWatch
	// release gives back the session slots a session-era client holds.
	release func()
	// inputs holds the calls whose elicitations reach their clients as input_required.
	inputs *inputBridge
	// frontServer answers the requests relayed through this client (see front).
	frontOnce   sync.Once
	frontServer *mcp.Server
	// paramHeaders are the tools registered on frontServer for their Mcp-Param headers.
	paramHeaders sessionless.ParamHeaders

	mu       sync.Mutex
	inflight int
	lastUsed time.Time
	ended    bool
}

// upstreamClients are the stateless front door's client sessions with the servers,
// connected on first use and closed when idle for the gateway's IdleTimeout.
type upstreamClients struct {
	g  *Gateway
	mu sync.Mutex
	m  map[upstreamClientKey]*upstreamClient
	// progress routes the upstream's progress notifications back to the request that
	// asked for them.
	progress sessionless.Progress
}

func newUpstreamClients(g *Gateway) *upstreamClients {
	return &upstreamClients{g: g, m: make(map[upstreamClientKey]*upstreamClient)}
}

// sessionless reports whether the server speaks the sessionless era (2026-07-28 and
// later) over Streamable HTTP, so that one client may serve every caller.
func (u *upstreamClients) sessionless(key connector.Key) bool {
	transport, version, ok := u.g.opts.Pool.Protocol(key)
	return ok && transport == connector.TransportStreamableHTTP && version >= sessionlessVersion
}

// acquire returns a connected client for the caller's requests to the server, acting for
// who; the caller must call done once its request is answered.
func (u *upstreamClients) acquire(ctx context.Context, key connector.Key, caller *identity.Caller, who *connector.Caller) (c *upstreamClient, done func(), err error) {
	ck := upstreamClientKey{server: key}
	perCaller := u.g.opts.Pool.PerCaller(key)
	switch {
	case !u.sessionless(key):
		ck.caller = caller.Key
	case perCaller:
		// Sessionless, but its credentials follow the caller: a client of the
		// caller's own, so that no request travels with another caller's token.
		ck.perCaller = caller.Key
	}
	if perCaller {
		u.g.opts.Pool.PresentCaller(key, *who)
	}
	for {
		u.mu.Lock()
		c = u.m[ck]
		fresh := c == nil
		if fresh {
			c = &upstreamClient{key: ck, ready: make(chan struct{}), inputs: &inputBridge{calls: map[*bridgedCall]struct{}{}}}
			u.m[ck] = c
		}
		c.mu.Lock()
		c.inflight++
		c.mu.Unlock()
		u.mu.Unlock()
		if fresh {
			c.err = u.connect(ctx, c, caller, who)
			close(c.ready)
			if c.err != nil {
				u.drop(c)
			}
		}
		select {
		case <-c.ready:
		case <-ctx.Done():
			u.done(c)
			return nil, nil, ctx.Err()
		}
		if c.err != nil {
			u.done(c)
			return nil, nil, c.err
		}
		c.mu.Lock()
		ended := c.ended
		c.mu.Unlock()
		if !ended {
			return c, func() { u.done(c) }, nil
		}
		// Ended between lookup and use: the next lookup finds none or a new one.
		u.done(c)
	}
}

// connect opens the client session; a session-era client is a session of the caller's
// with the server, and first takes what a session takes (see takeServerSession), so that
// every session quota holds on this path too.
func (u *upstreamClients) connect(ctx context.Context, c *upstreamClient, caller *identity.Caller, who *connector.Caller) error {
	if c.key.caller != "" {
		release, err := u.g.takeServerSession(c.key.server, caller)
		if err != nil {
			return err
		}
		c.release = release
	}
	opts := &mcp.ClientOptions{
		// input_required results are the downstream client's to answer: they pass through.
		MultiRoundTrip:              &mcp.MultiRoundTripOptions{Disabled: true},
		ProgressNotificationHandler: u.relayProgress,
		// The server's tools changed: a pinned server's are judged again before the
		// next call (see observePin), and the front tells its listeners.
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			c.pin.forget()
			c.announce(u.g, "tools")
		},
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { c.announce(u.g, "prompts") },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { c.announce(u.g, "resources") },
	}
	if c.key.caller != "" {
		// A server of the session era asks its questions on the session: they reach
		// the client as input_required (see input_bridge.go).
		opts.ElicitationHandler = c.inputs.elicit
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-gateway", Version: "v1alpha1"}, opts)
	openCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), u.g.opts.ConnectTimeout)
	defer cancel()
	// The connector's connection: the same credentials, egress judgement at dial time,
	// redirect policy, limits and scrubbing as every other connection to the server.
	up, err := u.g.opts.Pool.OpenUpstream(openCtx, c.key.server, who)
	var cs *mcp.ClientSession
	if err == nil {
		if cs, err = client.Connect(openCtx, upstreamTransport{up: up}, nil); err != nil {
			_ = up.Close()
		}
	}
	if err != nil {
		if c.release != nil {
			c.release()
		}
		return &sessionRefusal{status: openRefusalStatus(err), err: fmt.Errorf("could not open a session with MCPServer %s: %w", c.key.server, err)}
	}
	c.cs, c.up = cs, up
	c.lastUsed = time.Now()
	go func() {
		_ = cs.Wait()
		u.end(c)
	}()
	time.AfterFunc(u.g.opts.IdleTimeout, func() { u.reapIfIdle(c) })
	return nil
}

// done marks one use of c finished.
func (u *upstreamClients) done(c *upstreamClient) {
	c.mu.Lock()
	c.inflight--
	c.lastUsed = time.Now()
	c.mu.Unlock()
}

// reapIfIdle closes c once it has been unused for the idle timeout, and otherwise looks
// again when it could be.
func (u *upstreamClients) reapIfIdle(c *upstreamClient) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	idle := time.Since(c.lastUsed)
	busy := c.inflight > 0
	c.mu.Unlock()
	if busy || idle < u.g.opts.IdleTimeout {
		time.AfterFunc(max(u.g.opts.IdleTimeout-idle, time.Second), func() { u.reapIfIdle(c) })
		return
	}
	u.end(c)
}

// end closes c and forgets it; only the first call counts.
func (u *upstreamClients) end(c *upstreamClient) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	c.mu.Unlock()
	u.drop(c)
	if c.cs != nil {
		_ = c.cs.Close()
	}
	if c.release != nil {
		c.release()
	}
}

// drop forgets c, if it is still the one held under its key.
func (u *upstreamClients) drop(c *upstreamClient) {
	u.mu.Lock()
	if u.m[c.key] == c {
		delete(u.m, c.key)
	}
	u.mu.Unlock()
}

// endServer closes the clients of a server (deleted, or its config changed) and, with
// caller set, only that caller's.
func (u *upstreamClients) endServer(key connector.Key, caller string) {
	u.mu.Lock()
	var ending []*upstreamClient
	for k, c := range u.m {
		if k.server == key && (caller == "" || k.caller == caller) {
			ending = append(ending, c)
		}
	}
	u.mu.Unlock()
	for _, c := range ending {
		go func() {
			<-c.ready
			u.end(c)
		}()
	}
}

// closeAll closes every client.
func (u *upstreamClients) closeAll() {
	u.mu.Lock()
	all := make([]*upstreamClient, 0, len(u.m))
	for _, c := range u.m {
		all = append(all, c)
	}
	u.mu.Unlock()
	for _, c := range all {
		select {
		case <-c.ready:
			u.end(c)
		default:
			go func() {
				<-c.ready
				u.end(c)
			}()
		}
	}
}

// relayProgress passes an upstream's progress notification to the request whose
// gateway token it carries; one for no request in flight is dropped.
func (u *upstreamClients) relayProgress(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
	if err := u.progress.Relay(ctx, req); err != nil {
		u.g.log.V(1).Info("Could not relay a progress notification", "reason", err.Error())
	}
}

// announce relays a list change the server announced to the sessionless era's clients
// that listen for it on this client's front (subscriptions/listen).
func (c *upstreamClient) announce(g *Gateway, kind string) {
	select {
	case <-c.ready:
	default:
		// Announced while connecting: no client has listened through this one yet.
		return
	}
	if c.err == nil {
		sessionless.AnnounceListChanged(c.front(g), kind)
	}
}
