package connector

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// live is one established MCP session.
type live struct {
	cs        *mcp.ClientSession
	cancel    context.CancelCauseFunc
	transport Transport
	protocol  string
	owner     *session

	// watch hears the session's list_changed notifications once serve watches it;
	// changedEarly remembers one that came before.
	watchMu      sync.Mutex
	watch        *watch
	changedEarly bool
}

func (l *live) modern() bool { return l.protocol >= modernProtocol }

// listChanged hands a list_changed notification to the session's watch, or keeps it
// for the watch to come.
func (l *live) listChanged() {
	l.watchMu.Lock()
	w := l.watch
	if w == nil {
		l.changedEarly = true
	}
	l.watchMu.Unlock()
	if w != nil {
		w.listChanged()
	}
}

// watchChanges makes w (nil: none) the watch that hears list_changed, and reports
// whether one came before.
func (l *live) watchChanges(w *watch) (changedEarly bool) {
	l.watchMu.Lock()
	defer l.watchMu.Unlock()
	l.watch = w
	changedEarly, l.changedEarly = l.changedEarly, false
	return changedEarly
}

func (l *live) close() {
	_ = l.cs.Close()
	l.cancel(nil)
	l.owner.pool.lives.Delete(l.cs)
}

// newSharedClient returns the one go-sdk client of a pool, which every session of the
// pool connects with: a client per connect cost a few KiB per server for handlers and
// middleware that are the same for all. Its list_changed handlers find the session a
// notification is for in the pool's table of live sessions; its sending middleware
// reads each connect's initialize result for the standalone stream's gate (listen.go).
func newSharedClient(p *Pool) *mcp.Client {
	notify := func(cs *mcp.ClientSession, method string) {
		v, ok := p.lives.Load(cs)
		if !ok {
			// Still connecting: the discovery that follows the connect reads the lists.
			return
		}
		l := v.(*live)
		l.listChanged()
		l.owner.notifyUpstreams(method)
	}
	client := mcp.NewClient(p.impl, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(_ context.Context, req *mcp.ToolListChangedRequest) {
			notify(req.Session, "notifications/tools/list_changed")
		},
		PromptListChangedHandler: func(_ context.Context, req *mcp.PromptListChangedRequest) {
			notify(req.Session, "notifications/prompts/list_changed")
		},
		ResourceListChangedHandler: func(_ context.Context, req *mcp.ResourceListChangedRequest) {
			notify(req.Session, "notifications/resources/list_changed")
		},
	})
	client.AddSendingMiddleware(gateMiddleware)
	return client
}

// connect establishes a session and runs a full discovery on it.
func (s *session) connect() (_ *live, e *Error) {
	ctx, span := s.startSpan(s.ctx, "connect")
	defer func() { endSpan(span, e) }()
	l, err := s.establish(ctx)
	if err != nil {
		return nil, err
	}
	span.SetAttributes(tracing.Transport.String(string(l.transport)), tracing.MCPProtocolVersion.String(l.protocol))
	s.stack.obs.reset()
	dctx, dspan := s.startSpan(ctx, "discover")
	d, derr := discover(dctx, l.cs, s.cfg, s.red, s.mem)
	if derr != nil {
		l.close()
		e := classify(derr, s.stack.obs.last())
		endSpan(dspan, e)
		s.pool.metrics.discoveryError(s.key, e.Reason)
		return nil, e
	}
	endSpan(dspan, nil)
	init := l.cs.InitializeResult()
	s.update(func(snap *Snapshot) {
		snap.State = StateReady
		snap.Transport = l.transport
		snap.ProtocolVersion = l.protocol
		snap.ServerInfo = d.serverInfo
		snap.Instructions = d.instructions
		snap.Capabilities = Capabilities{}
		if init != nil {
			snap.Capabilities = capabilitiesOf(init.Capabilities)
		}
		setDiscovered(snap, d)
		if s.stack.auth != nil {
			snap.TokenEndpoint = s.stack.auth.tokenEndpoint()
		}
		snap.LastError = nil
		snap.ConsecutiveFailures = 0
		snap.ConnectedAt = time.Now()
	})
	s.logger().Info("Session ready", "transport", l.transport, "protocolVersion", l.protocol, "tools", len(d.tools))
	return l, nil
}

func setDiscovered(snap *Snapshot, d *discovered) {
	snap.Discovered = true
	snap.Tools = d.tools
	snap.ToolsDigest = d.digest
	snap.Resources = d.resources
	snap.ResourceTemplates = d.resourceTemplates
	snap.Prompts = d.prompts
	snap.DiscoveredAt = d.at
}

