package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/mcphttp"
	"github.com/switchboard-mcp/switchboard/internal/sessionless"
	"github.com/switchboard-mcp/switchboard/internal/toolsets"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
	"github.com/switchboard-mcp/switchboard/policy"
)

// toolsetRecheck is how often a session that has listed its tools recomputes them even
// when nothing told it to: a caller's RBAC changes reach the gateway only through its
// access reviews, which are cached for AccessTTL.
const toolsetRecheck = 5 * time.Second

// upstreamProtocolVersion is the version a toolset session's go-sdk client asks its
// origins for.
const upstreamProtocolVersion = "2025-11-25"

// toolsetSession is one client session of a toolset endpoint: a go-sdk server of its
// own whose tools are the toolset's exposed tools the caller may use, and, opened on
// first need, one upstream session per origin server through which its calls go.
type toolsetSession struct {
	g       *Gateway
	id      string // Mcp-Session-Id; a bearer secret, never logged
	seq     uint64
	key     connector.Key
	caller  *identity.Caller
	audit   logr.Logger
	started time.Time

	server    *mcp.Server
	transport *mcp.StreamableServerTransport
	session   *mcp.ServerSession
	activity  *mcphttp.Activity

	ctx    context.Context // ends with the session
	cancel context.CancelFunc

	// sessionless says the session serves its caller's sessionless requests: go-sdk's
	// stateless handler connects each to the session's server, and no client transport
	// is connected.
	sessionless bool

	// who is the caller as of its latest request, with the token it carried: the
	// origins whose credentials follow the caller act for it.
	who atomic.Pointer[connector.Caller]

	// syncMu serialises recomputing the tools.
	syncMu sync.Mutex

	mu         sync.Mutex
	origins    map[string]*origin // by server name
	routes     map[string]route   // exposed name -> origin
	unlisted   map[string]string  // origin name -> why its tools could not be listed
	search     *searchTools       // in Search mode, the index over the exposed tools
	registered map[string]string  // exposed name -> JSON of the definition served
	prefixes   map[string]string  // origin name -> its prefix, for the origins exposed
	// wantFeatures says the client has asked about resources, prompts or completions:
	// the origins' features are listed and kept current from then on.
	wantFeatures       bool
	features           featureRoutes
	registeredFeatures map[string]string // kind and exposed name -> JSON of the definition served
	resourceNews       listNews
	promptNews         listNews
	// announced says which lists ("tools", "resources", "prompts") an origin announced
	// a change of since the last sync: the client is told even when nothing it sees
	// changed, as the origin's own client would be.
	announced map[string]bool
	// logLevel is the logging level the client set (logging/setLevel), which every
	// origin of the session is told so that its log messages reach the client.
	logLevel mcp.LoggingLevel //nolint:staticcheck // logging: see originClientOptions
	listed   bool             // the client has listed tools: keep them current
	// toolNews, resourceNews and promptNews say which list changes the client has
	// not listed yet (see listNews).
	toolNews listNews
	dirty    bool // a resync is wanted while one runs
	syncing  bool
	ending   bool
	pending  int // the client's calls being served, bounded by MaxPendingCalls
}

// requestedVersion is the protocol version the client asked for in initialize, which
// go-sdk's server settles on when it knows it; empty before initialize.
func (s *toolsetSession) requestedVersion() string {
	if s.session == nil {
		return ""
	}
	if p := s.session.InitializeParams(); p != nil {
		return p.ProtocolVersion
	}
	return ""
}

// beginPending counts one more of the client's calls being served, unless
// MaxPendingCalls are already.
func (s *toolsetSession) beginPending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending >= s.g.opts.MaxPendingCalls {
		return false
	}
	s.pending++
	return true
}

func (s *toolsetSession) endPending() {
	s.mu.Lock()
	s.pending--
	s.mu.Unlock()
}

// route is where an exposed tool's calls go.
type route struct {
	server, tool string
}

// origin is the upstream session of one origin server, opened on first need.
type origin struct {
	name string
	once sync.Once
	err  error
	up   *connector.Upstream
	cs   *mcp.ClientSession
	// release gives back the slot the upstream session holds of its server's
	// spec.gateway.maxSessions; nil until it holds one.
	release func()

	mu    sync.Mutex
	tools []*mcp.Tool // nil until listed, or after list_changed
	// features are the origin's resources, templates and prompts; nil until listed, or
	// after a list change.
	features *connector.Features
	// subscriptions end the client's resource subscriptions with the origin, by the
	// exposed URI the client subscribed with: at most maxSubscriptionsPerOrigin.
	subscriptions map[string]func()
	calls         []context.Context
	// inputs holds the calls whose elicitations reach a sessionless client as
	// input_required.
	inputs *inputBridge
	// pin is what the pin remembers of the origin's upstream session: once it served
	// tools that are not its server's pinned ones, its calls are refused for the rest
	// of the upstream session.
	pin pinWatch
}

