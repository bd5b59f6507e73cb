package connector

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// Errors of OpenUpstream besides a classified *Error.
var (
	// ErrUnknownServer means the pool holds no session for the key.
	ErrUnknownServer = errors.New("no such server")
	// ErrNotConnected means the server has not completed a session yet, so its transport
	// is not known.
	ErrNotConnected = errors.New("server is not connected")
)

// Upstream is a session of the gateway's own with one server: a raw go-sdk client
// connection that carries whatever messages its owner writes, one MCP session of the
// server per Upstream. It is built from the very Config the pool's own session holds,
// over an HTTP stack of its own (the same header injection, CA bundle, egress decider,
// redirect policy and limits), so that there is one code path that attaches credentials
// and checks egress.
//
// An Upstream ends (Read fails with an *Error) when its server's config changes (a
// rotated Secret, a new URL), when the server is removed, when a new egress decision
// denies an address it is connected to, or when the server ends the session. Its owner
// then ends the session it relays for; the client starts a new one, which gets the new
// config.
//
// go-sdk gives a raw Streamable HTTP connection no way to open the standalone GET
// stream (it does so only for an mcp.Client, go-sdk#657), where a server sends what
// answers no request. In its place the Upstream opens a subscriptions/listen stream once
// the session is initialized (see listen), which go-sdk's server transport, and so
// Switchboard's bridge, routes those messages to. A server that knows no such stream
// loses them as before, except list_changed notifications, which are news for every
// session and reach an Upstream from the pool's own session (see inject).
type Upstream struct {
	key       Key
	transport Transport
	owner     *session
	stack     *httpStack
	conn      mcp.Connection
	// red scrubs what the Upstream relays: its session's secrets and, for a per-caller
	// server, its caller's.
	red     redactor
	timeout time.Duration

	// ctx carries the negotiated protocol version to the HTTP layer; it ends with Close.
	ctx     context.Context
	cancel  context.CancelFunc
	version *atomic.Pointer[string]

	injected chan jsonrpc.Message
	// wake interrupts a Read blocked on the connection, for an injected notification or
	// an ending; nil while no Read is blocked.
	wake     atomic.Pointer[context.CancelFunc]
	failed   chan struct{}
	failOnce sync.Once
	failure  *Error

	mu       sync.Mutex
	initID   jsonrpc.ID
	listenID jsonrpc.ID // the Upstream's own subscriptions/listen call, once made
	// resourceListens are the Upstream's own listen calls that carry one resource
	// subscription each (ListenForResource), by call id.
	resourceListens map[jsonrpc.ID]string
	pending         map[jsonrpc.ID]*pendingCall
	answers         []jsonrpc.Message // the Upstream's own answers to calls, for Read
	closed          bool
	// toolsMem charges the tools ListTools returned to the namespace's discovery
	// budget; nil until ListTools.
	toolsMem *lease
	// featuresMem charges the resources, templates and prompts ListFeatures returned;
	// nil until ListFeatures.
	featuresMem *lease

	// user is, on a perUser server, the person's own bearer; deferred their
	// initialize while they hold no grant (upstream_peruser.go).
	user     *userBearer
	deferred deferredInit
}

// pendingCall is a call on its way to the server or waiting for its answer.
type pendingCall struct {
	cancel context.CancelFunc
	timer  *time.Timer // nil for the listen call, which has no answer to wait for
}

// stop ends the call's timer and, with cancel, its HTTP exchange.
func (c *pendingCall) stop(cancel bool) {
	if c.timer != nil {
		c.timer.Stop()
	}
	if cancel {
		c.cancel()
	}
}

// negotiatedVersionKey carries, in an Upstream's request contexts, the protocol version
// its initialize settled on (an *atomic.Pointer[string]), for the HTTP layer to send as
// MCP-Protocol-Version: go-sdk sets that header itself only for a connection an
// mcp.Client initialized.
type negotiatedVersionKey struct{}

