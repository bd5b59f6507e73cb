package bridge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/mcphttp"
	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
	"github.com/switchboard-mcp/switchboard/internal/sessionless"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// maxStatelessInFlight bounds the sessionless requests the bridge serves at once; one
// more is refused with 503 and Retry-After. subscriptions/listen streams count too, and
// at most maxStatelessListens of them, so that open streams cannot take every place.
const (
	maxStatelessInFlight = 256
	maxStatelessListens  = 64
)

// statelessStartTimeout bounds how long the stateless process has to start and answer
// server/discover.
const statelessStartTimeout = 30 * time.Second

// statelessRestartDelay is how long a failed start of the stateless process is the
// answer to every sessionless request before the bridge tries again, so that a command
// that cannot start is not restarted by every request of a flood.
const statelessRestartDelay = time.Second

// errSessionsOnly means the server command speaks only the session era: its process
// answered server/discover with an error, and go-sdk's client fell back to initialize.
var errSessionsOnly = errors.New("the MCP server speaks only the session era (it does not answer server/discover)")

// statelessFront serves the sessionless era's requests (MCP 2026-07-28 and later) in both
// session modes, from one process of their own: sessionless requests keep no state
// between them, so one process, spoken to by a go-sdk client session, serves them all,
// many at once. go-sdk's stateless handler is the front door (header checks,
// server/discover, subscriptions/listen); its server's middleware relays each request
// through the client session.
//
// Whether the command speaks the era at all is learnt once, from the first process: one
// that answers server/discover with an error speaks only sessions, and every sessionless
// request is then refused with UnsupportedProtocolVersion (-32022), so that clients fall
// back to initialize and get a session as before. Bridging the eras is the gateway's
// work, where clients come in.
type statelessFront struct {
	b        *Bridge
	log      logr.Logger
	handler  http.Handler
	inflight chan struct{} // one token per request being served
	listens  chan struct{} // one token per subscriptions/listen stream open
	progress sessionless.Progress

	mu           sync.Mutex
	current      *statelessProcess // nil before the first request and after it ended
	starting     chan struct{}     // closed when the start in progress has finished
	sessionsOnly bool
	lastStart    time.Time
	lastErr      error // why the last start failed
	closed       bool

	// stopping counts the processes being stopped after a failed start. The request
	// that started one is answered at once, not after the process's grace period: a
	// server that speaks only sessions must not hold up the client's fall back to a
	// session (about five seconds with npm server-everything). close waits for them.
	stopping sync.WaitGroup
}

// statelessProcess is one incarnation of the stateless process.
type statelessProcess struct {
	proc         *process
	cs           *mcp.ClientSession
	front        *mcp.Server
	paramHeaders sessionless.ParamHeaders
	// announcing is front once it serves: the process's list changes are announced to
	// the listeners of its front (nil while the client session connects).
	announcing atomic.Pointer[mcp.Server]
}

// statelessRequestKey carries the statelessProcess serving a request to go-sdk's
// handler, and from it to the front server's middleware.
type statelessRequestKey struct{}

func newStatelessFront(b *Bridge) *statelessFront {
	f := &statelessFront{b: b, log: b.log.WithName("stateless"), inflight: make(chan struct{}, maxStatelessInFlight), listens: make(chan struct{}, maxStatelessListens)}
	f.handler = sessionless.NewHandler(func(r *http.Request) *mcp.Server {
		if sp, ok := r.Context().Value(statelessRequestKey{}).(*statelessProcess); ok {
			return sp.front
		}
		return nil
	}, b.opts.MaxMessageBytes)
	return f
}