func newToolsetSession(g *Gateway, id string, seq uint64, key connector.Key, caller *identity.Caller) *toolsetSession {
	s := &toolsetSession{
		g: g, id: id, seq: seq, key: key, caller: caller, started: time.Now(),
		transport:  &mcp.StreamableServerTransport{SessionID: id},
		origins:    map[string]*origin{},
		routes:     map[string]route{},
		registered: map[string]string{},
		prefixes:   map[string]string{}, registeredFeatures: map[string]string{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.audit = g.audit.WithValues("caller", caller.Username, "namespace", key.Namespace, "toolset", key.Name, "session", seq)
	s.activity = mcphttp.NewActivity(g.opts.IdleTimeout, func() { s.end(errIdle) })
	return s
}

// connect builds the session's go-sdk server and connects it to the transport. Listing
// or calling tools first brings the tools up to date.
func (s *toolsetSession) connect() error {
	// The toolset is the server its clients see: its own name and description, never an
	// origin's.
	info := &mcp.Implementation{Name: s.key.Name, Title: s.key.String(), Version: "v1alpha1"}
	if ts := s.g.toolset(s.key); ts != nil {
		info.Description = ts.Spec.Description
	}
	caps := s.toolsetCapabilities(s.ctx)
	opts := &mcp.ServerOptions{
		Capabilities: caps,
		// The toolset's answers are for its one caller (see sessionless.CacheScope).
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			c.CacheScope = sessionless.CacheScope(s.g.opts.Authenticator != nil)
		},
	}
	if caps.Resources != nil && caps.Resources.Subscribe {
		// Only then: go-sdk offers subscriptions whenever it has a handler for them.
		opts.SubscribeHandler, opts.UnsubscribeHandler = s.subscribe, s.unsubscribe
	}
	s.server = mcp.NewServer(info, opts)
	s.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if strings.HasPrefix(method, "notifications/") {
				return next(ctx, method, req)
			}
			t := target{key: s.key, toolset: true, caller: s.caller}
			if s.sessionless {
				t.version = sessionlessVersion
			} else {
				t.session, t.version = tracing.SessionID(s.id), s.requestedVersion()
			}
			ctx, span := s.g.startStatelessSpan(ctx, method, req, t)
			if span == nil {
				return next(ctx, method, req)
			}
			res, err := next(ctx, method, req)
			endSpan(span, outcomeOf(res, err))
			return res, err
		}
	})
	s.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if !strings.HasPrefix(method, "notifications/") {
				if !s.beginPending() {
					return nil, &jsonrpc.Error{Code: codeUnavailable,
						Message: fmt.Sprintf("more than %d calls of this session are waiting for an answer", s.g.opts.MaxPendingCalls)}
				}
				defer s.endPending()
			}
			if method == "tools/list" || method == "tools/call" || featureMethod(method) {
				s.mu.Lock()
				first := !s.listed
				firstFeatures := featureMethod(method) && !s.wantFeatures
				s.listed = true
				s.wantFeatures = s.wantFeatures || featureMethod(method)
				s.mu.Unlock()
				if first || firstFeatures {
					s.sync(ctx)
				}
				if first {
					go s.recheck()
				}
			}
			switch method {
			case "resources/list", "resources/templates/list":
				s.mu.Lock()
				s.resourceNews.listed()
				s.mu.Unlock()
			case "prompts/list":
				s.mu.Lock()
				s.promptNews.listed()
				s.mu.Unlock()
			case "logging/setLevel":
				res, err := next(ctx, method, req)
				if params, ok := req.GetParams().(*mcp.SetLoggingLevelParams); ok && err == nil { //nolint:staticcheck // logging: see originClientOptions
					s.setLogLevel(ctx, params.Level)
				}
				return res, err
			case "completion/complete":
				// Routed here, not by go-sdk: a toolset offers completions only when an
				// origin does (toolsetCapabilities), which a completion handler of
				// go-sdk's own would always advertise.
				params, _ := req.GetParams().(*mcp.CompleteParams)
				return s.complete(ctx, params)
			}
			if method == "tools/list" {
				s.mu.Lock()
				s.toolNews.listed()
				s.mu.Unlock()
			}
			if method == "tools/call" {
				if params, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
					s.mu.Lock()
					_, served := s.registered[params.Name]
					unlisted := s.unlisted
					s.mu.Unlock()
					if !served && len(unlisted) > 0 {
						// go-sdk would answer "unknown tool" alone; the tool may be one of
						// an origin that could not be listed for this caller.
						return nil, &jsonrpc.Error{Code: codeRefused, Message: unknownToolMessage(params.Name, unlisted)}
					}
				}
			}
			return next(ctx, method, req)
		}
	})
	// go-sdk tells the client of every change to the server's tools, including the
	// first registration that answers its first tools/list: only news the client has
	// not listed yet goes out.
	s.server.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			var stale = true
			switch method {
			case "notifications/tools/list_changed":
				s.mu.Lock()
				stale = s.toolNews.stale()
				s.mu.Unlock()
			case "notifications/resources/list_changed":
				s.mu.Lock()
				stale = s.resourceNews.stale()
				s.mu.Unlock()
			case "notifications/prompts/list_changed":
				s.mu.Lock()
				stale = s.promptNews.stale()
				s.mu.Unlock()
			}
			if !stale {
				return nil, nil
			}
			return next(ctx, method, req)
		}
	})
	if s.sessionless {
		s.g.watchAccess(s.caller, resourceToolsets, s.key, s.isEnding, func() { s.end(errToolsetAccessRevoked) })
		return nil
	}
	ss, err := s.server.Connect(s.ctx, s.transport, nil)
	if err != nil {
		return fmt.Errorf("connecting the client transport: %w", err)
	}
	s.session = ss
	go func() {
		_ = ss.Wait()
		s.end(errClientEnded)
	}()
	s.g.watchAccess(s.caller, resourceToolsets, s.key, s.isEnding, func() { s.end(errToolsetAccessRevoked) })
	return nil
}