// protocolVersionOf returns the negotiated version an Upstream's request context carries.
func protocolVersionOf(ctx context.Context) string {
	if nv, ok := ctx.Value(negotiatedVersionKey{}).(*atomic.Pointer[string]); ok {
		if v := nv.Load(); v != nil {
			return *v
		}
	}
	return ""
}

// maxInjected bounds the notifications waiting for an Upstream's reader; a reader that
// falls behind loses list_changed news, which is repeated on the next change.
const maxInjected = 8

// OpenUpstream opens a new upstream session with the server key names, over the
// transport the pool's own session uses. ctx bounds the opening only (for the legacy SSE
// transport, the GET that receives the message endpoint). The caller writes the client's
// initialize request first and must Close the Upstream. caller is who the session acts
// for; it may be nil for a server whose credentials do not follow the caller. On a
// server whose credentials follow the caller ([Pool.PerCaller]) it is required, and the
// Upstream presents the caller's own upstream token, never the server's.
func (p *Pool) OpenUpstream(ctx context.Context, key Key, caller *Caller) (*Upstream, error) {
	p.mu.Lock()
	var s *session
	if e := p.servers[key]; e != nil {
		s = e.current
	}
	p.mu.Unlock()
	if s == nil {
		return nil, ErrUnknownServer
	}
	if s.setupErr != nil {
		return nil, s.setupErr
	}
	var bearer *callerBearer
	var user *userBearer
	switch {
	case s.users != nil:
		if caller == nil {
			return nil, authError(ReasonUnauthorized, ReasonCallerNotAllowed,
				"server %s acts for each person with their own account, and the upstream session names no caller", displayURL(s.endpoint))
		}
		if e := s.users.CheckCaller(*caller); e != nil {
			return nil, e
		}
		user = &userBearer{auth: s.users, caller: *caller}
	case s.callers != nil:
		if caller == nil {
			return nil, authError(ReasonUnauthorized, ReasonTokenRequestFailed,
				"server %s takes each caller's own credentials, and the upstream session names no caller", displayURL(s.endpoint))
		}
		var e *Error
		if bearer, e = s.callers.bearerFor(*caller); e != nil {
			return nil, e
		}
	}
	// A standby server's session starts with its first upstream, which waits for the
	// first connect; so does one opened while the owner's session is still connecting.
	s.opening.Add(1)
	defer s.opening.Add(-1)
	if s.start() {
		p.metrics.setState(key, StateConnecting)
	}
	select {
	case <-s.settledCh:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	snap := s.snapshot()
	if snap.Transport == "" {
		return nil, ErrNotConnected
	}
	stack, err := newHTTPStack(s.cfg, s.endpoint)
	if err != nil {
		return nil, classify(err, nil)
	}
	stack.setDecider(s.stack.egress())
	red := s.red
	switch {
	case user != nil:
		// The person's own tokens; nobody else's.
		stack.caller = user
		red = user.redactor(s.red)
	case bearer != nil:
		// The caller's own tokens; the server's (the operator's) never.
		stack.caller = bearer
		red = bearer.redactor(s.red)
	default:
		// One token source per server: the gateway's sessions present the tokens the
		// pool's own session obtained, and renew them the same way.
		stack.auth = s.stack.auth
	}

	u := &Upstream{
		key:       key,
		transport: snap.Transport,
		owner:     s,
		stack:     stack,
		red:       red,
		timeout:   s.cfg.Timeout,
		version:   &atomic.Pointer[string]{},
		injected:  make(chan jsonrpc.Message, maxInjected),
		failed:    make(chan struct{}),
		pending:   make(map[jsonrpc.ID]*pendingCall),
		user:      user,
	}
	u.ctx, u.cancel = context.WithCancel(context.WithValue(p.ctx, negotiatedVersionKey{}, u.version))
	if user != nil {
		user.ctx = u.ctx
	}
	if !s.addUpstream(u) {
		u.cancel()
		return nil, ErrUnknownServer
	}

	var t mcp.Transport
	switch snap.Transport {
	case TransportSSE:
		t = &mcp.SSEClientTransport{Endpoint: s.cfg.URL, HTTPClient: stack.client, MaxEventSize: s.cfg.Limits.MaxEventBytes}
	default:
		t = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: stack.client,
			MaxEventSize: s.cfg.Limits.MaxEventBytes, MaxRetries: -1}
	}
	// The legacy SSE transport's stream lives on the context given to Connect: the
	// Upstream's, with the caller's bound applied to the opening only.
	connectCtx, stop := context.WithCancel(u.ctx)
	unbind := context.AfterFunc(ctx, stop)
	u.conn, err = t.Connect(connectCtx)
	if !unbind() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		stop()
		e := red.scrubError(classify(err, stack.obs.last()))
		_ = u.Close()
		return nil, e
	}
	return u, nil
}

