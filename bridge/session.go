package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mcp/switchboard/internal/mcphttp"
	"github.com/switchboard-mcp/switchboard/relay"
)

// Reasons a session ends. A client that sent a call the session can no longer answer gets
// a JSON-RPC error carrying the reason; later requests for the session get 404.
var (
	// ErrServerExited means the session's subprocess exited or closed its stdout.
	ErrServerExited = errors.New("mcp server process exited")
	// ErrIdle means the session saw no client request for Options.IdleTimeout.
	ErrIdle = errors.New("session idle timeout")
	// ErrShuttingDown means the bridge is stopping.
	ErrShuttingDown = errors.New("bridge is shutting down")
	// errClientEnded means the client ended the session with DELETE: nobody is left to
	// tell.
	errClientEnded = errors.New("client ended the session")
)

// exitWait bounds how long a session that lost its subprocess's stdout waits for the exit
// status to report.
const exitWait = time.Second

// errorLinger is how long the client side of a session stays open after the session
// ended for a reason the client did not choose, so that its calls learn that reason.
const errorLinger = 250 * time.Millisecond

// session is one client session: a Streamable HTTP transport on the client side, a
// subprocess on the server side, and a relay.Relay moving messages between them.
type session struct {
	b   *Bridge
	id  string // Mcp-Session-Id; a bearer secret, never logged
	seq uint64 // names the session in logs
	log logr.Logger

	proc      *process
	transport *mcp.StreamableServerTransport
	client    mcp.Connection // messages from and to the HTTP client
	server    mcp.Connection // messages from and to the subprocess
	ctx       context.Context
	started   time.Time

	mu          sync.Mutex
	pending     map[jsonrpc.ID]struct{} // client calls the subprocess has not answered
	spans       map[jsonrpc.ID]callSpan // their spans, while tracing is on
	initID      jsonrpc.ID              // the initialize call, once seen
	initialized bool                    // the subprocess answered initialize without error
	protocol    string                  // the protocol version the subprocess chose
	ending      bool
	reason      error
	activity    *mcphttp.Activity   // client requests in flight, for idle reaping
	redelivery  *mcphttp.Redelivery // the subprocess's messages waiting for the client's stream
	done        chan struct{}
}

// startSession connects a fresh Streamable HTTP transport to the session's server side:
// in PerSession mode a subprocess of its own (a spare, or one started now), in Shared
// mode a connection to the shared process. The caller has reserved a session slot and
// gives it back on failure.
func (b *Bridge) startSession(id string, seq uint64) (*session, error) {
	ctx := context.Background()
	s := &session{
		b:         b,
		id:        id,
		seq:       seq,
		log:       b.log.WithValues("session", seq),
		transport: &mcp.StreamableServerTransport{SessionID: id},
		ctx:       ctx,
		started:   time.Now(),
		pending:   make(map[jsonrpc.ID]struct{}),
		done:      make(chan struct{}),
	}
	var err error
	if b.shared != nil {
		s.server, err = b.shared.connect(ctx, seq)
	} else {
		if s.proc, err = b.takeProcess(); err != nil {
			return nil, err
		}
		s.log = s.log.WithValues("pid", s.proc.pid)
		s.server, err = s.proc.connection(b.opts.MaxMessageBytes)
	}
	if err == nil {
		s.client, err = s.transport.Connect(ctx)
	}
	if err != nil {
		if s.server != nil {
			_ = s.server.Close()
		}
		if s.proc != nil {
			_, _ = s.proc.shutdown(0)
		}
		return nil, fmt.Errorf("connecting transports: %w", err)
	}
	s.activity = mcphttp.NewActivity(b.opts.IdleTimeout, func() { s.end(ErrIdle) })
	s.redelivery = mcphttp.NewRedelivery(s.client, s.done, s.log)
	r := relay.New(s.client, s.server, relay.Options{
		Hook:        s.relayHook,
		WriteFailed: s.relayWriteFailed,
		Closed:      s.relayClosed,
	})
	go r.Run(ctx)
	s.log.Info("Session started")
	return s, nil
}