// recheck recomputes the tools every toolsetRecheck (or AccessTTL, when shorter) until
// the session ends.
func (s *toolsetSession) recheck() {
	t := time.NewTicker(min(toolsetRecheck, s.g.opts.AccessTTL))
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.resync()
		}
	}
}

// resync recomputes the tools in the background once the client has listed them; a
// request while one runs makes it run once more.
func (s *toolsetSession) resync() {
	s.mu.Lock()
	if !s.listed || s.ending {
		s.mu.Unlock()
		return
	}
	if s.syncing {
		s.dirty = true
		s.mu.Unlock()
		return
	}
	s.syncing = true
	s.mu.Unlock()
	go func() {
		for {
			s.sync(s.ctx)
			s.mu.Lock()
			if !s.dirty || s.ending {
				s.syncing, s.dirty = false, false
				s.mu.Unlock()
				return
			}
			s.dirty = false
			s.mu.Unlock()
		}
	}()
}

// sync recomputes which tools the session serves: the toolset's selection, the origins'
// tools (listed over the session's upstream sessions) after the origins' own tool
// policy, the toolset's rules, and only servers the caller may use. The go-sdk server
// tells the client when the list changed.
func (s *toolsetSession) sync(ctx context.Context) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	want := map[string]*mcp.Tool{}
	routes := map[string]route{}
	unlisted := map[string]string{}
	prefixes := map[string]string{}
	ts := s.g.toolset(s.key)
	var usable []toolsets.Selected
	if ts != nil {
		usable = s.expose(ctx, ts, want, routes, unlisted)
	}
	for _, sel := range usable {
		prefixes[sel.Name] = sel.Prefix
	}
	s.mu.Lock()
	wantFeatures := s.wantFeatures
	s.prefixes = prefixes
	s.mu.Unlock()
	if wantFeatures {
		spec := &mcpv1alpha1.MCPToolsetSpec{}
		if ts != nil {
			spec = &ts.Spec
		}
		s.registerFeatures(s.exposeFeatures(ctx, spec, usable))
	}
	var search *searchTools
	if ts != nil && ts.Spec.Discovery == mcpv1alpha1.ToolsetDiscoverySearch {
		// The client sees find_tools and call_tool; the exposed tools are found through
		// the index and called through call_tool.
		search = newSearchTools(s.g.opts.NewToolIndex, want)
		want = search.tools()
	}

	s.mu.Lock()
	if s.ending {
		s.mu.Unlock()
		return
	}
	var removed []string
	for name := range s.registered {
		if _, ok := want[name]; !ok {
			removed = append(removed, name)
			delete(s.registered, name)
		}
	}
	added := map[string]*mcp.Tool{}
	for name, t := range want {
		raw, _ := json.Marshal(t)
		if s.registered[name] != string(raw) {
			added[name] = t
			s.registered[name] = string(raw)
		}
	}
	s.routes = routes
	s.unlisted = unlisted
	s.search = search
	announced := s.announced["tools"]
	delete(s.announced, "tools")
	s.mu.Unlock()

	if len(removed) == 0 && len(added) == 0 {
		if !announced || len(want) == 0 {
			return
		}
		// An origin announced a change this client does not see: one served tool is
		// registered again, unchanged, which has go-sdk announce the list.
		name := slices.Min(slices.Collect(maps.Keys(want)))
		added[name] = want[name]
	}
	// The version goes up before the change, so that the notification go-sdk sends
	// for it (after a short delay, from another goroutine) is never taken for news
	// the client has listed; it is applied after, so that a list taken in between
	// does not count as seen.
	s.mu.Lock()
	s.toolNews.version++
	version := s.toolNews.version
	s.mu.Unlock()
	if len(removed) > 0 {
		s.server.RemoveTools(removed...)
	}
	for _, t := range added {
		handler := s.callTool
		if search != nil {
			handler = s.searchHandler(t.Name)
		}
		s.server.AddTool(t, handler)
	}
	s.mu.Lock()
	s.toolNews.applied = version
	s.mu.Unlock()
}