// Transport is the transport the Upstream speaks to the server.
func (u *Upstream) Transport() Transport { return u.transport }

// Read implements mcp.Connection. Its errors are *Error values, classified and scrubbed
// of the config's secrets like the pool's own. The messages it returns are scrubbed of
// them too, and of the tokens the server's token source issued: a server that echoes
// its credential (in a tool description, a result, an error, a notification or a request
// of its own, in any JSON spelling) hands it to no client of the gateway.
func (u *Upstream) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := u.read(ctx)
	if err != nil {
		return nil, err
	}
	return u.red.scrubMessage(msg), nil
}

// read returns the next message for the client, as the server sent it.
func (u *Upstream) read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		if msg, ok, err := u.pendingRead(); ok {
			return msg, err
		}
		readCtx, wake := context.WithCancel(ctx)
		u.wake.Store(&wake)
		// An injection that came before the Store did not see it: look again.
		if msg, ok, err := u.pendingRead(); ok {
			u.wake.Store(nil)
			wake()
			return msg, err
		}
		msg, err := u.conn.Read(readCtx)
		u.wake.Store(nil)
		woken := readCtx.Err() != nil && ctx.Err() == nil
		wake()
		if err != nil {
			if woken {
				continue
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, u.fail(u.classify(err))
		}
		switch msg := msg.(type) {
		case *jsonrpc.Response:
			if u.answered(msg) {
				continue // the answer to the Upstream's own listen call: nobody else asked
			}
			if u.answersDeferredInit(msg) {
				continue // the answer to an initialize the client had answered already
			}
		case *jsonrpc.Request:
			if u.acknowledgesListen(msg) {
				continue // the server took the Upstream's own listen call: nobody else asked
			}
		}
		return msg, nil
	}
}

// pendingRead returns what Read must return before reading the connection: the ending,
// one of the Upstream's own answers, or an injected notification.
func (u *Upstream) pendingRead() (msg jsonrpc.Message, ok bool, err error) {
	u.mu.Lock()
	if len(u.answers) > 0 {
		msg := u.answers[0]
		u.answers = u.answers[1:]
		u.mu.Unlock()
		return msg, true, nil
	}
	u.mu.Unlock()
	select {
	case <-u.failed:
		return nil, true, u.failure
	case msg := <-u.injected:
		return msg, true, nil
	default:
		return nil, false, nil
	}
}

// interrupt wakes a Read blocked on the connection.
func (u *Upstream) interrupt() {
	if wake := u.wake.Load(); wake != nil {
		(*wake)()
	}
}

