package connector

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// modernProtocol is the first protocol version without sessions and without ping.
const modernProtocol = "2026-07-28"

// session holds the connection to one server for one Config. It runs on its own
// goroutine (run); everything the pool reads goes through mu.
type session struct {
	key      Key
	cfg      Config
	endpoint *url.URL
	pool     *Pool
	red      redactor
	log      logr.Logger
	stack    *httpStack // nil when the config cannot be acted on
	setupErr *Error

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// recheck asks the session to judge its live destinations against a new decider.
	recheck chan struct{}

	// detected is the transport Auto settled on; reconnects reuse it. Only run touches it.
	detected Transport

	mu       sync.Mutex
	snap     Snapshot
	settled  bool
	onSettle func(*session)
}

func newSession(p *Pool, key Key, cfg Config) *session {
	cfg = cfg.withDefaults()
	s := &session{
		key:     key,
		cfg:     cfg,
		pool:    p,
		red:     redactor{secrets: cfg.secrets()},
		log:     p.log.WithValues("server", key.String()),
		done:    make(chan struct{}),
		recheck: make(chan struct{}, 1),
	}
	s.ctx, s.cancel = context.WithCancel(p.ctx)
	s.snap = Snapshot{State: StateConnecting, Endpoint: DisplayURL(cfg.URL)}

	endpoint, err := cfg.validate()
	if err != nil {
		s.setupErr = newError(ReasonInvalidSpec, "%s", err.Error())
		return s
	}
	s.endpoint = endpoint
	stack, err := newHTTPStack(cfg, endpoint)
	if err != nil {
		s.setupErr = classify(err, nil)
		return s
	}
	s.stack = stack
	return s
}

// snapshot returns a copy of what the session knows.
func (s *session) snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.clone()
}

// update changes the snapshot and tells the pool when a user would notice.
func (s *session) update(change func(*Snapshot)) {
	s.mu.Lock()
	before := s.snap
	next := s.snap.clone()
	change(&next)
	s.snap = next
	s.mu.Unlock()
	if noticeablyDifferent(before, next) {
		s.pool.changed(s, next.State)
	}
}

// settle marks the end of the first connect attempt, success or not, which is when a
// replacement session takes over from the one it replaces.
func (s *session) settle() {
	s.mu.Lock()
	if s.settled {
		s.mu.Unlock()
		return
	}
	s.settled = true
	onSettle := s.onSettle
	s.mu.Unlock()
	if onSettle != nil {
		onSettle(s)
	}
}

// setEgress swaps the egress decider in place and asks the session to re-judge the
// destinations it is connected to.
func (s *session) setEgress(d EgressDecider) {
	if d == nil {
		d = DefaultEgressDecider()
	}
	if s.stack == nil || sameValue(s.stack.egress(), d) {
		return
	}
	s.stack.decider.Store(&deciderBox{d})
	select {
	case s.recheck <- struct{}{}:
	default:
	}
}

// close stops the session; it returns at once and the goroutine winds down on its own.
func (s *session) close() { s.cancel() }

// run is the session's life: connect, serve until the session breaks, back off,
// reconnect; until the pool closes it.
func (s *session) run() {
	defer close(s.done)
	defer s.settle()
	if s.setupErr != nil {
		s.fail(s.setupErr, true)
		s.settle()
		<-s.ctx.Done()
		return
	}
	defer s.stack.close()

	attempt := 0
	for {
		l, err := s.connect()
		if s.ctx.Err() != nil {
			if l != nil {
				l.close()
			}
			return
		}
		var delay time.Duration
		if err != nil {
			attempt++
			s.fail(err, true)
			s.settle()
			delay = s.pool.backoff(attempt)
		} else {
			// Losing a live session counts as the first failed attempt: the next
			// failure backs off further.
			attempt = 1
			s.settle()
			err = s.serve(l)
			l.close()
			if s.ctx.Err() != nil {
				return
			}
			s.pool.metrics.reconnects(s.key)
			if !err.sessionMissing {
				delay = s.pool.backoff(1)
			}
			err = s.red.scrubError(err)
			s.log.Info("Session lost, reconnecting", "reason", err.Reason, "message", err.Message, "after", delay.String())
		}
		if !s.sleep(delay) {
			return
		}
	}
}