// serve answers one sessionless request, whose body the front door has read and checked.
func (f *statelessFront) serve(w http.ResponseWriter, r *http.Request, body *mcpmsg.Body) {
	var id jsonrpc.ID
	if len(body.Messages) == 1 {
		id = body.Messages[0].ID
	}
	if body.Batch {
		mcphttp.WriteError(w, http.StatusBadRequest, id, jsonrpc.CodeInvalidRequest,
			"JSON-RPC batches are not part of MCP "+sessionless.Version+"; send one message per request")
		return
	}
	select {
	case f.inflight <- struct{}{}:
		defer func() { <-f.inflight }()
	default:
		w.Header().Set("Retry-After", "1")
		mcphttp.WriteError(w, http.StatusServiceUnavailable, id, jsonrpc.CodeInternalError,
			fmt.Sprintf("the bridge is serving %d sessionless requests already; retry", maxStatelessInFlight))
		return
	}
	if isListenCall(body) {
		select {
		case f.listens <- struct{}{}:
			defer func() { <-f.listens }()
		default:
			w.Header().Set("Retry-After", "1")
			mcphttp.WriteError(w, http.StatusServiceUnavailable, id, jsonrpc.CodeInternalError,
				fmt.Sprintf("the bridge holds %d subscriptions/listen streams already; retry", maxStatelessListens))
			return
		}
	}
	sp, err := f.process(r.Context())
	switch {
	case errors.Is(err, errSessionsOnly):
		mcphttp.RefuseSessionlessEra(w, id, r.Header.Get(sessionless.ProtocolVersionHeader))
		return
	case errors.Is(err, ErrShuttingDown):
		mcphttp.WriteError(w, http.StatusServiceUnavailable, id, jsonrpc.CodeInternalError, err.Error())
		return
	case err != nil:
		w.Header().Set("Retry-After", "1")
		mcphttp.WriteError(w, http.StatusServiceUnavailable, id, jsonrpc.CodeInternalError, err.Error())
		return
	}
	f.handler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), statelessRequestKey{}, sp)))
}