// expose fills want and routes with the tools the caller may see, and returns the
// origins they come from: Ready, usable by the caller and, when pinned, serving their
// pinned tools.
func (s *toolsetSession) expose(ctx context.Context, ts *mcpv1alpha1.MCPToolset, want map[string]*mcp.Tool, routes map[string]route, unlisted map[string]string) []toolsets.Selected {
	selected, _ := toolsets.Select(ts, s.g.serversIn(ts.Namespace))
	defs := map[string]map[string]*mcp.Tool{}
	var origins []toolsets.Origin
	var usable []toolsets.Selected
	prefixes := map[string]string{}
	for _, sel := range selected {
		prefixes[sel.Name] = sel.Prefix
	}
	for _, sel := range selected {
		srv := s.g.server(connector.Key{Namespace: ts.Namespace, Name: sel.Name})
		if srv == nil || !srv.ready || !s.mayUse(ctx, sel.Name) {
			continue
		}
		o := s.origin(sel.Name)
		tools, err := o.list(ctx, s)
		if err != nil {
			s.g.log.V(1).Info("Could not list an origin's tools", "toolset", s.key.String(), "server", sel.Name, "reason", err.Error())
			// The connector's words, scrubbed of every secret: a caller whose upstream
			// token could not be had learns why when it calls a tool it cannot see.
			unlisted[sel.Name] = err.Error()
			continue
		}
		byName := map[string]*mcp.Tool{}
		var names []string
		var kept []*mcp.Tool
		for _, t := range tools {
			if srv.toolRefusal(t.Name) == "" {
				byName[t.Name] = t
				names = append(names, t.Name)
				kept = append(kept, t)
			}
		}
		if why := o.judgePinned(s, srv, kept); why != "" {
			continue
		}
		defs[sel.Name] = byName
		origins = append(origins, toolsets.Origin{Server: sel.Name, Prefix: sel.Prefix, Tools: names})
		usable = append(usable, sel)
	}
	q := &query{caller: s.caller, toolset: &s.key}
	for _, t := range toolsets.Expose(&ts.Spec, origins).Tools {
		srv := s.g.server(connector.Key{Namespace: ts.Namespace, Name: t.Server})
		if srv == nil || !s.g.listable(q, srv, t.Tool, t.Name) {
			continue
		}
		if def := exposedTool(defs[t.Server][t.Tool], t.Name, t.Description, t.HasDescription); def != nil {
			def.Meta = exposeUIMeta(prefixes[t.Server], t.Server, def.Meta)
			want[t.Name] = def
			routes[t.Name] = route{server: t.Server, tool: t.Tool}
		}
	}
	return usable
}

// mayUse reports whether the caller may use an origin server (cached like every access
// review); a failed review counts as no.
func (s *toolsetSession) mayUse(ctx context.Context, server string) bool {
	return s.g.mayUse(ctx, s.caller, connector.Key{Namespace: s.key.Namespace, Name: server})
}

