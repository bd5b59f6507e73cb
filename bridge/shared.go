package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/relay"
)

// Shared mode's bounds and pacing.
const (
	// sharedQueueSize bounds the messages waiting for one connection's reader. Beyond it
	// messages for that connection are dropped: the process's stdout is read by one loop
	// for every session, and a session that stops reading must not stall the others.
	sharedQueueSize = 256
	// sharedInitTimeout bounds the bridge's own initialize of a fresh process.
	sharedInitTimeout = 30 * time.Second
	// sharedRestartMin and sharedRestartMax bound the pause before restarting a process
	// that ended or failed to start; it doubles with each failure in a row.
	sharedRestartMin = 100 * time.Millisecond
	sharedRestartMax = 10 * time.Second
	// sharedStableAfter is how long a process must have served for its end to count as a
	// fresh failure, which restarts it after sharedRestartMin again.
	sharedStableAfter = 30 * time.Second
)

// The bridge's identity as the one MCP client of a shared process.
const (
	sharedClientName    = "switchboard-bridge"
	sharedClientVersion = "dev"
)

// MCP methods the multiplexer routes itself.
const (
	methodInitialize       = "initialize"
	methodDiscover         = "server/discover"
	methodInitialized      = "notifications/initialized"
	methodCancelled        = "notifications/cancelled"
	methodProgress         = "notifications/progress"
	methodSubscribe        = "resources/subscribe"
	methodUnsubscribe      = "resources/unsubscribe"
	methodResourceUpdated  = "notifications/resources/updated"
	methodSetLevel         = "logging/setLevel"
	methodLogMessage       = "notifications/message"
	methodPing             = "ping"
	methodRootsListChanged = "notifications/roots/list_changed"
	sessionEndedReason     = "the client session ended"
)

// errProcessReplaced means the process a call was about to go to ended in the meantime;
// the call waits for the next one.
var errProcessReplaced = errors.New("shared mcp server process was replaced")