// Write implements mcp.Connection. A call is sent on a goroutine of its own and Write
// returns at once: a server may hold a call's answer, headers included, until the client
// has answered a request of its own (an elicitation, say), which a relay can only
// send once Write has returned. A writer that only waits for the answer sends on its own
// goroutine (WithWaitingWriter): its client answers the server on another. The call is
// bounded by the server's timeout; a call that fails or times out is answered with a
// JSON-RPC error, read like the server's answers. Anything else is sent before Write
// returns, within the timeout.
func (u *Upstream) Write(wctx context.Context, msg jsonrpc.Message) error {
	select {
	case <-u.failed:
		return u.failure
	default:
	}
	// Not a child of u.ctx, which would keep every call's context until the Upstream
	// closes; Close cancels the calls still owed an answer instead.
	// The write's span comes along (the gateway's client span of the call): the request's
	// trace context goes upstream in its headers, its dial and TLS are that span's events.
	if u.user != nil && u.writeDeferred(msg) {
		return nil
	}
	ctx, cancel := context.WithCancel(tracing.CarryOver(context.WithoutCancel(u.ctx), wctx))
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		waiting, _ := wctx.Value(waitingWriterKey{}).(bool)
		if waiting {
			// The writer ends the exchange if it goes away while the server holds the
			// headers, as the cancellation it would send for a call sent apart does.
			defer context.AfterFunc(wctx, cancel)()
		}
		u.call(ctx, cancel, req, waiting)
		return nil
	}
	timer := time.AfterFunc(u.timeout, cancel)
	err := u.conn.Write(ctx, msg)
	timedOut := !timer.Stop()
	cancel()
	if req, ok := msg.(*jsonrpc.Request); ok && err == nil {
		switch {
		case req.Method == "notifications/cancelled":
			u.cancelled(req)
		case req.Method == "notifications/initialized" && u.transport == TransportStreamableHTTP &&
			protocolVersionOf(u.ctx) < modernProtocol:
			go u.listen()
		}
	}
	if err != nil {
		if timedOut {
			return newError(ReasonTimeout, "server did not take the message within %s", u.timeout)
		}
		return u.red.scrubError(u.classify(err))
	}
	return nil
}

// waitingWriterKey marks the context of a writer that waits for its call's answer
// (WithWaitingWriter).
type waitingWriterKey struct{}

// WithWaitingWriter returns ctx marked as the context of a writer that does nothing
// but wait for the answer to the call it writes, as mcp.ClientSession.CallTool does:
// an Upstream sends such a call on the writer's goroutine, until the server's
// response headers, instead of on one of its own. A relay that reads the client's next
// message once Write returns must not use it (see Write).
//
// Why: the handoff to a goroutine of its own cost a sessionless tools/call through
// the gateway about 4% of its latency (BenchmarkGatewayOverBareProxy).
func WithWaitingWriter(ctx context.Context) context.Context {
	return context.WithValue(ctx, waitingWriterKey{}, true)
}

// call sends req and waits, at most the server's timeout, for its answer: on a
// goroutine of its own, or on the caller's when inline (see WithWaitingWriter).
// Either way a failure to send is answered, and read, like the server's answer.
func (u *Upstream) call(ctx context.Context, cancel context.CancelFunc, req *jsonrpc.Request, inline bool) {
	pc := &pendingCall{cancel: cancel}
	pc.timer = time.AfterFunc(u.timeout, func() {
		u.failCall(req.ID, newError(ReasonTimeout, "server did not answer %s within %s", req.Method, u.timeout))
	})
	u.mu.Lock()
	if req.Method == "initialize" {
		u.initID = req.ID
	}
	u.pending[req.ID] = pc
	u.mu.Unlock()
	send := func() {
		if u.user != nil {
			if e := u.sendDeferredInit(ctx); e != nil {
				u.answerAuthorization(ctx, req.ID, e)
				return
			}
		}
		err := u.conn.Write(ctx, req)
		if err == nil {
			return
		}
		// A server of the sessionless era may refuse a request with an HTTP error whose
		// body is the request's JSON-RPC error (MissingRequiredClientCapability, say):
		// that is the server's answer, read like any other (Read scrubs it). go-sdk
		// wraps a request that never reached the server (a token that could not be
		// obtained, a denied dial) in a JSON-RPC error of its own, "rejected by
		// transport": that one says nothing, the classified failure does.
		if _, ours := errors.AsType[*Error](err); !ours {
			if wire, ok := errors.AsType[*jsonrpc.Error](err); ok && !rejectedByTransport(wire) {
				u.answerCall(req.ID, wire)
				return
			}
		}
		if u.user != nil {
			u.answerAuthorization(ctx, req.ID, u.red.scrubError(u.classify(err)))
			return
		}
		u.answerCall(req.ID, u.red.scrubError(u.classify(err)).wire())
	}
	if inline {
		send()
		return
	}
	go send()
}