// sleep waits for d or until the session is closed, and reports whether to go on. A
// new egress decider cuts the wait short: a server the old policy denied should not
// wait out a five-minute backoff once the policy allows it.
func (s *session) sleep(d time.Duration) bool {
	if d <= 0 {
		return s.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.recheck:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// fail records a failed connect or probe. down marks the session Down at once (a failed
// connect); otherwise it goes Down only at the failure threshold.
func (s *session) fail(e *Error, down bool) {
	e = s.red.scrubError(e)
	var becameDown bool
	s.update(func(snap *Snapshot) {
		snap.ConsecutiveFailures++
		snap.LastError = e
		if down || snap.ConsecutiveFailures >= s.cfg.HealthCheck.FailureThreshold {
			becameDown = snap.State != StateDown
			snap.State = StateDown
			snap.ConnectedAt = time.Time{}
		}
	})
	if becameDown {
		s.log.Info("Session down", "reason", e.Reason, "message", e.Message)
	}
}

// live is one established MCP session.
type live struct {
	cs        *mcp.ClientSession
	cancel    context.CancelCauseFunc
	transport Transport
	protocol  string
	changed   chan struct{}
}

func (l *live) modern() bool { return l.protocol >= modernProtocol }

func (l *live) close() {
	_ = l.cs.Close()
	l.cancel(nil)
}

// connect establishes a session and runs a full discovery on it.
func (s *session) connect() (*live, *Error) {
	l, err := s.establish()
	if err != nil {
		return nil, err
	}
	s.stack.obs.reset()
	d, derr := discover(s.ctx, l.cs, s.cfg)
	if derr != nil {
		l.close()
		e := classify(derr, s.stack.obs.last())
		s.pool.metrics.discoveryError(s.key, e.Reason)
		return nil, e
	}
	init := l.cs.InitializeResult()
	s.update(func(snap *Snapshot) {
		snap.State = StateReady
		snap.Transport = l.transport
		snap.ProtocolVersion = l.protocol
		snap.ServerInfo = ServerInfo{}
		snap.Capabilities = Capabilities{}
		snap.Instructions = ""
		if init != nil {
			if init.ServerInfo != nil {
				snap.ServerInfo = ServerInfo{Name: init.ServerInfo.Name, Title: init.ServerInfo.Title, Version: init.ServerInfo.Version}
			}
			snap.Capabilities = capabilitiesOf(init.Capabilities)
			snap.Instructions = truncateUTF8(init.Instructions, s.cfg.Limits.MaxDescriptionBytes)
		}
		setDiscovered(snap, d)
		snap.LastError = nil
		snap.ConsecutiveFailures = 0
		snap.ConnectedAt = time.Now()
	})
	s.log.Info("Session ready", "transport", l.transport, "protocolVersion", l.protocol, "tools", len(d.tools))
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
	out := Capabilities{Tools: c.Tools != nil, Resources: c.Resources != nil, Prompts: c.Prompts != nil}
	out.ListChanged = (c.Tools != nil && c.Tools.ListChanged) ||
		(c.Resources != nil && c.Resources.ListChanged) ||
		(c.Prompts != nil && c.Prompts.ListChanged)
	return out
}

// establish opens an MCP session over the configured (or detected) transport, holding
// one of the pool's connect slots while it does.
func (s *session) establish() (*live, *Error) {
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
		l, err := s.open(transport)
		if err != nil && s.detected != "" && (err.Reason == ReasonNotFound || err.Reason == ReasonProtocolError) {
			// The server may have changed transports: detect again next time.
			s.detected = ""
		}
		return l, err
	}

	// Auto: Streamable HTTP first; on 400, 404 or 405 without a JSON-RPC error body,
	// the legacy HTTP+SSE transport (MCP specification, backwards compatibility).
	l, err := s.open(TransportStreamableHTTP)
	if err == nil {
		s.detected = TransportStreamableHTTP
		return l, nil
	}
	if !err.legacyHint {
		return nil, err
	}
	l, sseErr := s.open(TransportSSE)
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
func (s *session) open(transport Transport) (*live, *Error) {
	l := &live{transport: transport, changed: make(chan struct{}, 1)}
	notify := func() {
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
	client := mcp.NewClient(s.pool.impl, &mcp.ClientOptions{
		Capabilities:               &mcp.ClientCapabilities{},
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { notify() },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { notify() },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { notify() },
	})
	var t mcp.Transport
	switch transport {
	case TransportSSE:
		t = &mcp.SSEClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.stack.client, MaxEventSize: s.cfg.Limits.MaxEventBytes}
	default:
		t = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.stack.client, MaxEventSize: s.cfg.Limits.MaxEventBytes}
	}

	s.stack.obs.reset()
	ctx, cancel := context.WithCancelCause(s.ctx)
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

// serve keeps an established session: it probes it, rediscovers on list_changed
// (debounced) and watches for the session ending. It returns why the session must be
// rebuilt.
func (s *session) serve(l *live) *Error {
	probe := time.NewTicker(s.cfg.HealthCheck.Interval)
	defer probe.Stop()
	ended := make(chan error, 1)
	go func() { ended <- l.cs.Wait() }()

	var debounce <-chan time.Time
	for {
		select {
		case <-s.ctx.Done():
			return &Error{Reason: ReasonProtocolError, Message: "session closed"}

		case <-l.changed:
			if debounce == nil {
				debounce = time.After(s.pool.opts.DebounceDelay)
			}

		case <-debounce:
			debounce = nil
			if e := s.rediscover(l); e != nil && (e.sessionMissing || s.probeFailed(e)) {
				return e
			}

		case <-probe.C:
			if e := s.probe(l); e != nil {
				if e.sessionMissing || s.probeFailed(e) {
					return e
				}
			} else {
				s.probeSucceeded()
			}

		case err := <-ended:
			e := classify(err, s.stack.obs.last())
			if err == nil {
				e = newError(ReasonProtocolError, "server closed the session")
			}
			if !e.sessionMissing {
				s.fail(e, true)
			}
			return e

		case <-s.recheck:
			for _, dest := range s.stack.obs.destinations() {
				if e := s.stack.judgeDial(dest); e != nil {
					s.fail(e, true)
					return e
				}
			}
		}
	}
}

// rediscover refreshes the lists after a list_changed notification.
func (s *session) rediscover(l *live) *Error {
	s.stack.obs.reset()
	d, err := discover(s.ctx, l.cs, s.cfg)
	if err != nil {
		e := classify(err, s.stack.obs.last())
		s.pool.metrics.discoveryError(s.key, e.Reason)
		return e
	}
	s.update(func(snap *Snapshot) { setDiscovered(snap, d) })
	return nil
}

// probe touches the network in both protocol eras: ping where sessions exist; where
// they do not (2026-07-28), ping is gone and a fresh server/discover is the cheapest
// request that must reach the server.
func (s *session) probe(l *live) *Error {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	s.stack.obs.reset()
	start := time.Now()
	var err error
	switch {
	case !l.modern():
		err = l.cs.Ping(ctx, nil)
	case l.transport == TransportStreamableHTTP:
		err = s.discoverProbe(ctx)
	default:
		_, err = l.cs.ListTools(ctx, nil)
	}
	s.pool.metrics.probed(s.key, time.Since(start))
	if err != nil {
		return classify(err, s.stack.obs.last())
	}
	return nil
}

// discoverProbe runs server/discover through a throwaway go-sdk client: in the
// 2026-07-28 era that is all a connect does, and it holds no server state.
func (s *session) discoverProbe(ctx context.Context) error {
	client := mcp.NewClient(s.pool.impl, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:             s.cfg.URL,
		HTTPClient:           s.stack.client,
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
		MaxEventSize:         s.cfg.Limits.MaxEventBytes,
	}, nil)
	if err != nil {
		return err
	}
	return cs.Close()
}

// probeFailed records a failed probe and reports whether the threshold is reached.
func (s *session) probeFailed(e *Error) bool {
	s.fail(e, false)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.ConsecutiveFailures >= s.cfg.HealthCheck.FailureThreshold
}

func (s *session) probeSucceeded() {
	s.mu.Lock()
	failing := s.snap.ConsecutiveFailures > 0
	s.mu.Unlock()
	if failing {
		s.update(func(snap *Snapshot) {
			snap.ConsecutiveFailures = 0
			snap.LastError = nil
		})
	}
}

// backoff returns the delay before reconnect attempt n (from 1): the initial backoff
// doubling up to the maximum, with equal jitter (half fixed, half random).
func backoffDelay(n int, initial, maxDelay time.Duration) time.Duration {
	d := initial
	for i := 1; i < n && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	half := d / 2
	return half + rand.N(half+1) //nolint:gosec // jitter needs no cryptographic randomness
}