// sharedProcess runs one subprocess of the server command for all sessions of a bridge,
// and multiplexes the sessions' JSON-RPC traffic over its stdin and stdout.
//
// Lifecycle. The process is started on the first connect, not by newSharedProcess, so
// that a bridge no client uses runs nothing, as in per-session mode; from then on it runs
// until close, whether sessions come and go. The bridge initializes it itself, once per
// process: an initialize request naming the bridge (clientInfo "switchboard-bridge") with
// no client capabilities at all (no sampling, elicitation or roots: those would need one
// particular client behind them), at the newest protocol version go-sdk supports that
// still starts a session with initialize (listenProtocol, SEP-2575, replaced that
// handshake), then notifications/initialized. A process that exits, closes its stdout or
// writes an over-long line is stopped and restarted after a pause that doubles from
// sharedRestartMin to sharedRestartMax, reset once a process has served
// sharedStableAfter; each new process is initialized again and gets the live resource
// subscriptions and the last logging level back. Sessions outlive a process: the calls it
// still owed fail with a CodeInternalError that says why it ended, and later calls go to
// the next one.
//
// While no process is initialized, a call waits for the next start to settle: it is sent
// once that process is initialized, or fails with the reason that start failed, so it
// waits at most about sharedRestartMax plus sharedInitTimeout, and less when the
// connection or the sharedProcess closes. Notifications from a client are not kept while
// no process runs.
//
// Routing, from a client:
//   - server/discover is refused with CodeUnsupportedProtocolVersion, so that a client
//     falls back to initialize, the handshake the process knows;
//   - initialize is answered from the process's cached InitializeResult (waiting for the
//     first one if need be): a client learns the protocol version the process chose and
//     its capabilities, and its own capabilities go nowhere; its notifications/initialized
//     is not passed on;
//   - every other call goes to the process under an ID unique for the process, and its
//     _meta.progressToken likewise; the response, and notifications/progress for that
//     token, go back to the asking session only, under its own ID and token;
//   - notifications/cancelled is passed on under the process ID of the call it names, if
//     the session owns that call; the call is forgotten then, so a late response is dropped;
//   - resources/subscribe and resources/unsubscribe are counted per URI: a subscribe is
//     passed on while the process holds no subscription for the URI, the last unsubscribe
//     is passed on, and anything else is answered locally with {};
//   - logging/setLevel is passed on, and sets the level for the whole process: the last
//     one any session set wins;
//   - a response and notifications/progress are dropped, since no request of the process
//     reaches a client, and so is notifications/roots/list_changed, since the bridge
//     declared no roots; any other notification is passed on.
//
// Routing, from the process:
//   - notifications/resources/updated goes to the sessions subscribed to that URI, or to a
//     URI it lies under ("file:///a/" for "file:///a/b"), since the update may name a
//     sub-resource;
//   - notifications/message goes to the sessions that have set a logging level
//     successfully, since no other session asked for logs;
//   - notifications/progress goes to the session whose call carries the token, and
//     notifications/cancelled is dropped (it cancels a request of the process, which the
//     bridge has answered already);
//   - every other notification, the list_changed ones included, goes to every session;
//   - ping is answered with {}, and any other request (sampling, elicitation, roots) with
//     CodeMethodNotFound: the bridge declared none of those capabilities.
//
// Bounds. Each connection queues at most sharedQueueSize messages for its reader; more
// are dropped for that session (logged at V(1)), so that a session that never reads
// neither blocks the process's reader nor grows without bound. Closing a connection
// forgets its calls (and cancels them in the process) and releases its subscriptions.
//
// Logs name a session by its sequence number only: a session ID is a bearer secret.
type sharedProcess struct {
	opts Options
	log  logr.Logger

	mu         sync.Mutex
	conns      map[*sharedConn]struct{}
	current    *incarnation             // the running process, initialized or not
	live       *incarnation             // current, once initialized: calls go to it
	next       *startAttempt            // what calls wait for while no process is live
	initResult json.RawMessage          // the latest process's InitializeResult
	subs       map[string]*subscription // live resource subscriptions by URI
	logLevel   json.RawMessage          // the params of the last logging/setLevel that succeeded
	lastID     int64                    // process-unique request IDs and progress tokens
	started    bool
	closed     bool

	// subsOrder keeps the subscribe and unsubscribe requests on stdin in the order the
	// bookkeeping that decided them ran, so that the process and subs agree.
	subsOrder sync.Mutex

	done      chan struct{} // closed by close
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// incarnation is one run of the server process.
type incarnation struct {
	proc     *process
	conn     mcp.Connection // JSON-RPC over its stdin and stdout
	log      logr.Logger
	readDone chan struct{} // closed once reading stdout failed
	readErr  error         // why, readable once readDone is closed

	// Guarded by sharedProcess.mu.
	pending  map[jsonrpc.ID]*sharedCall // calls the process owes, by process ID
	progress map[jsonrpc.ID]*sharedCall // calls with a progress token, by process token
	writeErr error                      // the first failed write to stdin
	readyAt  time.Time
}

// sharedCall is one call in the process: a session's, or the bridge's own (conn nil).
type sharedCall struct {
	inc       *incarnation
	conn      *sharedConn
	id        jsonrpc.ID // in the process
	origID    jsonrpc.ID // in the session
	method    string
	token     jsonrpc.ID             // the process progress token, if the call has one
	origToken json.RawMessage        // the session's progress token
	uri       string                 // of resources/subscribe
	params    json.RawMessage        // of logging/setLevel, restored on a new process
	reply     chan *jsonrpc.Response // the bridge's own call waits here when non-nil
}

// startAttempt is one try at getting an initialized process. Calls that arrive while no
// process is live wait until it settles.
type startAttempt struct {
	settled chan struct{}
	err     error // why it failed; nil once it succeeded
	done    bool
}

func newStartAttempt() *startAttempt { return &startAttempt{settled: make(chan struct{})} }

// settle ends the attempt with err (nil: a process is live); only the first call counts.
func (a *startAttempt) settle(err error) {
	if a.done {
		return
	}
	a.done, a.err = true, err
	close(a.settled)
}

// subscription is a resource URI some sessions subscribed to.
type subscription struct {
	sessions  map[*sharedConn]struct{}
	confirmed bool // the current process accepted a subscribe for it
}

// newSharedProcess returns a sharedProcess for opts, which must have their defaults
// applied. It starts nothing until the first connect.
func newSharedProcess(opts Options, log logr.Logger) *sharedProcess {
	return &sharedProcess{
		opts:  opts,
		log:   log.WithValues("mode", "shared"),
		conns: make(map[*sharedConn]struct{}),
		next:  newStartAttempt(),
		subs:  make(map[string]*subscription),
		done:  make(chan struct{}),
	}
}

// connect returns the server side of one client session: a connection whose Write takes
// the client's JSON-RPC messages and whose Read returns the messages meant for that
// client. seq names the session in logs. connect does not wait for the process: the
// client's initialize does. It fails once close has been called.
func (p *sharedProcess) connect(_ context.Context, seq uint64) (mcp.Connection, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrShuttingDown
	}
	c := &sharedConn{
		p:       p,
		seq:     seq,
		log:     p.log.WithValues("session", seq),
		inbound: make(chan jsonrpc.Message, sharedQueueSize),
		closed:  make(chan struct{}),
		ended:   make(chan struct{}),
		calls:   make(map[jsonrpc.ID]*sharedCall),
		subs:    make(map[string]struct{}),
	}
	p.conns[c] = struct{}{}
	if !p.started {
		p.started = true
		p.wg.Add(1)
		go p.supervise()
	}
	return c, nil
}

// pid returns the process ID of the running process, or 0 if none runs.
func (p *sharedProcess) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.current == nil {
		return 0
	}
	return p.current.proc.pid
}

// close fails every call still in flight with ErrShuttingDown, ends every connection (a
// Read returns what was queued, then io.EOF), refuses new ones and stops the process: its
// stdin is closed, it has Options.GracePeriod to exit, then SIGTERM and SIGKILL go to its
// process group. It returns once the process has been reaped and every goroutine of the
// sharedProcess has ended. It is safe to call more than once.
func (p *sharedProcess) close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		close(p.done)
		p.next.settle(ErrShuttingDown)
		conns := make([]*sharedConn, 0, len(p.conns))
		for c := range p.conns {
			conns = append(conns, c)
		}
		var owed []*sharedCall
		inc := p.current
		if inc != nil {
			owed = inc.takeCallsLocked()
		}
		p.live = nil
		p.mu.Unlock()

		if inc != nil {
			// Closing stdin is the first step of stopping it anyway, and it releases any
			// write a process that stopped reading holds up.
			_ = inc.conn.Close()
		}
		failCalls(owed, ErrShuttingDown)
		for _, c := range conns {
			c.end()
		}
	})
	p.wg.Wait()
	return nil
}