// origin returns the session's origin record of a server, creating it.
func (s *toolsetSession) origin(name string) *origin {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.origins[name]
	if o == nil {
		o = &origin{name: name, inputs: &inputBridge{calls: map[*bridgedCall]struct{}{}}}
		s.origins[name] = o
	}
	return o
}

// originMeta returns the _meta to send an origin in place of the client's: the
// sessionless era's own keys only to an origin of that era (its client session adds the
// protocol version), and a progress token of the gateway's own, under which the origin's
// progress reaches the client's request until forget.
func (s *toolsetSession) originMeta(ctx context.Context, req *mcp.CallToolRequest, cs *mcp.ClientSession, in mcp.Meta) (meta mcp.Meta, forget func()) {
	forget = func() {}
	if len(in) == 0 {
		return nil, forget
	}
	if req == nil {
		req = &mcp.CallToolRequest{}
	}
	return s.g.upstreamClients.progress.Meta(ctx, req, in, sessionless.Speaks(cs))
}

// originClientOptions are the options of the go-sdk client of an origin. A session's
// client relays the origin's elicitation and sampling requests to the session's client;
// a sessionless session has no client to send them to, so its origin clients offer
// neither.
func (s *toolsetSession) originClientOptions(o *origin) *mcp.ClientOptions {
	opts := &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return s.session.Elicit(o.callContext(ctx), req.Params)
		},
		// Sampling is deprecated as of 2026-07-28 but still spoken by servers of
		// earlier versions: a toolset relays it like the server endpoint does.
		CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) { //nolint:staticcheck // see above
			return s.session.CreateMessage(o.callContext(ctx), req.Params) //nolint:staticcheck // see above
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			o.mu.Lock()
			o.tools = nil
			o.mu.Unlock()
			s.announce("tools")
			s.resync()
		},
		// An origin's log messages reach the client as the toolset's, at the level
		// the client set (logging is deprecated as of 2026-07-28, like sampling).
		LoggingMessageHandler: func(ctx context.Context, req *mcp.LoggingMessageRequest) { //nolint:staticcheck // see above
			if s.session != nil && req.Params != nil {
				_ = s.session.Log(o.callContext(ctx), req.Params) //nolint:staticcheck // see above
			}
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { s.featuresChanged(o, "resources") },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { s.featuresChanged(o, "prompts") },
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			if req.Params != nil {
				s.resourceUpdated(o, req.Params.URI)
			}
		},
	}
	opts.ProgressNotificationHandler = s.g.upstreamClients.relayProgress
	if s.sessionless {
		// Elicitations reach the client as input_required; sampling has no way there.
		opts.ElicitationHandler, opts.CreateMessageHandler = o.inputs.elicit, nil //nolint:staticcheck // sampling: see above
		opts.LoggingMessageHandler = nil                                          //nolint:staticcheck // logging: see above
		// An origin's input_required result is the client's to answer: it passes through.
		opts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
	}
	return opts
}

// open opens the origin's upstream session once; a failure is forgotten so that the
// next need tries again.
func (o *origin) open(s *toolsetSession) (*mcp.ClientSession, error) {
	o.once.Do(func() {
		key := connector.Key{Namespace: s.key.Namespace, Name: o.name}
		ctx, cancel := context.WithTimeout(s.ctx, s.g.opts.ConnectTimeout)
		defer cancel()
		release, err := s.g.takeServerSlot(key, s.caller)
		if err != nil {
			o.err = err
			return
		}
		up, err := s.g.opts.Pool.OpenUpstream(ctx, key, s.who.Load())
		if err != nil {
			release()
			o.err = fmt.Errorf("could not open a session with MCPServer %s: %w", key, err)
			return
		}
		client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-toolset", Version: "v1alpha1"}, s.originClientOptions(o))
		// The initialize handshake the connector's Upstream expects first (it notes the
		// version it settles on), not the stateless discovery of 2026-07-28.
		version := upstreamProtocolVersion
		if s.sessionless {
			// A sessionless client's origins are spoken to in the newest era each knows
			// (server/discover first), so that the client's round trips reach them.
			version = ""
		}
		cs, err := client.Connect(ctx, upstreamTransport{up}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			_ = up.Close()
			release()
			o.err = fmt.Errorf("could not initialize a session with MCPServer %s: %w", key, err)
			return
		}
		// The session may have ended meanwhile: its end closed the upstream sessions it
		// knew of, and this one it did not.
		s.mu.Lock()
		current := !s.ending && s.origins[o.name] == o
		if current {
			o.mu.Lock()
			o.up, o.cs, o.release = up, cs, release
			o.mu.Unlock()
		}
		s.mu.Unlock()
		if !current {
			_ = cs.Close()
			release()
			o.err = fmt.Errorf("could not open a session with MCPServer %s: the toolset session ended", key)
			return
		}
		s.audit.V(1).Info("Upstream session opened", "server", o.name, "transport", string(up.Transport()))
		if level := s.loggingLevel(); level != "" {
			_ = cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level}) //nolint:staticcheck // logging: see originClientOptions
		}
		go func() {
			_ = cs.Wait()
			s.originEnded(o)
		}()
	})
	if o.err != nil {
		err := o.err
		s.mu.Lock()
		if s.origins[o.name] == o {
			delete(s.origins, o.name)
		}
		s.mu.Unlock()
		return nil, err
	}
	return o.cs, nil
}