// process returns the live stateless process, starting one when there is none.
func (f *statelessFront) process(ctx context.Context) (*statelessProcess, error) {
	for {
		f.mu.Lock()
		switch {
		case f.closed:
			f.mu.Unlock()
			return nil, ErrShuttingDown
		case f.sessionsOnly:
			f.mu.Unlock()
			return nil, errSessionsOnly
		case f.current != nil:
			sp := f.current
			f.mu.Unlock()
			return sp, nil
		case f.starting != nil:
			starting := f.starting
			f.mu.Unlock()
			select {
			case <-starting:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case f.lastErr != nil && time.Since(f.lastStart) < statelessRestartDelay:
			err := f.lastErr
			f.mu.Unlock()
			return nil, err
		}
		starting := make(chan struct{})
		f.starting, f.lastStart = starting, time.Now()
		f.mu.Unlock()

		sp, err := f.start()

		f.mu.Lock()
		f.starting = nil
		close(starting)
		switch {
		case errors.Is(err, errSessionsOnly):
			f.sessionsOnly = true
			f.log.Info("The MCP server speaks only the session era: sessionless requests are refused, and their clients fall back to sessions")
		case err != nil:
			f.lastErr = err
			f.log.Error(err, "Could not start the process for sessionless requests")
		case f.closed:
			err = ErrShuttingDown
		default:
			f.lastErr = nil
			f.current = sp
		}
		f.mu.Unlock()
		if err != nil {
			if sp != nil {
				f.stopping.Go(func() { f.stop(sp, err) })
			}
			return nil, err
		}
		go f.watch(sp)
		return sp, nil
	}
}

// start starts a process and asks it server/discover through a go-sdk client session.
// A process that speaks only sessions is returned with errSessionsOnly, for stopping.
func (f *statelessFront) start() (*statelessProcess, error) {
	proc, err := f.b.startProcess()
	if err != nil {
		return nil, fmt.Errorf("starting the MCP server process: %w", err)
	}
	sp := &statelessProcess{proc: proc}
	conn, err := proc.connection(f.b.opts.MaxMessageBytes)
	if err != nil {
		return sp, fmt.Errorf("connecting to the MCP server process: %w", err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-bridge", Version: "v1alpha1"}, &mcp.ClientOptions{
		// input_required results are the client's to answer: they pass through.
		MultiRoundTrip:              &mcp.MultiRoundTripOptions{Disabled: true},
		ProgressNotificationHandler: func(ctx context.Context, n *mcp.ProgressNotificationClientRequest) { _ = f.progress.Relay(ctx, n) },
		// The process's list changes reach the clients listening on the front
		// (subscriptions/listen); go-sdk opens the process's own listen stream for them.
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { sp.announce("tools") },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { sp.announce("prompts") },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { sp.announce("resources") },
	})
	ctx, cancel := context.WithTimeout(context.Background(), statelessStartTimeout)
	defer cancel()
	sp.cs, err = client.Connect(ctx, connectedTransport{conn}, &mcp.ClientSessionOptions{ProtocolVersion: sessionless.Version})
	if err != nil {
		return sp, fmt.Errorf("the MCP server process did not answer server/discover or initialize: %w", err)
	}
	if !sessionless.Speaks(sp.cs) {
		return sp, errSessionsOnly
	}
	sp.front = sessionless.NewFront(sp.cs, f.b.opts.Command[0], f.relay)
	sp.announcing.Store(sp.front)
	f.log.Info("Serving sessionless requests", "pid", proc.pid)
	return sp, nil
}

// watch waits for the process's client session to end (the process exited, or wrote
// what is not JSON-RPC) and forgets the process, so that the next request starts another.
func (f *statelessFront) watch(sp *statelessProcess) {
	err := sp.cs.Wait()
	f.mu.Lock()
	current := f.current == sp
	if current {
		f.current = nil
	}
	f.mu.Unlock()
	if !current {
		return // close took it away, and stops it
	}
	if err == nil {
		err = errors.New("its connection closed")
	}
	f.stop(sp, err)
}

// stop ends a process: its client session, then the process itself (see process.stop).
func (f *statelessFront) stop(sp *statelessProcess, why error) {
	if sp.cs != nil {
		_ = sp.cs.Close()
	}
	exit, err := sp.proc.shutdown(f.b.opts.GracePeriod)
	if err != nil {
		f.log.Error(err, "Could not stop the process for sessionless requests", "pid", sp.proc.pid)
	}
	f.log.Info("The process for sessionless requests ended", "pid", sp.proc.pid, "reason", why.Error(), "exit", exit)
}

// close stops the process and refuses every later request.
func (f *statelessFront) close() {
	f.mu.Lock()
	f.closed = true
	sp := f.current
	f.current = nil
	f.mu.Unlock()
	if sp != nil {
		f.stop(sp, ErrShuttingDown)
	}
	f.stopping.Wait()
}

// relay is the front server's receiving middleware: each request a server answers is
// relayed through the process's client session, with the client's _meta and a progress
// token of the bridge's own.
func (f *statelessFront) relay(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		sp, ok := ctx.Value(statelessRequestKey{}).(*statelessProcess)
		if !ok || !sessionless.Relayed[method] {
			return next(ctx, method, req)
		}
		ctx, span := traceStateless(ctx, method, req)
		rewrite, done := f.progress.Rewriter(ctx, req, true)
		defer done()
		meta := func(in map[string]any) map[string]any { return tracing.InjectMeta(ctx, rewrite(in)) }
		var res mcp.Result
		var err error
		if method == "tools/call" {
			res, err = sp.cs.CallTool(ctx, sessionless.ToolCall(req, meta))
		} else {
			res, err = sessionless.Call(ctx, sp.cs, method, req, meta)
		}
		if span != nil {
			endStatelessSpan(span, method, req, res, err)
		}
		if err != nil {
			return nil, processError(err)
		}
		if list, ok := res.(*mcp.ListToolsResult); ok {
			sp.paramHeaders.Learn(sp.front, list.Tools)
		}
		return res, nil
	}
}

// processError is the error a client gets for a request the process failed: the
// process's own JSON-RPC error as it sent it, or the bridge's.
func processError(err error) error {
	if wire, ok := errors.AsType[*jsonrpc.Error](err); ok {
		return wire
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the MCP server process: " + err.Error()}
}

// connectedTransport is an mcp.Transport over a connection that is already open.
type connectedTransport struct{ conn mcp.Connection }

func (t connectedTransport) Connect(context.Context) (mcp.Connection, error) { return t.conn, nil }

// announce tells the front's listeners that the process's list of kind changed.
func (sp *statelessProcess) announce(kind string) {
	if front := sp.announcing.Load(); front != nil {
		sessionless.AnnounceListChanged(front, kind)
	}
}