// supervise runs the process until close: it starts and initializes one, waits for it to
// end, fails what it owed, and starts the next after a pause.
func (p *sharedProcess) supervise() {
	defer p.wg.Done()
	failures := 0
	for {
		inc, result, err := p.launch()
		reason := err
		if err == nil && p.goLive(inc, result) {
			select {
			case <-inc.readDone:
			case <-p.done:
			}
			reason = p.endReason(inc)
		} else if reason == nil {
			reason = ErrShuttingDown
		}
		shuttingDown := p.retire(inc, reason)
		if inc != nil {
			grace := time.Duration(0) // a process that ended on its own or broke the protocol
			if shuttingDown {
				grace = p.opts.GracePeriod
			}
			p.stopIncarnation(inc, grace, reason)
		}
		if shuttingDown {
			return
		}
		if inc != nil && !inc.readyAt.IsZero() && time.Since(inc.readyAt) >= sharedStableAfter {
			failures = 0
		}
		failures++
		delay := restartDelay(failures)
		p.log.Info("Restarting the shared MCP server process", "reason", reason.Error(), "in", delay.String())
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-p.done:
			timer.Stop()
			return
		}
	}
}

// restartDelay is the pause before the next start after failures failed or ended
// processes in a row.
func restartDelay(failures int) time.Duration {
	d := sharedRestartMin
	for i := 1; i < failures && d < sharedRestartMax; i++ {
		d *= 2
	}
	return min(d, sharedRestartMax)
}

// launch starts a process and initializes it. On failure after the start it returns the
// incarnation too, for the caller to stop.
func (p *sharedProcess) launch() (*incarnation, json.RawMessage, error) {
	proc, err := startProcess(p.opts.Command, p.opts.Env, p.opts.Dir)
	if err != nil {
		return nil, nil, err
	}
	inc := &incarnation{
		proc:     proc,
		log:      p.log.WithValues("pid", proc.pid),
		readDone: make(chan struct{}),
		pending:  make(map[jsonrpc.ID]*sharedCall),
		progress: make(map[jsonrpc.ID]*sharedCall),
	}
	if inc.conn, err = proc.connection(p.opts.MaxMessageBytes); err != nil {
		_ = proc.stop(0)
		proc.closeOutputs()
		return nil, nil, fmt.Errorf("connecting to the shared mcp server: %w", err)
	}
	proc.logStderrTo(inc.log)
	p.mu.Lock()
	p.current = inc
	p.mu.Unlock()
	p.wg.Add(1)
	go p.read(inc)
	inc.log.Info("Started the shared MCP server process")

	result, err := p.initialize(inc)
	if err != nil {
		return inc, nil, err
	}
	return inc, result, nil
}

// bridgeInitializeParams are the bridge's InitializeParams with empty capabilities:
// mcp.ClientCapabilities always marshals a "roots" member, which would declare roots.
type bridgeInitializeParams struct {
	*mcp.InitializeParams
	Capabilities struct{} `json:"capabilities"`
}

// sharedProtocolVersion is the protocol version the bridge asks for: the newest go-sdk
// supports that still begins a session with initialize.
func sharedProtocolVersion() string {
	for _, v := range mcp.SupportedProtocolVersions() {
		if v < listenProtocol {
			return v
		}
	}
	return listenProtocol
}