// originEnded forgets an origin whose upstream session ended (its config changed, an
// egress policy now denies it, the server went away): the next need opens a new one.
func (s *toolsetSession) originEnded(o *origin) {
	o.mu.Lock()
	release := o.release
	o.mu.Unlock()
	release()
	s.mu.Lock()
	if s.origins[o.name] == o {
		delete(s.origins, o.name)
	}
	s.mu.Unlock()
	s.resync()
}

// list returns the origin's tools, listing them over its upstream session when they
// are not known.
func (o *origin) list(ctx context.Context, s *toolsetSession) ([]*mcp.Tool, error) {
	o.mu.Lock()
	tools := o.tools
	o.mu.Unlock()
	if tools != nil {
		return tools, nil
	}
	cs, err := o.open(s)
	if err != nil {
		return nil, err
	}
	// Listed within the connector's discovery bounds: a hostile origin's endless pages
	// end in LimitExceeded, not in the manager's memory.
	o.mu.Lock()
	up := o.up
	o.mu.Unlock()
	tools, err = up.ListTools(ctx, cs)
	if err != nil {
		return nil, err
	}
	if tools == nil {
		tools = []*mcp.Tool{}
	}
	o.mu.Lock()
	o.tools = tools
	o.mu.Unlock()
	return tools, nil
}

// callContext returns the context of the client call that the origin's request (an
// elicitation, a sampling request) most likely belongs to: the latest call in flight to
// the origin, so go-sdk sends the request on that call's stream. Without one, the
// session's own context (the standalone stream).
func (o *origin) callContext(fallback context.Context) context.Context {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n := len(o.calls); n > 0 {
		return o.calls[n-1]
	}
	return fallback
}

func (o *origin) beginCall(ctx context.Context) {
	o.mu.Lock()
	o.calls = append(o.calls, ctx)
	o.mu.Unlock()
}

func (o *origin) endCall(ctx context.Context) {
	o.mu.Lock()
	if i := slices.Index(o.calls, ctx); i >= 0 {
		o.calls = slices.Delete(o.calls, i, i+1)
	}
	o.mu.Unlock()
}

// callTool relays one tools/call to the tool's origin, after the same checks as the
// server endpoint: the origin's tool policy and pin, the caller's use of the origin, and
// the origin's rate limit for the caller. One audit line per call.
func (s *toolsetSession) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return s.callExposed(ctx, req, req.Params)
}

