package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
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

// sharedWriteTimeout bounds one write to the shared process's stdin. A process that stops
// reading its stdin (while it keeps its stdout open) would otherwise hold every session's
// calls for good; past the bound it is treated as broken, stopped and restarted. A
// variable so that tests can shorten it.
var sharedWriteTimeout = 30 * time.Second

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
	methodToolsChanged     = "notifications/tools/list_changed"
	methodPromptsChanged   = "notifications/prompts/list_changed"
	methodResourcesChanged = "notifications/resources/list_changed"
	methodPing             = "ping"
	methodListen           = "subscriptions/listen"
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
// subscriptions back. Sessions outlive a process: the calls it
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
//   - every other call has its params strictly decoded (internal/mcpmsg: a _meta or
//     progressToken spelled in another case is refused with CodeInvalidParams, an escaped
//     spelling is read as what it spells), and goes to the process under a random ID of
//     its own, with a random _meta.progressToken of its own if it carries one; the
//     response, and notifications/progress for that token, go back to the asking session
//     only, under its own ID and token. Random (96 bits from crypto/rand), so that no
//     session can name the ID or token of another session's call;
//   - notifications/cancelled is passed on, rebuilt from the requestId and reason it
//     carries, under the process ID of the call it names, if the session owns that call;
//     the call is forgotten then, so a late response is dropped;
//   - resources/subscribe and resources/unsubscribe are counted per URI: a subscribe is
//     passed on while the process holds no subscription for the URI, the last unsubscribe
//     is passed on, and anything else is answered locally with {};
//   - logging/setLevel is answered locally, {} for a valid level: since no log message
//     is passed on (below), the process's level would only be one session's way of
//     changing what the process does for all;
//   - a response is dropped, since no request of the process reaches a client, and so is
//     every notification but notifications/cancelled: the standard ones a client sends
//     concern requests of the process (progress) or capabilities (roots) the bridge did
//     not pass on, and any other would reach a process every session shares.
//
// A session therefore names only what it was given: its own request IDs and progress
// tokens, which the bridge maps to the process's, never a process-side one.
//
// Routing, from the process:
//   - notifications/progress goes to the session whose call carries the token, and
//     notifications/cancelled is dropped (it cancels a request of the process, which the
//     bridge has answered already);
//   - notifications/resources/updated goes to the sessions subscribed to that URI, or to a
//     URI it lies under ("file:///a/" for "file:///a/b"), since the update may name a
//     sub-resource;
//   - notifications/tools/list_changed, prompts/list_changed and resources/list_changed
//     go to every session: they announce a change of the state all sessions share;
//   - every other notification, notifications/message (logging) among them, is dropped.
//     No session may receive what was produced for another, and over stdio nothing ties a
//     notification to the request it was produced for: a log message written while
//     serving one session's call looks like one written for another's, or for nobody's.
//     The cost: no session gets the server's log messages (the conformance scenario
//     tools-call-with-logging fails in Shared mode);
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
	// startup is told of every process start (see Options.StartupWindow); nil watches
	// nothing.
	startup *startupWatch

	mu         sync.Mutex
	conns      map[*sharedConn]struct{}
	current    *incarnation             // the running process, initialized or not
	live       *incarnation             // current, once initialized: calls go to it
	next       *startAttempt            // what calls wait for while no process is live
	initResult json.RawMessage          // the latest process's InitializeResult
	subs       map[string]*subscription // live resource subscriptions by URI
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
	broken   chan struct{} // closed once a write to stdin failed (brokenOnce)
	writeMu  sync.Mutex    // one write at a time, so each gets sharedWriteTimeout of its own

	brokenOnce sync.Once

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
			case <-inc.broken:
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
		p.startup.observe(nil, err)
		return nil, nil, err
	}
	inc := &incarnation{
		proc:     proc,
		log:      p.log.WithValues("pid", proc.pid),
		readDone: make(chan struct{}),
		broken:   make(chan struct{}),
		pending:  make(map[jsonrpc.ID]*sharedCall),
		progress: make(map[jsonrpc.ID]*sharedCall),
	}
	if inc.conn, err = proc.connection(p.opts.MaxMessageBytes); err != nil {
		_ = proc.stop(0)
		proc.closeOutputs()
		return nil, nil, fmt.Errorf("connecting to the shared mcp server: %w", err)
	}
	proc.logStderrTo(inc.log)
	p.startup.observe(proc, nil)
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
		return nil, p.endReason(inc)
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
// subscriptions sessions hold. It reports false once close has been called.
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
	p.next.settle(nil)
	p.mu.Unlock()
	for _, req := range restore {
		p.writeProcess(inc, req)
	}
	if len(restore) > 0 {
		inc.log.Info("Restored subscriptions on the shared MCP server", "requests", len(restore))
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

// endReason says why inc ended: its stdin broke (see writeProcess), or its stdout
// stopped, then preferring the exit status.
func (p *sharedProcess) endReason(inc *incarnation) error {
	select {
	case <-p.done:
		return ErrShuttingDown
	default:
	}
	select {
	case <-inc.readDone:
	default:
		// Its stdin broke while its stdout stayed open (see writeProcess).
		p.mu.Lock()
		writeErr := inc.writeErr
		p.mu.Unlock()
		return fmt.Errorf("shared mcp server process stopped: writing to its stdin: %w", writeErr)
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
