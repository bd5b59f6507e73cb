package bridge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/switchboard-mcp/switchboard/internal/mcphttp"
	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
	"github.com/switchboard-mcp/switchboard/internal/sessionless"
)

// maxHeaderBytes bounds a request's header block; a client that sends more gets 431. An
// MCP client sends a handful of short headers.
const maxHeaderBytes = 64 << 10

// How long a client may take to send a request. A slow client holds a connection, and a
// slow body would hold the session it is addressed to, so the request line and headers,
// and then a POST body, must each arrive within a bound. There is deliberately no
// http.Server WriteTimeout or ReadTimeout: a response may be an SSE stream that lasts as
// long as its session, and net/http's ReadTimeout would also end a running stream when
// it expires. Variables so that tests can shorten them.
var (
	// readHeaderTimeout bounds the request line and headers (slowloris).
	readHeaderTimeout = 10 * time.Second
	// bodyReadTimeout bounds reading a POST body, once the headers are in.
	bodyReadTimeout = 30 * time.Second
	// idleConnTimeout closes a keep-alive connection that carries no request.
	idleConnTimeout = 2 * time.Minute
)

// newHTTPServer returns the HTTP server Serve runs: Handler behind the limits above, with
// request contexts that outlive ctx so that a shutdown can finish in-flight requests.
func (b *Bridge) newHTTPServer(ctx context.Context) *http.Server {
	return &http.Server{
		Handler:           b.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleConnTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
}

// Handler returns the bridge's HTTP handler: the MCP endpoint at /mcp, liveness at
// /healthz, readiness at /readyz (which fails once the bridge is shutting down) and
// Prometheus metrics at /metrics.
func (b *Bridge) Handler() http.Handler {
	mux := http.NewServeMux()
	bodyTimeout := bodyReadTimeout
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) { b.serveMCP(w, r, bodyTimeout) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !b.ready() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /metrics", b.metrics.handler())
	return mux
}

// serveMCP routes a Streamable HTTP request to its session. The checks here are the ones
// go-sdk's StreamableHTTPHandler makes before it hands a request to a session's transport;
// the transport does the rest.
func (b *Bridge) serveMCP(w http.ResponseWriter, r *http.Request, bodyTimeout time.Duration) {
	if !mcphttp.HostAllowed(w, r) {
		return
	}
	switch r.Method {
	case http.MethodPost:
		b.servePOST(w, r, bodyTimeout)
	case http.MethodGet:
		b.serveGET(w, r)
	case http.MethodDelete:
		b.serveDELETE(w, r)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	}
}

// servePOST relays a client message to its session, or starts a session for an
// initialize request that carries no session ID. The body is read in full, within
// bodyTimeout, before a session is looked up or started: a client that trickles its body
// holds neither.
func (b *Bridge) servePOST(w http.ResponseWriter, r *http.Request, bodyTimeout time.Duration) {
	if !mcphttp.CheckPOST(w, r) {
		return
	}
	body, msgs, ok := mcphttp.ReadMessages(w, r, int64(b.opts.MaxMessageBytes), bodyTimeout)
	if !ok {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	if id := r.Header.Get(mcphttp.SessionIDHeader); id != "" {
		s, why := b.lookup(id)
		if s != nil && isListenCall(msgs) {
			// A stream for what the server sends outside requests, like a standalone GET:
			// it lasts as long as the session, so it does not count as a request in flight.
			s.transport.ServeHTTP(w, r)
			return
		}
		if s == nil || !s.beginRequest() {
			mcphttp.NotFound(w, why)
			return
		}
		defer b.requestEnded(s)
		s.transport.ServeHTTP(w, r)
		return
	}

	if sessionless.IsRequest(r, msgs) {
		b.stateless.serve(w, r, msgs)
		return
	}
	req := mcphttp.InitializeRequest(w, body)
	if req == nil {
		return
	}
	s, err := b.newSession(r.Context())
	if err != nil {
		status := http.StatusServiceUnavailable
		switch {
		case errors.Is(err, ErrTooManySessions):
			w.Header().Set("Retry-After", "1")
			b.log.Info("Refused a new session", "reason", err.Error())
		case errors.Is(err, ErrShuttingDown):
		default:
			status = http.StatusInternalServerError
			b.log.Error(err, "Could not start a session")
		}
		mcphttp.WriteError(w, status, req.ID, jsonrpc.CodeInternalError, err.Error())
		return
	}
	if !s.beginRequest() {
		// The session ended before its initialize reached it: its process exited at once
		// (a missing module, a bad flag). Say why, as a JSON-RPC answer any client reads.
		mcphttp.WriteError(w, http.StatusOK, req.ID, jsonrpc.CodeInternalError, s.endReason().Error())
		return
	}
	s.transport.ServeHTTP(w, r)
	b.requestEnded(s)
	if !s.isInitialized() {
		// The client went away, or the subprocess refused initialize: nobody can use it.
		s.end(errors.New("session was not initialized"))
	}
}

// isListenCall reports whether a POST body is one subscriptions/listen call.
func isListenCall(msgs *mcpmsg.Body) bool {
	return !msgs.Batch && msgs.Messages[0].IsCall() && msgs.Messages[0].Method == methodListen
}

// serveGET attaches a standalone SSE stream to a session.
func (b *Bridge) serveGET(w http.ResponseWriter, r *http.Request) {
	if !mcphttp.CheckGET(w, r) {
		return
	}
	if s := b.requestSession(w, r); s != nil {
		s.transport.ServeHTTP(w, r)
	}
}

// serveDELETE ends a session at the client's request.
func (b *Bridge) serveDELETE(w http.ResponseWriter, r *http.Request) {
	s := b.requestSession(w, r)
	if s == nil {
		return
	}
	s.end(errClientEnded)
	w.WriteHeader(http.StatusNoContent)
}

// requestSession returns the session a GET or DELETE names in its Mcp-Session-Id header,
// or answers 400 (no header) or 404 (no such session) and returns nil.
func (b *Bridge) requestSession(w http.ResponseWriter, r *http.Request) *session {
	id := r.Header.Get(mcphttp.SessionIDHeader)
	if id == "" {
		http.Error(w, "Bad Request: "+r.Method+" requires an Mcp-Session-Id header", http.StatusBadRequest)
		return nil
	}
	s, why := b.lookup(id)
	if s == nil {
		mcphttp.NotFound(w, why)
		return nil
	}
	return s
}