// answerAuthorization answers a person's call that failed with e: with the pool's
// AuthorizationRequired when the person holds no grant, else with e.
func (u *Upstream) answerAuthorization(ctx context.Context, id jsonrpc.ID, e *Error) {
	if e.Reason == ReasonAuthorizationRequired {
		u.answerCall(id, u.authorizationRequired(ctx, e))
		return
	}
	u.answerCall(id, e.wire())
}

// rejectedByTransport reports whether wire is go-sdk's jsonrpc2.ErrRejected (internal
// to go-sdk), which marks a request its transport did not deliver.
func rejectedByTransport(wire *jsonrpc.Error) bool {
	return wire.Code == -32005 && wire.Message == "rejected by transport"
}

// failCall answers a call that is still owed an answer with e, ending its exchange.
func (u *Upstream) failCall(id jsonrpc.ID, e *Error) {
	u.answerCall(id, e.wire())
}

// answerCall answers a call that is still owed an answer with wire, ending its exchange.
func (u *Upstream) answerCall(id jsonrpc.ID, wire *jsonrpc.Error) {
	u.mu.Lock()
	pc := u.pending[id]
	delete(u.pending, id)
	// Once the Upstream has failed, Read returns the failure and nothing after it: an
	// answer queued now would come after a failure a reader may have seen already.
	if pc != nil && !u.closed && !u.hasFailed() {
		u.answers = append(u.answers, &jsonrpc.Response{ID: id, Error: wire})
	}
	u.mu.Unlock()
	if pc != nil {
		pc.stop(true)
		u.interrupt()
	}
}

// answered forgets the call resp answers and, for initialize, notes the protocol version
// the server chose. It reports whether resp answers the Upstream's own listen call.
func (u *Upstream) answered(resp *jsonrpc.Response) (own bool) {
	u.mu.Lock()
	if pc := u.pending[resp.ID]; pc != nil {
		// The exchange is not cancelled: go-sdk closes the stream once the answer is
		// in, and cancelling first would cost the kept-alive connection.
		pc.stop(false)
	}
	delete(u.pending, resp.ID)
	isInit := u.initID.IsValid() && resp.ID == u.initID
	_, resourceListen := u.resourceListens[resp.ID]
	own = (u.listenID.IsValid() && resp.ID == u.listenID) || resourceListen
	delete(u.resourceListens, resp.ID)
	u.mu.Unlock()
	if isInit && resp.Error == nil {
		var res struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		if json.Unmarshal(resp.Result, &res) == nil && res.ProtocolVersion != "" {
			u.version.Store(&res.ProtocolVersion)
		}
		if u.user != nil {
			u.owner.rememberInit(resp.Result)
		}
	}
	return own
}