// relayHook is the session's policy on the relay. A client call is remembered, so that it
// can be failed if the subprocess never answers; once the session is ending, a client call
// is answered with the reason and nothing else reaches the subprocess. A response from the
// subprocess settles the call it answers.
func (s *session) relayHook(ctx context.Context, from relay.Side, msg jsonrpc.Message) relay.Verdict {
	if from == relay.Server {
		if resp, ok := msg.(*jsonrpc.Response); ok {
			s.settle(resp)
		}
		return relay.Forward(msg)
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		if !s.track(req) {
			return relay.Answer(errorResponse(req.ID, s.endReason()))
		}
		if s.holdsListen(req) {
			// Never answered: it stays open until the client cancels it or the session
			// ends, which answers it with the reason.
			return relay.Drop()
		}
		if s.isEnding() {
			return relay.Drop()
		}
		forwarded, cs := s.traceCall(ctx, req)
		if cs != nil {
			s.keepSpan(req.ID, cs)
		}
		return relay.Forward(forwarded)
	}
	if s.isEnding() {
		return relay.Drop()
	}
	return relay.Forward(msg)
}

// callSpan is the span of a relayed call and what names it once answered.
type callSpan struct {
	span         trace.Span
	method, tool string
}

// keepSpan remembers the span of a call until its answer settles it.
func (s *session) keepSpan(id jsonrpc.ID, cs *callSpan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		endCallSpan(cs.span, cs.method, "", nil)
		return
	}
	if s.spans == nil {
		s.spans = make(map[jsonrpc.ID]callSpan)
	}
	s.spans[id] = *cs
}

// relayWriteFailed handles a message the relay could not deliver. The client side keeps
// relaying until it closes, so that a call racing with the end of the session is answered
// too; the subprocess side stops once the session is ending.
func (s *session) relayWriteFailed(_ context.Context, to relay.Side, msg jsonrpc.Message, err error) bool {
	if to == relay.Server {
		if s.proc == nil {
			// The shared process's connection refuses writes only once it is closed.
			s.end(fmt.Errorf("%w: %w", ErrShuttingDown, err))
			return false
		}
		// Broken stdin: the subprocess is gone or going. Prefer the exit status as the
		// reason, which relayClosed reports when stdout reaches EOF.
		select {
		case <-s.done:
		case <-time.After(exitWait):
			s.end(fmt.Errorf("%w: writing to its stdin: %w", ErrServerExited, err))
		}
		return false
	}
	if s.isEnding() {
		if resp, ok := msg.(*jsonrpc.Response); ok && resp.Error != nil {
			s.log.V(1).Info("Could not tell the client why its call failed", "reason", err.Error())
		}
		return true
	}
	// The session lives on: a message for a stream the client has not opened yet, or a
	// response whose HTTP request went away.
	s.redelivery.Add(msg)
	return false
}

// relayClosed handles a side the relay can no longer read. The client side closes only
// once the session has ended; the subprocess's stdout failing ends the session.
func (s *session) relayClosed(side relay.Side, err error) {
	if side == relay.Server {
		s.end(s.readFailure(err))
	}
}

// readFailure turns the error that ended the subprocess's stdout into the session's end
// reason.
func (s *session) readFailure(err error) error {
	if errors.Is(err, ErrMessageTooLarge) {
		return err
	}
	if s.proc == nil {
		// The connection to the shared process ends only with the bridge (a process that
		// dies is replaced), or when the session closed it.
		return ErrShuttingDown
	}
	if errors.Is(err, io.EOF) {
		select {
		case <-s.proc.exited:
			return fmt.Errorf("%w: %w", ErrServerExited, s.proc.exitError())
		case <-s.done:
			return s.endReason()
		case <-time.After(exitWait):
			return fmt.Errorf("%w: it closed its stdout", ErrServerExited)
		}
	}
	return fmt.Errorf("reading from the mcp server: %w", err)
}

// track records a client call; it reports false once the session is ending.
func (s *session) track(req *jsonrpc.Request) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ending {
		return false
	}
	s.pending[req.ID] = struct{}{}
	if req.Method == "initialize" {
		s.initID = req.ID
	}
	return true
}

