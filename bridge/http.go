package bridge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionIDHeader carries the session ID of Streamable HTTP.
const sessionIDHeader = "Mcp-Session-Id"

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
// /healthz and readiness at /readyz (which fails once the bridge is shutting down).
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
	return mux
}

// serveMCP routes a Streamable HTTP request to its session. The checks here are the ones
// go-sdk's StreamableHTTPHandler makes before it hands a request to a session's transport;
// the transport does the rest.
func (b *Bridge) serveMCP(w http.ResponseWriter, r *http.Request, bodyTimeout time.Duration) {
	if !hostAllowed(r) {
		http.Error(w, "Forbidden: invalid Host header", http.StatusForbidden)
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
	if mediaType(r.Header.Get("Content-Type")) != "application/json" {
		http.Error(w, "Content-Type must be 'application/json'", http.StatusUnsupportedMediaType)
		return
	}
	if jsonOK, streamOK := accepts(r.Header.Values("Accept")); !jsonOK || !streamOK {
		http.Error(w, "Accept must contain both 'application/json' and 'text/event-stream'", http.StatusBadRequest)
		return
	}
	body, ok := b.readBody(w, r, bodyTimeout)
	if !ok {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	if id := r.Header.Get(sessionIDHeader); id != "" {
		s, why := b.lookup(id)
		if s == nil || !s.beginRequest() {
			http.Error(w, notFound(why), http.StatusNotFound)
			return
		}
		defer s.endRequest()
		s.transport.ServeHTTP(w, r)
		return
	}

	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		http.Error(w, "malformed JSON-RPC message: a session starts with one initialize request", http.StatusBadRequest)
		return
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != "initialize" {
		refuseSessionless(w, msg)
		return
	}
	s, err := b.newSession()
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
		writeError(w, status, req.ID, jsonrpc.CodeInternalError, err.Error())
		return
	}
	if !s.beginRequest() {
		http.Error(w, notFound(""), http.StatusNotFound)
		return
	}
	s.transport.ServeHTTP(w, r)
	s.endRequest()
	if !s.isInitialized() {
		// The client went away, or the subprocess refused initialize: nobody can use it.
		s.end(errors.New("session was not initialized"))
	}
}

// readBody reads a POST body of at most MaxMessageBytes within timeout, or answers 413
// (too large), 408 (too slow; the connection is closed) or 400 and returns false. Once
// the body is in, the connection has no read deadline: the response may be a long SSE
// stream, during which net/http keeps reading to notice a client that goes away.
func (b *Bridge) readBody(w http.ResponseWriter, r *http.Request, timeout time.Duration) ([]byte, bool) {
	rc := http.NewResponseController(w)
	// Not every ResponseWriter supports deadlines (a test recorder, a wrapping
	// middleware); the body is then read without one.
	_ = rc.SetReadDeadline(time.Now().Add(timeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(b.opts.MaxMessageBytes)))
	switch {
	case err == nil:
		_ = rc.SetReadDeadline(time.Time{})
		return body, true
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The deadline stays passed, so that net/http does not wait for the rest of the
		// body before it closes the connection.
		w.Header().Set("Connection", "close")
		http.Error(w, "request body not received in time", http.StatusRequestTimeout)
	default:
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		} else {
			http.Error(w, "failed to read body", http.StatusBadRequest)
		}
	}
	return nil, false
}

// refuseSessionless answers a message that carries no session ID and is not an
// initialize request. A SEP-2575 server/discover probe learns that this server only
// speaks the session-based protocol, so a go-sdk client falls back to initialize.
func refuseSessionless(w http.ResponseWriter, msg jsonrpc.Message) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		http.Error(w, "Bad Request: missing Mcp-Session-Id header: a session starts with initialize", http.StatusBadRequest)
		return
	}
	code := int64(jsonrpc.CodeInvalidRequest)
	if req.Method == "server/discover" {
		code = mcp.CodeUnsupportedProtocolVersion
	}
	writeError(w, http.StatusBadRequest, req.ID, code,
		"this server needs a session: send initialize first (stateless requests are not supported)")
}

// serveGET attaches a standalone SSE stream to a session.
func (b *Bridge) serveGET(w http.ResponseWriter, r *http.Request) {
	if _, streamOK := accepts(r.Header.Values("Accept")); !streamOK {
		http.Error(w, "Accept must contain 'text/event-stream' for GET requests", http.StatusBadRequest)
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

// notFound is the plain-text body of a 404 for a session. It must not be a JSON-RPC
// error: go-sdk clients read only a plain 404 as "session gone".
func notFound(why string) string {
	if why == "" {
		why = "session not found"
	}
	return "Not Found: " + why
}

// writeError writes a JSON-RPC error response with the given HTTP status.
func writeError(w http.ResponseWriter, status int, id jsonrpc.ID, code int64, message string) {
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: code, Message: message}})
	if err != nil {
		http.Error(w, message, status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// accepts reports whether Accept header values admit JSON and an event stream.
func accepts(values []string) (jsonOK, streamOK bool) {
	for _, value := range values {
		for _, item := range strings.Split(value, ",") {
			base, _, _ := strings.Cut(item, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK, streamOK
}

// mediaType returns the media type of a Content-Type value without parameters.
func mediaType(value string) string {
	mt, _, err := mime.ParseMediaType(value)
	if err != nil {
		return ""
	}
	return mt
}

// hostAllowed is DNS rebinding protection, as go-sdk applies it: a request that arrived
// on a loopback address must name a loopback host.
func hostAllowed(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || local == nil || !isLoopback(local.String()) {
		return true
	}
	return isLoopback(r.Host)
}

// isLoopback reports whether a host or host:port names the loopback interface.
func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.Trim(hostport, "[]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// requestSession returns the session a GET or DELETE names in its Mcp-Session-Id header,
// or answers 400 (no header) or 404 (no such session) and returns nil.
func (b *Bridge) requestSession(w http.ResponseWriter, r *http.Request) *session {
	id := r.Header.Get(sessionIDHeader)
	if id == "" {
		http.Error(w, "Bad Request: "+r.Method+" requires an Mcp-Session-Id header", http.StatusBadRequest)
		return nil
	}
	s, why := b.lookup(id)
	if s == nil {
		http.Error(w, notFound(why), http.StatusNotFound)
		return nil
	}
	return s
}