// acknowledgesListen reports whether req is the server's acknowledgement of the
// Upstream's own subscriptions/listen call, the first message on that stream. Passed on,
// it would reach a client that never asked, and one with no stream of its own to take it
// would have it retried for seconds.
func (u *Upstream) acknowledgesListen(req *jsonrpc.Request) bool {
	if req.Method != "notifications/subscriptions/acknowledged" {
		return false
	}
	var params struct {
		Meta map[string]any `json:"_meta"`
	}
	if json.Unmarshal(req.Params, &params) != nil {
		return false
	}
	id, err := jsonrpc.MakeID(params.Meta[mcp.MetaKeySubscriptionID])
	if err != nil {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	_, resourceListen := u.resourceListens[id]
	return (u.listenID.IsValid() && id == u.listenID) || resourceListen
}

// listen opens the stream on which the server sends what answers no request: a
// subscriptions/listen call (SEP-2575) that go-sdk's server transport routes those
// messages to, in place of the standalone GET stream of sessions before 2026-07-28. It
// subscribes to no notification of its own: it only gives the messages a way in. A
// server that does not know the method answers with an error, which Read drops.
func (u *Upstream) listen() {
	u.openListen(json.RawMessage(`{"notifications":{}}`), "")
}

// ListenForResource has a session-era server's notifications/resources/updated of uri
// reach the Upstream's client, and returns how to stop. go-sdk's server sends them on
// the standalone GET stream, which a raw connection cannot open (go-sdk#657), or on an
// open subscriptions/listen stream: this opens one that subscribes to uri, which stays
// open (and subscribed) until stop. A server that knows no such stream answers with an
// error, which Read drops; the update is then lost, as before.
func (u *Upstream) ListenForResource(uri string) (stop func()) {
	params, err := json.Marshal(map[string]any{"notifications": map[string]any{"resourceSubscriptions": []string{uri}}})
	if err != nil {
		return func() {}
	}
	id, ok := u.openListen(params, uri)
	if !ok {
		return func() {}
	}
	return func() {
		u.mu.Lock()
		pc := u.pending[id]
		delete(u.pending, id)
		u.mu.Unlock()
		if pc != nil {
			pc.stop(true)
		}
	}
}

// openListen sends one of the Upstream's own subscriptions/listen calls, with params,
// and reports its id: the one listen (listenID) when resource is "", else one that
// subscribes to resource. The id is known before the call is sent, so that Read knows
// the server's acknowledgement for the Upstream's own.
func (u *Upstream) openListen(params json.RawMessage, resource string) (jsonrpc.ID, bool) {
	id, err := jsonrpc.MakeID("switchboard-listen-" + rand.Text())
	if err != nil {
		return jsonrpc.ID{}, false
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(u.ctx))
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		cancel()
		return jsonrpc.ID{}, false
	}
	if resource == "" {
		u.listenID = id
	} else {
		if u.resourceListens == nil {
			u.resourceListens = map[jsonrpc.ID]string{}
		}
		u.resourceListens[id] = resource
	}
	u.pending[id] = &pendingCall{cancel: cancel}
	u.mu.Unlock()
	req := &jsonrpc.Request{ID: id, Method: "subscriptions/listen", Params: params}
	if err := u.conn.Write(ctx, req); err != nil {
		u.mu.Lock()
		delete(u.pending, id)
		delete(u.resourceListens, id)
		u.mu.Unlock()
		cancel()
		return jsonrpc.ID{}, false
	}
	return id, true
}

// cancelled ends the HTTP exchange of a call the client cancelled, once the cancellation
// has been sent on: the server will not answer it.
func (u *Upstream) cancelled(req *jsonrpc.Request) {
	var params struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(req.Params, &params) != nil {
		return
	}
	id, err := jsonrpc.MakeID(params.RequestID)
	if err != nil {
		return
	}
	u.mu.Lock()
	pc := u.pending[id]
	delete(u.pending, id)
	u.mu.Unlock()
	if pc != nil {
		pc.stop(true)
	}
}

// inject hands the Upstream's reader a notification from the pool's own session.
func (u *Upstream) inject(msg jsonrpc.Message) {
	select {
	case u.injected <- msg:
		u.interrupt()
	default:
	}
}

func (u *Upstream) classify(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, mcp.ErrSessionMissing) {
		return &Error{Reason: ReasonSessionEnded, Message: "server ended the session", Transient: true}
	}
	return classify(err, u.stack.obs.last())
}