func capabilitiesOf(c *mcp.ServerCapabilities) Capabilities {
	if c == nil {
		return Capabilities{}
	}
	out := Capabilities{Tools: c.Tools != nil, Resources: c.Resources != nil, Prompts: c.Prompts != nil,
		Completions: c.Completions != nil, ResourcesSubscribe: c.Resources != nil && c.Resources.Subscribe}
	out.ListChanged = (c.Tools != nil && c.Tools.ListChanged) ||
		(c.Resources != nil && c.Resources.ListChanged) ||
		(c.Prompts != nil && c.Prompts.ListChanged)
	return out
}

// establish opens an MCP session over the configured (or detected) transport, holding
// one of the pool's connect slots while it does.
func (s *session) establish(ctx context.Context) (*live, *Error) {
	select {
	case s.pool.connectSlots <- struct{}{}:
		defer func() { <-s.pool.connectSlots }()
	case <-s.ctx.Done():
		return nil, newError(ReasonTimeout, "session closed while waiting to connect")
	}

	transport := s.detected
	if transport == "" {
		switch s.cfg.Protocol {
		case ProtocolSSE:
			transport = TransportSSE
		case ProtocolStreamableHTTP:
			transport = TransportStreamableHTTP
		}
	}
	if transport != "" {
		l, err := s.open(ctx, transport)
		if err != nil && s.detected != "" && (err.Reason == ReasonNotFound || err.Reason == ReasonProtocolError) {
			// The server may have changed transports: detect again next time.
			s.detected = ""
		}
		return l, err
	}

	// Auto: Streamable HTTP first; on 400, 404 or 405 without a JSON-RPC error body,
	// the legacy HTTP+SSE transport (MCP specification, backwards compatibility).
	l, err := s.open(ctx, TransportStreamableHTTP)
	if err == nil {
		s.detected = TransportStreamableHTTP
		return l, nil
	}
	if !err.legacyHint {
		return nil, err
	}
	l, sseErr := s.open(ctx, TransportSSE)
	if sseErr == nil {
		s.detected = TransportSSE
		return l, nil
	}
	if sseErr.Reason == ReasonNotFound || sseErr.Reason == ReasonProtocolError {
		return nil, err
	}
	return nil, sseErr
}

// open connects over one transport. The session's long-lived context is what the
// transport's streams live on (go-sdk's SSE GET uses the context given to Connect);
// the connect timeout cancels it only while the handshake is running.
func (s *session) open(spanCtx context.Context, transport Transport) (*live, *Error) {
	l := &live{transport: transport, owner: s}
	client := s.pool.client
	var t mcp.Transport
	// The connect span comes along for the handshake's requests.
	connectCtx := tracing.CarryOver(s.ctx, spanCtx)
	switch transport {
	case TransportSSE:
		t = &mcp.SSEClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.stack.client, MaxEventSize: s.cfg.Limits.MaxEventBytes}
	default:
		t = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.stack.client, MaxEventSize: s.cfg.Limits.MaxEventBytes}
		// The standalone GET stream only for a server that announces listChanged
		// (listen.go).
		connectCtx = withListenGate(connectCtx, &listenGate{})
	}

	s.stack.obs.reset()
	ctx, cancel := context.WithCancelCause(connectCtx)
	timer := time.AfterFunc(s.cfg.ConnectTimeout, func() { cancel(errConnectTimeout) })
	cs, err := client.Connect(ctx, t, nil)
	inTime := timer.Stop()
	if err == nil && !inTime {
		_ = cs.Close()
		err = errConnectTimeout
	}
	if err != nil {
		cancel(nil)
		var e *Error
		if !inTime {
			e = newError(ReasonTimeout, "server did not complete the MCP handshake within %s", s.cfg.ConnectTimeout)
		} else {
			e = classify(err, s.stack.obs.last())
		}
		if transport == TransportStreamableHTTP && !isJSONRPCError(err) && hasLegacyStatus(s.stack.obs.postStatuses()) {
			e = withLegacyHint(e)
		}
		return nil, e
	}
	l.cs, l.cancel = cs, cancel
	s.pool.lives.Store(cs, l)
	if res := cs.InitializeResult(); res != nil {
		l.protocol = res.ProtocolVersion
	}
	return l, nil
}

var errConnectTimeout = errors.New("connect timeout")

func isJSONRPCError(err error) bool {
	var rpcErr *jsonrpc.Error
	return errors.As(err, &rpcErr)
}

// hasLegacyStatus reports whether a POST was answered 400, 404 or 405: what a server
// that only speaks the legacy HTTP+SSE transport answers to a Streamable HTTP POST.
func hasLegacyStatus(codes []int) bool {
	for _, c := range codes {
		if c == 400 || c == 404 || c == 405 {
			return true
		}
	}
	return false
}