// initialize runs the initialize handshake with a fresh process and returns its
// InitializeResult.
func (p *sharedProcess) initialize(inc *incarnation) (json.RawMessage, error) {
	params := bridgeInitializeParams{InitializeParams: &mcp.InitializeParams{
		ClientInfo:      &mcp.Implementation{Name: sharedClientName, Version: sharedClientVersion},
		ProtocolVersion: sharedProtocolVersion(),
	}}
	resp, err := p.callProcess(inc, methodInitialize, params)
	if err != nil {
		return nil, fmt.Errorf("initializing the shared mcp server: %w", err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("the shared mcp server refused initialize: %w", resp.Error)
	}
	var res mcp.InitializeResult
	if err := json.Unmarshal(resp.Result, &res); err != nil {
		return nil, fmt.Errorf("the shared mcp server answered initialize with a malformed result: %w", err)
	}
	if !slices.Contains(mcp.SupportedProtocolVersions(), res.ProtocolVersion) {
		return nil, fmt.Errorf("the shared mcp server chose protocol version %q, which is not supported", res.ProtocolVersion)
	}
	initialized, err := newNotification(methodInitialized, &mcp.InitializedParams{})
	if err != nil {
		return nil, err
	}
	if err := inc.conn.Write(context.Background(), initialized); err != nil {
		return nil, fmt.Errorf("writing to the shared mcp server: %w", err)
	}
	serverName := ""
	if res.ServerInfo != nil {
		serverName = res.ServerInfo.Name
	}
	inc.log.Info("Initialized the shared MCP server", "protocolVersion", res.ProtocolVersion, "server", serverName)
	return resp.Result, nil
}

// callProcess sends the bridge's own call to inc and waits, at most sharedInitTimeout,
// for its response.
func (p *sharedProcess) callProcess(inc *incarnation, method string, params any) (*jsonrpc.Response, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", method, err)
	}
	call := &sharedCall{method: method, reply: make(chan *jsonrpc.Response, 1)}
	p.mu.Lock()
	if inc.pending == nil {
		p.mu.Unlock()
		return nil, ErrShuttingDown // close took the process's calls
	}
	req := p.registerLocked(inc, call, &jsonrpc.Request{Method: method, Params: raw})
	p.mu.Unlock()
	if !p.writeProcess(inc, req) {
		if inc.hasEnded() {
			return nil, p.endReason(inc) // the exit status says more than a broken pipe
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return nil, fmt.Errorf("writing to the shared mcp server: %w", inc.writeErr)
	}
	timer := time.NewTimer(sharedInitTimeout)
	defer timer.Stop()
	select {
	case resp := <-call.reply:
		return resp, nil
	case <-inc.readDone:
		return nil, p.endReason(inc)
	case <-p.done:
		return nil, ErrShuttingDown
	case <-timer.C:
		return nil, fmt.Errorf("no answer to %s within %s", method, sharedInitTimeout)
	}
}

// goLive makes an initialized process the one calls go to, and gives it back the
// subscriptions and logging level sessions hold. It reports false once close has been
// called.
func (p *sharedProcess) goLive(inc *incarnation, result json.RawMessage) bool {
	p.subsOrder.Lock()
	defer p.subsOrder.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	inc.readyAt = time.Now()
	p.live = inc
	p.initResult = result
	var restore []*jsonrpc.Request
	for uri := range p.subs {
		if req, err := p.ownCallLocked(inc, methodSubscribe, &mcp.SubscribeParams{URI: uri}, uri); err == nil {
			restore = append(restore, req)
		}
	}
	if p.logLevel != nil {
		restore = append(restore, p.registerLocked(inc, &sharedCall{params: p.logLevel},
			&jsonrpc.Request{Method: methodSetLevel, Params: p.logLevel}))
	}
	p.next.settle(nil)
	p.mu.Unlock()
	for _, req := range restore {
		p.writeProcess(inc, req)
	}
	if len(restore) > 0 {
		inc.log.Info("Restored subscriptions and logging level on the shared MCP server", "requests", len(restore))
	}
	return true
}

// retire takes an ended or failed incarnation (nil: it did not start) out of service:
// the calls it owed fail with reason, and calls from now on wait for the next start. It
// reports whether the sharedProcess is closing.
func (p *sharedProcess) retire(inc *incarnation, reason error) bool {
	p.mu.Lock()
	if inc != nil && p.current == inc {
		p.current = nil
	}
	if p.closed {
		p.mu.Unlock()
		return true
	}
	var owed []*sharedCall
	if inc != nil {
		if p.live == inc {
			p.live = nil
		}
		owed = inc.takeCallsLocked()
	}
	for _, s := range p.subs {
		s.confirmed = false
	}
	p.next.settle(fmt.Errorf("shared mcp server process is not running: %w", reason))
	p.next = newStartAttempt()
	p.mu.Unlock()

	if n := countSessionCalls(owed); n > 0 {
		p.log.Info("Failing the calls the shared MCP server process still owed", "calls", n, "reason", reason.Error())
	}
	failCalls(owed, reason)
	return false
}

// takeCallsLocked empties the incarnation's call tables and returns what they held.
func (inc *incarnation) takeCallsLocked() []*sharedCall {
	owed := make([]*sharedCall, 0, len(inc.pending))
	for _, call := range inc.pending {
		owed = append(owed, call)
		if call.conn != nil && call.conn.calls[call.origID] == call {
			delete(call.conn.calls, call.origID)
		}
	}
	inc.pending, inc.progress = nil, nil
	return owed
}

func countSessionCalls(calls []*sharedCall) int {
	n := 0
	for _, call := range calls {
		if call.conn != nil {
			n++
		}
	}
	return n
}

// failCalls answers the sessions' calls with a JSON-RPC error carrying reason.
func failCalls(calls []*sharedCall, reason error) {
	for _, call := range calls {
		if call.conn != nil {
			call.conn.deliver(errorResponse(call.origID, reason))
		}
	}
}

// endReason says why inc's stdout stopped, preferring the exit status.
func (p *sharedProcess) endReason(inc *incarnation) error {
	select {
	case <-p.done:
		return ErrShuttingDown
	default:
	}
	err := inc.readErr
	switch {
	case errors.Is(err, ErrMessageTooLarge):
		return fmt.Errorf("shared mcp server process stopped: %w", err)
	case errors.Is(err, io.EOF):
		timer := time.NewTimer(exitWait)
		defer timer.Stop()
		select {
		case <-inc.proc.exited:
			return fmt.Errorf("shared %w: %w", ErrServerExited, inc.proc.exitError())
		case <-p.done:
			return ErrShuttingDown
		case <-timer.C:
		}
		p.mu.Lock()
		writeErr := inc.writeErr
		p.mu.Unlock()
		if writeErr != nil {
			return fmt.Errorf("shared %w: writing to its stdin: %w", ErrServerExited, writeErr)
		}
		return fmt.Errorf("shared %w: it closed its stdout", ErrServerExited)
	default:
		return fmt.Errorf("reading from the shared mcp server: %w", err)
	}
}

// stopIncarnation stops the process (stdin closed, grace, SIGTERM then SIGKILL to the
// group), waits until it is reaped and its output drained.
func (p *sharedProcess) stopIncarnation(inc *incarnation, grace time.Duration, reason error) {
	_ = inc.conn.Close() // closes stdin: the MCP stdio shutdown signal
	exit, err := inc.proc.shutdown(grace)
	if err != nil {
		inc.log.Error(err, "Could not stop the shared MCP server process")
	}
	<-inc.readDone
	inc.log.Info("Shared MCP server process ended", "reason", reason.Error(), "exit", exit)
}

// read routes every message the process writes until its stdout fails.
func (p *sharedProcess) read(inc *incarnation) {
	defer p.wg.Done()
	defer close(inc.readDone)
	for {
		msg, err := inc.conn.Read(context.Background())
		if err != nil {
			inc.readErr = err
			return
		}
		switch msg := msg.(type) {
		case *jsonrpc.Response:
			p.routeResponse(inc, msg)
		case *jsonrpc.Request:
			if msg.IsCall() {
				p.answerProcessCall(inc, msg)
			} else {
				p.routeNotification(inc, msg)
			}
		}
	}
}

// routeResponse settles the call resp answers and passes it to the session that made it,
// under that session's ID.
func (p *sharedProcess) routeResponse(inc *incarnation, resp *jsonrpc.Response) {
	p.mu.Lock()
	call := inc.pending[resp.ID]
	if call == nil {
		p.mu.Unlock()
		inc.log.V(1).Info("Dropped a response to no call in flight (cancelled, or its session ended)")
		return
	}
	p.forgetLocked(call)
	switch call.method {
	case methodSubscribe:
		p.subscribeSettledLocked(call, resp.Error == nil)
	case methodSetLevel:
		if resp.Error == nil {
			p.logLevel = call.params
			if call.conn != nil {
				call.conn.logging = true
			}
		}
	}
	p.mu.Unlock()

	switch {
	case call.reply != nil:
		call.reply <- resp
	case call.conn != nil:
		call.conn.deliver(&jsonrpc.Response{ID: call.origID, Result: resp.Result, Error: resp.Error})
	case resp.Error != nil:
		inc.log.Info("The shared MCP server refused a request of the bridge", "method", call.method, "error", resp.Error.Error())
	}
}

// subscribeSettledLocked records the process's answer to a resources/subscribe.
func (p *sharedProcess) subscribeSettledLocked(call *sharedCall, accepted bool) {
	s := p.subs[call.uri]
	if s == nil {
		return
	}
	if accepted {
		if call.inc == p.live {
			s.confirmed = true
		}
		return
	}
	if call.conn != nil {
		// Refused: that session holds no subscription after all.
		delete(s.sessions, call.conn)
		delete(call.conn.subs, call.uri)
		if len(s.sessions) == 0 {
			delete(p.subs, call.uri)
		}
	}
}

// answerProcessCall answers a request of the process: the bridge is its only client, and
// has nothing to answer but ping with. The answer is written off the read loop, which
// must not wait for stdin.
func (p *sharedProcess) answerProcessCall(inc *incarnation, req *jsonrpc.Request) {
	resp := &jsonrpc.Response{ID: req.ID, Result: json.RawMessage("{}")}
	if req.Method != methodPing {
		inc.log.V(1).Info("Refused a request of the shared MCP server", "method", req.Method)
		resp = relay.ErrorResponse(req.ID, jsonrpc.CodeMethodNotFound, fmt.Errorf(
			"method %q not found: the bridge shares this server among its clients and declared no client capabilities", req.Method))
	}
	p.wg.Go(func() {
		if err := inc.conn.Write(context.Background(), resp); err != nil {
			inc.log.V(1).Info("Could not answer a request of the shared MCP server", "reason", err.Error())
		}
	})
}

// routeNotification passes a notification of the process to the sessions it concerns.
func (p *sharedProcess) routeNotification(inc *incarnation, note *jsonrpc.Request) {
	switch note.Method {
	case methodProgress:
		p.routeProgress(inc, note)
		return
	case methodCancelled:
		return // it cancels a request of the process, which the bridge has answered
	}
	var uri string
	if note.Method == methodResourceUpdated {
		var params mcp.ResourceUpdatedNotificationParams
		if err := json.Unmarshal(note.Params, &params); err != nil || params.URI == "" {
			inc.log.V(1).Info("Dropped a malformed resource update")
			return
		}
		uri = params.URI
	}
	p.mu.Lock()
	targets := make([]*sharedConn, 0, len(p.conns))
	for c := range p.conns {
		switch note.Method {
		case methodResourceUpdated:
			if c.subscribedLocked(uri) {
				targets = append(targets, c)
			}
		case methodLogMessage:
			if c.logging {
				targets = append(targets, c)
			}
		default:
			targets = append(targets, c)
		}
	}
	p.mu.Unlock()
	for _, c := range targets {
		copied := *note // each session's transport may keep what it is given
		c.deliver(&copied)
	}
}

// routeProgress passes a progress notification to the session whose call carries its
// token, under that session's token.
func (p *sharedProcess) routeProgress(inc *incarnation, note *jsonrpc.Request) {
	var params mcp.ProgressNotificationParams
	if err := json.Unmarshal(note.Params, &params); err != nil {
		inc.log.V(1).Info("Dropped a malformed progress notification")
		return
	}
	token, err := jsonrpc.MakeID(params.ProgressToken)
	if err != nil {
		inc.log.V(1).Info("Dropped a progress notification with a malformed token")
		return
	}
	p.mu.Lock()
	call := inc.progress[token]
	p.mu.Unlock()
	if call == nil || call.conn == nil {
		return // its call is over
	}
	rewritten, err := withMember(note.Params, "progressToken", call.origToken)
	if err != nil {
		return
	}
	call.conn.deliver(&jsonrpc.Request{Method: note.Method, Params: rewritten})
}

// await returns the live process, waiting for the next start to settle if there is none.
func (p *sharedProcess) await(ctx context.Context, c *sharedConn) (*incarnation, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrShuttingDown
		}
		if live := p.live; live != nil {
			p.mu.Unlock()
			return live, nil
		}
		next := p.next
		p.mu.Unlock()
		select {
		case <-next.settled:
			if next.err != nil {
				return nil, next.err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.closed:
			return nil, mcp.ErrConnectionClosed
		case <-p.done:
			return nil, ErrShuttingDown
		}
	}
}