// callExposed calls the exposed tool params name with the arguments, answers to the
// origin's questions (a sessionless client's retry) and _meta of params; req is the
// client's request.
func (s *toolsetSession) callExposed(ctx context.Context, req *mcp.CallToolRequest, params *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	name, args := params.Name, params.Arguments
	start := time.Now()
	s.mu.Lock()
	r, ok := s.routes[name]
	unlisted := s.unlisted
	s.mu.Unlock()
	if !ok {
		return nil, &jsonrpc.Error{Code: codeRefused, Message: unknownToolMessage(name, unlisted)}
	}
	key := connector.Key{Namespace: s.key.Namespace, Name: r.server}
	span := trace.SpanFromContext(ctx)
	var decided []any // the audit line's fields of the access policy that let it run
	audit := func(outcome string, extra ...any) {
		s.g.metrics.call(key, "tools/call", outcome, time.Since(start))
		kv := append([]any{"tool", clip(name), "server", r.server, "serverTool", clip(r.tool), "outcome", outcome,
			"duration", durationSince(start)}, extra...)
		if len(extra) == 0 {
			kv = append(kv, decided...)
		}
		if span.SpanContext().HasTraceID() {
			kv = append(kv, "traceID", span.SpanContext().TraceID().String())
		}
		s.audit.Info("Tool call", kv...)
	}
	if span.IsRecording() {
		// The exposed name is one of the toolset's own: the route found it.
		nameTool(span, "tools/call", name, true)
		span.SetAttributes(tracing.Origin.String(r.server))
	}
	q := &query{caller: s.caller, server: key, toolset: &s.key, exposed: name, method: policy.MethodToolsCall,
		tool: r.tool, arguments: args, log: s.audit, who: []any{"server", key.Name}, audit: audit, approve: s.approver(req), later: s.sessionless}
	if o := s.existingOrigin(r.server); o != nil {
		q.conn = &o.pin
	}
	v := s.g.decide(ctx, q)
	if s.sessionless {
		// A call a policy requires approval for is put to the client's user by
		// input_required (settleByInput).
		var ask *mcp.CallToolResult
		v, ask = s.g.settleByInput(ctx, q, v, roundOf(req, params), strings.HasPrefix(params.RequestState, inputStatePrefix))
		if ask != nil {
			return ask, nil
		}
	}
	decided = verdictKV(v)
	if v.Effect == policy.EffectDeny {
		return nil, &jsonrpc.Error{Code: codeRefused, Message: v.Reason}
	}
	if srv := s.g.server(key); srv != nil {
		if delay := s.g.rateDelay(s.caller, srv, key, 1); delay > 0 {
			why := fmt.Sprintf("more than %d requests per second to MCPServer %s (spec.gateway.requestsPerSecond); retry in %s",
				srv.requestsPerSecond, key, delay.Round(time.Millisecond))
			audit(outcomeDenied, "reason", why)
			return nil, &jsonrpc.Error{Code: codeUnavailable, Message: why}
		}
	}
	o := s.origin(r.server)
	cs, err := o.open(s)
	if err != nil {
		audit(outcomeUpstreamError, "reason", err.Error())
		return nil, toolError(err)
	}
	o.beginCall(ctx)
	defer o.endCall(ctx)
	ctx, client := startClientSpan(ctx, "tools/call", r.tool, key)
	meta, forget := s.originMeta(ctx, req, cs, params.Meta)
	defer forget()
	meta = tracing.InjectMeta(ctx, meta)
	up := &mcp.CallToolParams{Meta: meta, Name: r.tool}
	up.InputResponses, up.RequestState = forwardedInput(params)
	if len(args) > 0 {
		up.Arguments = args
	}
	var res *mcp.CallToolResult
	sessionEraOrigin := cs.InitializeResult() == nil || cs.InitializeResult().ProtocolVersion < sessionlessVersion
	target := bridgeTarget{key: s.key, caller: s.caller.Key, tool: name, bridge: o.inputs, cs: cs}
	switch {
	case s.sessionless && strings.HasPrefix(params.RequestState, inputStatePrefix):
		res, err = s.g.resumeBridged(ctx, target, params)
	case s.sessionless && sessionEraOrigin && req != nil && takesInput(req):
		// The origin asks its questions on its session: they reach the sessionless
		// client as input_required (see input_bridge.go).
		res, err = s.g.callBridged(ctx, target, up)
	default:
		res, err = cs.CallTool(ctx, up)
	}
	if err != nil {
		if client.IsRecording() {
			endSpan(client, outcomeUpstreamError)
		}
		audit(outcomeUpstreamError, "reason", upstreamReason(err))
		return nil, toolError(fmt.Errorf("MCPServer %s: %w", key, err))
	}
	outcome := outcomeOK
	if res.IsError {
		outcome = outcomeToolError
	}
	if client.IsRecording() {
		endSpan(client, outcome)
	}
	audit(outcome)
	exposeContentURIs(s.prefixOf(r.server), r.server, res.Content...)
	return res, nil
}

// approver returns how the session asks its client's user to approve a call (see
// elicitApproval): nil for a sessionless client, whose calls have no session to ask on
// (it is asked by input_required: settleByInput).
func (s *toolsetSession) approver(req *mcp.CallToolRequest) func(context.Context, approval) error {
	if s.sessionless || req == nil || req.Session == nil {
		return nil
	}
	return elicitApproval(req.Session)
}

// existingOrigin returns the origin of server if the session has one.
func (s *toolsetSession) existingOrigin(server string) *origin {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.origins[server]
}