// hasFailed reports whether fail has been called.
func (u *Upstream) hasFailed() bool {
	select {
	case <-u.failed:
		return true
	default:
		return false
	}
}

// fail ends the Upstream for e; the first reason sticks. It returns the reason.
func (u *Upstream) fail(e *Error) *Error {
	u.failOnce.Do(func() {
		u.failure = u.red.scrubError(e)
		close(u.failed)
		u.interrupt()
	})
	return u.failure
}

// Close implements mcp.Connection: it ends the server's session (go-sdk sends DELETE for
// a Streamable HTTP session) and every exchange still open.
func (u *Upstream) Close() error {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil
	}
	u.closed = true
	pending := u.pending
	u.pending = map[jsonrpc.ID]*pendingCall{}
	toolsMem, featuresMem := u.toolsMem, u.featuresMem
	u.mu.Unlock()
	for _, mem := range []*lease{toolsMem, featuresMem} {
		if mem != nil {
			mem.close()
		}
	}
	for _, pc := range pending {
		pc.stop(true)
	}
	_ = u.fail(&Error{Reason: ReasonSessionEnded, Message: "upstream session closed"})
	var err error
	if u.conn != nil {
		err = u.conn.Close()
	}
	u.cancel()
	u.stack.close()
	u.owner.removeUpstream(u)
	return err
}

// SessionID implements mcp.Connection: the server's session id, which is a bearer
// secret of the server's session and must not be logged.
func (u *Upstream) SessionID() string {
	if u.conn == nil {
		return ""
	}
	return u.conn.SessionID()
}

// end closes the Upstream for reason: its owner's config changed, the server went away or
// the egress decision no longer allows it.
func (u *Upstream) end(reason *Error) {
	_ = u.fail(reason)
	go func() { _ = u.Close() }()
}

// judge ends the Upstream when the current decider denies an address it connected to.
func (u *Upstream) judge(d EgressDecider) {
	u.stack.setDecider(d)
	for _, dest := range u.stack.obs.destinations() {
		if e := u.stack.judgeDial(dest); e != nil {
			u.end(e)
			return
		}
	}
}

// addUpstream registers u with its session; false once the session is closed.
func (s *session) addUpstream(u *Upstream) bool {
	s.upstreamsMu.Lock()
	defer s.upstreamsMu.Unlock()
	if s.ctx.Err() != nil {
		return false
	}
	if s.upstreams == nil {
		s.upstreams = make(map[*Upstream]struct{})
	}
	s.upstreams[u] = struct{}{}
	return true
}

func (s *session) removeUpstream(u *Upstream) {
	s.upstreamsMu.Lock()
	delete(s.upstreams, u)
	last := len(s.upstreams) == 0
	s.upstreamsMu.Unlock()
	if last {
		// A standby server's session is stopped once it has been unused for a while.
		time.AfterFunc(s.pool.opts.StandbyLinger, func() { s.pool.parkIfUnused(s) })
	}
}

// eachUpstream calls f for every open Upstream of the session.
func (s *session) eachUpstream(f func(*Upstream)) {
	s.upstreamsMu.Lock()
	list := make([]*Upstream, 0, len(s.upstreams))
	for u := range s.upstreams {
		list = append(list, u)
	}
	s.upstreamsMu.Unlock()
	for _, u := range list {
		f(u)
	}
}

// endUpstreams ends every Upstream of a session that is closing.
func (s *session) endUpstreams(why string) {
	s.eachUpstream(func(u *Upstream) {
		u.end(&Error{Reason: ReasonSessionEnded, Message: why, Transient: true})
	})
}

// notifyUpstreams passes a list_changed notification the pool's own session received on
// to every Upstream of the session.
func (s *session) notifyUpstreams(method string) {
	s.eachUpstream(func(u *Upstream) {
		if u.transport == TransportSSE {
			return // its own stream carries the server's notifications
		}
		u.inject(&jsonrpc.Request{Method: method, Params: json.RawMessage("{}")})
	})
}