// newIDLocked returns a request ID no other call of this sharedProcess uses.
func (p *sharedProcess) newIDLocked() jsonrpc.ID {
	p.lastID++
	// jsonrpc has no constructor for numeric IDs but MakeID, which takes JSON's float64;
	// the counter stays far below 2^53.
	id, _ := jsonrpc.MakeID(float64(p.lastID))
	return id
}

// registerLocked records call as owed by inc and returns req as the process must see it:
// under a process-unique ID, and with a process-unique progress token if it has one.
func (p *sharedProcess) registerLocked(inc *incarnation, call *sharedCall, req *jsonrpc.Request) *jsonrpc.Request {
	call.inc = inc
	call.id = p.newIDLocked()
	call.origID = req.ID
	call.method = req.Method
	params := req.Params
	if token := progressToken(params); token != nil {
		if rewritten, err := withMeta(params, "progressToken", rawID(call.id)); err == nil {
			params = rewritten
			call.token, call.origToken = call.id, token
			inc.progress[call.token] = call
		}
	}
	inc.pending[call.id] = call
	if call.conn != nil {
		call.conn.calls[call.origID] = call
	}
	return &jsonrpc.Request{ID: call.id, Method: req.Method, Params: params}
}

// ownCallLocked registers a call of the bridge itself whose response nobody waits for.
func (p *sharedProcess) ownCallLocked(inc *incarnation, method string, params any, uri string) (*jsonrpc.Request, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	call := &sharedCall{uri: uri}
	return p.registerLocked(inc, call, &jsonrpc.Request{Method: method, Params: raw}), nil
}