// judgePinned has the gateway's decision judge an origin's listed tools (judgeList), when
// its server has a pin: on a difference the origin's tools are withheld from the session
// and its calls refused. It says why, or "".
func (o *origin) judgePinned(s *toolsetSession, srv *server, tools []*mcp.Tool) string {
	if srv.pinned == "" {
		return ""
	}
	o.mu.Lock()
	up := o.up
	o.mu.Unlock()
	if up == nil {
		return "the origin's session is closed"
	}
	_, _, err := s.g.judgeList(&query{caller: s.caller, server: connector.Key{Namespace: srv.namespace, Name: srv.name},
		toolset: &s.key, conn: &o.pin, log: s.audit, who: []any{"server", o.name}},
		func() ([]connector.Tool, bool, error) { return up.ConvertTools(tools), true, nil })
	if err != nil {
		return err.Error()
	}
	return ""
}

func (s *toolsetSession) isEnding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ending
}

// end ends the session for reason; only the first call counts. Its upstream sessions
// close with it.
func (s *toolsetSession) end(reason error) {
	s.mu.Lock()
	if s.ending {
		s.mu.Unlock()
		return
	}
	s.ending = true
	origins := s.origins
	s.origins = map[string]*origin{}
	s.mu.Unlock()
	s.activity.Stop()
	s.g.forgetToolsetSession(s)
	s.cancel()
	if s.session != nil {
		if errors.Is(reason, errClientEnded) {
			_ = s.session.Close()
		} else {
			time.AfterFunc(errorLinger, func() { _ = s.session.Close() })
		}
	}
	for _, o := range origins {
		o.mu.Lock()
		cs := o.cs
		o.mu.Unlock()
		if cs != nil {
			go func() { _ = cs.Close() }()
		}
	}
	s.audit.Info("Session ended", "reason", reason.Error(), "duration", time.Since(s.started).Round(time.Millisecond).String())
}

// upstreamTransport hands a go-sdk client the connector's upstream connection.
type upstreamTransport struct{ up *connector.Upstream }

// Connect implements mcp.Transport.
func (t upstreamTransport) Connect(context.Context) (mcp.Connection, error) { return t.up, nil }

// upstreamReason says why a call to an origin failed, for the audit log, without
// quoting the origin: an error it answered is named by its JSON-RPC code only (its text
// is the server's to choose, and may carry anything); the connector's own errors are
// its words, scrubbed of the server's secrets.
func upstreamReason(err error) string {
	if rpcErr, ok := errors.AsType[*jsonrpc.Error](err); ok {
		return fmt.Sprintf("the server answered with JSON-RPC error %d", rpcErr.Code)
	}
	return err.Error()
}

// presentCaller records who the session's caller is as of its latest request, and gives
// the connector that caller's token for the origins open so far whose credentials follow
// the caller.
func (s *toolsetSession) presentCaller(who *connector.Caller) {
	s.who.Store(who)
	s.mu.Lock()
	keys := make([]connector.Key, 0, len(s.origins))
	for name := range s.origins {
		keys = append(keys, connector.Key{Namespace: s.key.Namespace, Name: name})
	}
	s.mu.Unlock()
	s.g.presentCaller(who, keys...)
}

// unknownToolMessage answers a call of a tool the session does not serve, naming the
// origins whose tools could not be listed for this caller and why (the tool may be one
// of theirs), in name order.
func unknownToolMessage(name string, unlisted map[string]string) string {
	msg := fmt.Sprintf("unknown tool %s", quoteName(name))
	for _, server := range slices.Sorted(maps.Keys(unlisted)) {
		msg += fmt.Sprintf("; the tools of MCPServer %s could not be listed: %s", server, unlisted[server])
	}
	return msg
}

// setLogLevel records the logging level the client set and tells the origins open so
// far; origins opened later are told as they open.
func (s *toolsetSession) setLogLevel(ctx context.Context, level mcp.LoggingLevel) { //nolint:staticcheck // logging: see originClientOptions
	s.mu.Lock()
	s.logLevel = level
	var open []*mcp.ClientSession
	for _, o := range s.origins {
		o.mu.Lock()
		if o.cs != nil {
			open = append(open, o.cs)
		}
		o.mu.Unlock()
	}
	s.mu.Unlock()
	for _, cs := range open {
		_ = cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level}) //nolint:staticcheck // logging: see originClientOptions
	}
}

func (s *toolsetSession) loggingLevel() mcp.LoggingLevel { //nolint:staticcheck // logging: see originClientOptions
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logLevel
}

// announce records that an origin announced a change of its list of kind.
func (s *toolsetSession) announce(kind string) {
	s.mu.Lock()
	if s.announced == nil {
		s.announced = map[string]bool{}
	}
	s.announced[kind] = true
	s.mu.Unlock()
}