// settle forgets the call resp answers.
func (s *session) settle(resp *jsonrpc.Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, resp.ID)
	if cs, ok := s.spans[resp.ID]; ok {
		delete(s.spans, resp.ID)
		endCallSpan(cs.span, cs.method, cs.tool, resp)
	}
	if s.initID.IsValid() && resp.ID == s.initID && resp.Error == nil {
		s.initialized = true
		var res struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		if json.Unmarshal(resp.Result, &res) == nil {
			s.protocol = res.ProtocolVersion
		}
	}
}

// listenProtocol is the first protocol version with subscriptions/listen (SEP-2575).
const listenProtocol = "2026-07-28"

// holdsListen reports whether the bridge itself holds req open as the stream for what the
// subprocess sends outside any request: a subscriptions/listen call in a session older
// than the protocol that has the method. go-sdk's server transport sends such messages
// on a listen stream when one is open, else on the standalone GET stream; a client that
// cannot open that GET (the gateway's raw go-sdk connection) opens a listen stream
// instead, and a subprocess of that protocol would only answer it with an error.
func (s *session) holdsListen(req *jsonrpc.Request) bool {
	if req.Method != methodListen {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.initialized && s.protocol < listenProtocol
}

// isInitialized reports whether the subprocess answered initialize successfully.
func (s *session) isInitialized() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.initialized
}

func (s *session) isEnding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ending
}

func (s *session) endReason() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// errorResponse is the JSON-RPC error that answers a client call the session cannot.
func errorResponse(id jsonrpc.ID, reason error) *jsonrpc.Response {
	return relay.ErrorResponse(id, jsonrpc.CodeInternalError, reason)
}

// replyError answers a client call with a JSON-RPC error carrying reason.
func (s *session) replyError(id jsonrpc.ID, reason error) {
	if err := s.client.Write(s.ctx, errorResponse(id, reason)); err != nil {
		s.log.V(1).Info("Could not tell the client why its call failed", "reason", err.Error())
	}
}

// beginRequest marks a client request in flight, which holds off idle reaping. It reports
// false once the session is ending.
func (s *session) beginRequest() bool { return s.activity.Begin() }

// endRequest marks a client request done; the last one restarts the idle timer.
func (s *session) endRequest() { s.activity.End() }

// end ends the session for reason; only the first call counts. It fails the calls the
// subprocess still owes, closes the client side at once, and stops the subprocess in the
// background.
func (s *session) end(reason error) {
	s.mu.Lock()
	if s.ending {
		s.mu.Unlock()
		return
	}
	s.ending = true
	s.reason = reason
	s.activity.Stop()
	pending := s.pending
	s.pending = nil
	spans := s.spans
	s.spans = nil
	s.mu.Unlock()
	for _, cs := range spans {
		endCallSpan(cs.span, cs.method, "", nil)
	}
	s.finishEnd(pending)
}

func (s *session) finishEnd(pending map[jsonrpc.ID]struct{}) {
	reason := s.endReason()
	close(s.done)
	s.b.forget(s, reason)
	// New requests for the session get 404 from now on. Closing the client side releases
	// the ones still hanging.
	if errors.Is(reason, errClientEnded) {
		_ = s.client.Close()
	} else {
		for id := range pending {
			s.replyError(id, reason)
		}
		// Not at once: calls already on their way in are still answered with the reason
		// (see relayHook), and a client that sees its standalone SSE stream end may give
		// up on the session before it has read those errors, and report a vaguer one.
		time.AfterFunc(errorLinger, func() { _ = s.client.Close() })
	}
	go s.teardown(reason)
}

// teardown stops the subprocess (stdin closed, grace period, SIGTERM then SIGKILL to the
// group), waits until it is reaped and its output drained, and gives the session slot back.
func (s *session) teardown(reason error) {
	defer s.b.sessionDone()
	_ = s.server.Close() // closes stdin (PerSession): the MCP stdio shutdown signal
	exit := "shared process"
	if s.proc != nil {
		var err error
		if exit, err = s.proc.shutdown(s.b.opts.GracePeriod); err != nil {
			s.log.Error(err, "Could not stop the MCP server process")
		}
	}
	s.log.Info("Session ended", "reason", reason.Error(), "exit", exit,
		"duration", time.Since(s.started).Round(time.Millisecond).String())
}