// forgetLocked removes a call from the tables it is in.
func (p *sharedProcess) forgetLocked(call *sharedCall) {
	delete(call.inc.pending, call.id)
	if call.token.IsValid() {
		delete(call.inc.progress, call.token)
	}
	if call.conn != nil && call.conn.calls[call.origID] == call {
		delete(call.conn.calls, call.origID)
	}
}

// writeProcess writes msg to inc's stdin. A failed write is remembered as the likely
// reason the process is ending, and closes its connection, which ends the read loop
// (and so the process), since a process whose stdin is broken can serve nobody.
func (p *sharedProcess) writeProcess(inc *incarnation, msg jsonrpc.Message) bool {
	err := inc.conn.Write(context.Background(), msg)
	if err == nil {
		return true
	}
	p.mu.Lock()
	if inc.writeErr == nil {
		inc.writeErr = err
	}
	p.mu.Unlock()
	// Give the read loop a moment to see the exit, the better reason.
	timer := time.NewTimer(exitWait)
	defer timer.Stop()
	select {
	case <-inc.readDone:
	case <-timer.C:
		_ = inc.conn.Close()
	}
	return false
}

// forward passes a session's call to the process, waiting for one if none is live. A call
// that cannot be sent is answered with a JSON-RPC error.
func (p *sharedProcess) forward(ctx context.Context, c *sharedConn, req *jsonrpc.Request, call *sharedCall) {
	for {
		inc, err := p.await(ctx, c)
		if err != nil {
			c.deliver(errorResponse(req.ID, err))
			return
		}
		out, err := p.register(inc, c, req, call)
		if errors.Is(err, errProcessReplaced) {
			continue
		}
		if err != nil {
			return // the connection closed: nobody to answer
		}
		p.send(inc, call, out)
		return
	}
}

// register records a session's call as owed by inc, unless inc is no longer live.
func (p *sharedProcess) register(inc *incarnation, c *sharedConn, req *jsonrpc.Request, call *sharedCall) (*jsonrpc.Request, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.isClosed() {
		return nil, mcp.ErrConnectionClosed
	}
	if p.live != inc {
		return nil, errProcessReplaced
	}
	call.conn = c
	return p.registerLocked(inc, call, req), nil
}

// send writes a registered call to the process; if that fails, the call fails with the
// reason, unless the process's end has answered it already.
func (p *sharedProcess) send(inc *incarnation, call *sharedCall, out *jsonrpc.Request) {
	if p.writeProcess(inc, out) {
		return
	}
	p.mu.Lock()
	owed := inc.pending[call.id] == call
	if owed {
		p.forgetLocked(call)
	}
	writeErr := inc.writeErr
	p.mu.Unlock()
	if !owed || call.conn == nil {
		return
	}
	reason := fmt.Errorf("writing to the shared mcp server: %w", writeErr)
	if inc.hasEnded() {
		reason = p.endReason(inc)
	}
	call.conn.deliver(errorResponse(call.origID, reason))
}

func (inc *incarnation) hasEnded() bool {
	select {
	case <-inc.readDone:
		return true
	default:
		return false
	}
}

// answerInitialize answers a session's initialize from the process's InitializeResult.
func (p *sharedProcess) answerInitialize(ctx context.Context, c *sharedConn, req *jsonrpc.Request) {
	p.mu.Lock()
	result := p.initResult
	p.mu.Unlock()
	if result == nil {
		if _, err := p.await(ctx, c); err != nil {
			c.deliver(errorResponse(req.ID, err))
			return
		}
		p.mu.Lock()
		result = p.initResult
		p.mu.Unlock()
	}
	c.log.V(1).Info("Answered initialize from the shared MCP server's result")
	c.deliver(&jsonrpc.Response{ID: req.ID, Result: result})
}

// subscribe passes a session's resources/subscribe on unless the process already holds a
// subscription for the URI, in which case it answers {}.
func (p *sharedProcess) subscribe(ctx context.Context, c *sharedConn, req *jsonrpc.Request) {
	var params mcp.SubscribeParams
	if err := json.Unmarshal(req.Params, &params); err != nil || params.URI == "" {
		p.forward(ctx, c, req, &sharedCall{}) // the server explains what is wrong with it
		return
	}
	for {
		inc, err := p.await(ctx, c)
		if err != nil {
			c.deliver(errorResponse(req.ID, err))
			return
		}
		p.subsOrder.Lock()
		p.mu.Lock()
		if c.isClosed() {
			p.mu.Unlock()
			p.subsOrder.Unlock()
			return
		}
		if p.live != inc {
			p.mu.Unlock()
			p.subsOrder.Unlock()
			continue
		}
		s := p.subs[params.URI]
		if s == nil {
			s = &subscription{sessions: make(map[*sharedConn]struct{})}
			p.subs[params.URI] = s
		}
		s.sessions[c] = struct{}{}
		c.subs[params.URI] = struct{}{}
		var out *jsonrpc.Request
		call := &sharedCall{conn: c, uri: params.URI}
		if !s.confirmed {
			out = p.registerLocked(inc, call, req)
		}
		p.mu.Unlock()
		if out == nil {
			c.deliver(emptyResult(req.ID))
		} else {
			p.send(inc, call, out)
		}
		p.subsOrder.Unlock()
		return
	}
}

// unsubscribe releases a session's subscription; the last one for a URI passes the
// request on to a live process, anything else is answered {}.
func (p *sharedProcess) unsubscribe(ctx context.Context, c *sharedConn, req *jsonrpc.Request) {
	var params mcp.UnsubscribeParams
	if err := json.Unmarshal(req.Params, &params); err != nil || params.URI == "" {
		p.forward(ctx, c, req, &sharedCall{})
		return
	}
	p.subsOrder.Lock()
	defer p.subsOrder.Unlock()
	p.mu.Lock()
	if c.isClosed() {
		p.mu.Unlock()
		return
	}
	var out *jsonrpc.Request
	call := &sharedCall{conn: c, uri: params.URI}
	inc := p.live
	if p.releaseLocked(c, params.URI) && inc != nil {
		out = p.registerLocked(inc, call, req)
	}
	p.mu.Unlock()
	if out == nil {
		c.deliver(emptyResult(req.ID))
		return
	}
	p.send(inc, call, out)
}

// releaseLocked drops c's subscription to uri and reports whether it was the last one
// the process holds.
func (p *sharedProcess) releaseLocked(c *sharedConn, uri string) bool {
	if _, ok := c.subs[uri]; !ok {
		return false
	}
	delete(c.subs, uri)
	s := p.subs[uri]
	if s == nil {
		return false
	}
	delete(s.sessions, c)
	if len(s.sessions) > 0 {
		return false
	}
	delete(p.subs, uri)
	return s.confirmed
}

// cancel passes a session's notifications/cancelled on under the process ID of the call
// it names, if that call is the session's and still in flight.
func (p *sharedProcess) cancel(c *sharedConn, note *jsonrpc.Request) {
	var params mcp.CancelledParams
	if err := json.Unmarshal(note.Params, &params); err != nil {
		return
	}
	id, err := jsonrpc.MakeID(params.RequestID)
	if err != nil {
		return
	}
	p.mu.Lock()
	call := c.calls[id]
	if call == nil || call.inc != p.live {
		p.mu.Unlock()
		return // answered already, or owed by a process that is gone
	}
	p.forgetLocked(call)
	p.mu.Unlock()
	rewritten, err := withMember(note.Params, "requestId", rawID(call.id))
	if err != nil {
		return
	}
	p.writeProcess(call.inc, &jsonrpc.Request{Method: methodCancelled, Params: rewritten})
}

// notify passes a session's other notifications to a live process; while none is live
// they are dropped, since they concern a process that is gone.
func (p *sharedProcess) notify(c *sharedConn, note *jsonrpc.Request) {
	p.mu.Lock()
	inc := p.live
	p.mu.Unlock()
	if inc == nil {
		c.log.V(1).Info("Dropped a notification while the shared MCP server is down", "method", note.Method)
		return
	}
	p.writeProcess(inc, &jsonrpc.Request{Method: note.Method, Params: note.Params})
}

// release forgets everything a closed connection held: its calls are dropped (and
// cancelled in the process) and its subscriptions released (the last one for a URI is
// unsubscribed in the process).
func (p *sharedProcess) release(c *sharedConn) {
	p.subsOrder.Lock()
	defer p.subsOrder.Unlock()
	p.mu.Lock()
	delete(p.conns, c)
	inc := p.live
	var out []*jsonrpc.Request
	for _, call := range c.calls {
		p.forgetLocked(call)
		if call.inc == inc {
			if note, err := newNotification(methodCancelled, &mcp.CancelledParams{RequestID: call.id.Raw(), Reason: sessionEndedReason}); err == nil {
				out = append(out, note)
			}
		}
	}
	for uri := range c.subs {
		if p.releaseLocked(c, uri) && inc != nil {
			if req, err := p.ownCallLocked(inc, methodUnsubscribe, &mcp.UnsubscribeParams{URI: uri}, uri); err == nil {
				out = append(out, req)
			}
		}
	}
	c.logging = false
	p.mu.Unlock()
	for _, msg := range out {
		if !p.writeProcess(inc, msg) {
			return
		}
	}
}

// sharedConn is one session's connection to the shared process.
type sharedConn struct {
	p   *sharedProcess
	seq uint64
	log logr.Logger

	inbound   chan jsonrpc.Message // messages for the session, at most sharedQueueSize
	dropped   atomic.Int64         // messages dropped since the session last kept up
	closed    chan struct{}        // Close was called
	ended     chan struct{}        // the sharedProcess closed
	closeOnce sync.Once
	endOnce   sync.Once

	// Guarded by sharedProcess.mu.
	calls   map[jsonrpc.ID]*sharedCall // calls in flight, by the session's ID
	subs    map[string]struct{}        // resource URIs it subscribed to
	logging bool                       // it set a logging level
}

var _ mcp.Connection = (*sharedConn)(nil)

// Read returns the next message for the session. Once the connection is closed it fails
// with mcp.ErrConnectionClosed; once the sharedProcess closed, it returns what was queued
// and then io.EOF.
func (c *sharedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if c.isClosed() {
		return nil, mcp.ErrConnectionClosed
	}
	select {
	case msg := <-c.inbound:
		return msg, nil
	case <-c.closed:
		return nil, mcp.ErrConnectionClosed
	case <-c.ended:
		select {
		case msg := <-c.inbound:
			return msg, nil
		default:
			return nil, io.EOF
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Write takes a message from the session. A call that cannot reach the process is
// answered on Read with a JSON-RPC error; Write itself fails only once the connection or
// the sharedProcess is closed. A call may wait in Write while no process is initialized
// (see sharedProcess).
func (c *sharedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if c.isClosed() {
		return mcp.ErrConnectionClosed
	}
	select {
	case <-c.ended:
		return io.EOF
	default:
	}
	switch msg := msg.(type) {
	case *jsonrpc.Request:
		if msg.IsCall() {
			c.call(ctx, msg)
		} else {
			c.notify(msg)
		}
		return nil
	case *jsonrpc.Response:
		// The bridge answers every request of the process itself: no session owes one.
		c.log.V(1).Info("Dropped a response from the client: the shared MCP server asked it nothing")
		return nil
	default:
		return fmt.Errorf("unsupported message type %T", msg)
	}
}

func (c *sharedConn) call(ctx context.Context, req *jsonrpc.Request) {
	switch req.Method {
	case methodInitialize:
		c.p.answerInitialize(ctx, c, req)
	case methodDiscover:
		// The process speaks the session the bridge began with initialize; a client that
		// probes for the stateless protocol (SEP-2575) learns to fall back to initialize.
		c.deliver(relay.ErrorResponse(req.ID, mcp.CodeUnsupportedProtocolVersion,
			errors.New("the shared mcp server is used through sessions: send initialize")))
	case methodSubscribe:
		c.p.subscribe(ctx, c, req)
	case methodUnsubscribe:
		c.p.unsubscribe(ctx, c, req)
	case methodSetLevel:
		c.p.forward(ctx, c, req, &sharedCall{params: req.Params})
	default:
		c.p.forward(ctx, c, req, &sharedCall{})
	}
}

func (c *sharedConn) notify(note *jsonrpc.Request) {
	switch note.Method {
	case methodInitialized:
		// The bridge initialized the process itself.
	case methodCancelled:
		c.p.cancel(c, note)
	case methodProgress, methodRootsListChanged:
		// Progress of a request of the process, which the bridge answered itself; roots,
		// which the bridge did not declare.
	default:
		c.p.notify(c, note)
	}
}

// Close ends the session's use of the shared process: its calls are forgotten and its
// subscriptions released. Read fails from now on. It is safe to call more than once.
func (c *sharedConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.p.release(c)
		c.log.V(1).Info("Session left the shared MCP server")
	})
	return nil
}

// SessionID returns "": the session's ID belongs to its client-side transport.
func (c *sharedConn) SessionID() string { return "" }

func (c *sharedConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// end marks the connection ended by the sharedProcess closing.
func (c *sharedConn) end() {
	c.endOnce.Do(func() { close(c.ended) })
}

// deliver queues msg for the session's reader, or drops it if the queue is full: the
// caller may be the process's read loop, which serves every session.
func (c *sharedConn) deliver(msg jsonrpc.Message) {
	if c.isClosed() {
		return
	}
	select {
	case c.inbound <- msg:
		if n := c.dropped.Swap(0); n > 0 {
			c.log.V(1).Info("Session is reading again after messages for it were dropped", "dropped", n)
		}
	default:
		if c.dropped.Add(1) == 1 {
			c.log.V(1).Info("Dropping messages for a session that does not read them", "queued", sharedQueueSize)
		}
	}
}

// subscribedLocked reports whether the session subscribed to uri or to a resource uri
// lies under.
func (c *sharedConn) subscribedLocked(uri string) bool {
	if _, ok := c.subs[uri]; ok {
		return true
	}
	for sub := range c.subs {
		if strings.HasPrefix(uri, sub) && (strings.HasSuffix(sub, "/") || uri[len(sub)] == '/') {
			return true
		}
	}
	return false
}

// emptyResult is the {} that answers a call with nothing to report.
func emptyResult(id jsonrpc.ID) *jsonrpc.Response {
	return &jsonrpc.Response{ID: id, Result: json.RawMessage("{}")}
}

// newNotification returns the notification method with params.
func newNotification(method string, params any) (*jsonrpc.Request, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", method, err)
	}
	return &jsonrpc.Request{Method: method, Params: raw}, nil
}

// rawID is the JSON form of a process-unique ID.
func rawID(id jsonrpc.ID) json.RawMessage {
	n, _ := id.Raw().(int64)
	return json.RawMessage(strconv.FormatInt(n, 10))
}

// progressToken returns the _meta.progressToken of a request's params, or nil.
func progressToken(params json.RawMessage) json.RawMessage {
	if !bytes.Contains(params, []byte(`"progressToken"`)) {
		return nil // most calls: no need to parse arguments of any size
	}
	var p struct {
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	if len(params) == 0 || json.Unmarshal(params, &p) != nil {
		return nil
	}
	if token := p.Meta.ProgressToken; len(token) > 0 && string(token) != "null" {
		return token
	}
	return nil
}

// withMember returns the JSON object obj with its member key set to value, every other
// member unchanged.
func withMember(obj json.RawMessage, key string, value json.RawMessage) (json.RawMessage, error) {
	members := make(map[string]json.RawMessage)
	if len(obj) > 0 && string(obj) != "null" {
		if err := json.Unmarshal(obj, &members); err != nil {
			return nil, err
		}
	}
	members[key] = value
	return json.Marshal(members)
}

// withMeta returns params with _meta's member key set to value.
func withMeta(params json.RawMessage, key string, value json.RawMessage) (json.RawMessage, error) {
	var p struct {
		Meta json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, err
	}
	meta, err := withMember(p.Meta, key, value)
	if err != nil {
		return nil, err
	}
	return withMember(params, "_meta", meta)
}
