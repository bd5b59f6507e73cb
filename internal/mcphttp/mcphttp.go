package mcphttp

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
)

// SessionIDHeader carries the session ID of Streamable HTTP.
const SessionIDHeader = "Mcp-Session-Id"

// CheckPOST answers a POST whose Content-Type is not JSON (415) or whose Accept does not
// admit both JSON and an event stream (400), and reports whether it may go on.
func CheckPOST(w http.ResponseWriter, r *http.Request) bool {
	if MediaType(r.Header.Get("Content-Type")) != "application/json" {
		http.Error(w, "Content-Type must be 'application/json'", http.StatusUnsupportedMediaType)
		return false
	}
	if jsonOK, streamOK := Accepts(r.Header.Values("Accept")); !jsonOK || !streamOK {
		http.Error(w, "Accept must contain both 'application/json' and 'text/event-stream'", http.StatusBadRequest)
		return false
	}
	return true
}

// CheckGET answers a GET whose Accept does not admit an event stream (400), and reports
// whether it may go on.
func CheckGET(w http.ResponseWriter, r *http.Request) bool {
	if _, streamOK := Accepts(r.Header.Values("Accept")); !streamOK {
		http.Error(w, "Accept must contain 'text/event-stream' for GET requests", http.StatusBadRequest)
		return false
	}
	return true
}

// ReadBody reads a POST body of at most limit bytes within timeout, or answers 413 (too
// large), 408 (too slow; the connection is closed) or 400 and returns false. Once the
// body is in, the connection has no read deadline: the response may be a long SSE
// stream, during which net/http keeps reading to notice a client that goes away.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration) ([]byte, bool) {
	rc := http.NewResponseController(w)
	// Not every ResponseWriter supports deadlines (a test recorder, a wrapping
	// middleware); the body is then read without one.
	_ = rc.SetReadDeadline(time.Now().Add(timeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
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

// ReadMessages reads a POST body as ReadBody does and judges it with mcpmsg.CheckBody:
// a body that readers could read two ways (a member name twice, or in two cases) is
// answered with 400 and a JSON-RPC Invalid Request error, and never reaches a session.
// Every front door reads client messages through here, and decides on what it returns.
func ReadMessages(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration) ([]byte, *mcpmsg.Body, bool) {
	body, ok := ReadBody(w, r, limit, timeout)
	if !ok {
		return nil, nil, false
	}
	msgs, err := mcpmsg.CheckBody(body)
	if err != nil {
		WriteError(w, http.StatusBadRequest, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, err.Error())
		return nil, nil, false
	}
	return body, msgs, true
}

// InitializeRequest returns the initialize request that the body of a POST without a
// session ID must be. For anything else it answers the client (400: a session starts
// with initialize) and returns nil.
func InitializeRequest(w http.ResponseWriter, body []byte) *jsonrpc.Request {
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		http.Error(w, "malformed JSON-RPC message: a session starts with one initialize request", http.StatusBadRequest)
		return nil
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != "initialize" {
		RefuseSessionless(w, msg)
		return nil
	}
	return req
}

// RefuseSessionless answers a message that carries no session ID and is not an
// initialize request. A SEP-2575 server/discover probe learns that this endpoint only
// speaks the session-based protocol, so a go-sdk client falls back to initialize.
func RefuseSessionless(w http.ResponseWriter, msg jsonrpc.Message) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		http.Error(w, "Bad Request: missing Mcp-Session-Id header: a session starts with initialize", http.StatusBadRequest)
		return
	}
	code := int64(jsonrpc.CodeInvalidRequest)
	if req.Method == "server/discover" {
		code = mcp.CodeUnsupportedProtocolVersion
	}
	WriteError(w, http.StatusBadRequest, req.ID, code,
		"this server needs a session: send initialize first (stateless requests are not supported)")
}

// RefuseSessionlessEra answers a request of the sessionless era (MCP 2026-07-28 and
// later) at an endpoint whose server speaks only sessions: UnsupportedProtocolVersion
// (-32022) naming the versions it does speak, from which clients fall back to
// initialize.
func RefuseSessionlessEra(w http.ResponseWriter, id jsonrpc.ID, requested string) {
	const message = "this server speaks only sessions: send initialize"
	var sessionVersions []string
	for _, v := range mcp.SupportedProtocolVersions() {
		if v < "2026-07-28" {
			sessionVersions = append(sessionVersions, v)
		}
	}
	data, _ := json.Marshal(mcp.UnsupportedProtocolVersionData{Supported: sessionVersions, Requested: requested})
	msg, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: mcp.CodeUnsupportedProtocolVersion, Message: message, Data: data}})
	if err != nil {
		WriteError(w, http.StatusBadRequest, id, mcp.CodeUnsupportedProtocolVersion, message)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(msg)
}

// NotFound answers 404 for a session that does not exist (any more). The body must not
// be a JSON-RPC error: go-sdk clients read only a plain 404 as "session gone", and start
// a new session.
func NotFound(w http.ResponseWriter, why string) {
	if why == "" {
		why = "session not found"
	}
	http.Error(w, "Not Found: "+why, http.StatusNotFound)
}

// WriteError writes a JSON-RPC error response with the given HTTP status.
func WriteError(w http.ResponseWriter, status int, id jsonrpc.ID, code int64, message string) {
	WriteResponse(w, status, &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: code, Message: message}})
}

// WriteResponse answers a POST with one JSON-RPC response as an application/json body,
// encoded by go-sdk, with the HTTP status given.
func WriteResponse(w http.ResponseWriter, status int, resp *jsonrpc.Response) {
	data, err := jsonrpc.EncodeMessage(resp)
	if err != nil {
		http.Error(w, "could not encode the answer", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	// With its length given, the answer is whole once flushed: a handler that has more
	// to do after answering can send it first (net/http would hold it back until the
	// handler returns, to learn the length itself).
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// Accepts reports whether Accept header values admit JSON and an event stream.
func Accepts(values []string) (jsonOK, streamOK bool) {
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

// MediaType returns the media type of a Content-Type value without parameters.
func MediaType(value string) string {
	mt, _, err := mime.ParseMediaType(value)
	if err != nil {
		return ""
	}
	return mt
}

// HostAllowed is DNS rebinding protection, as go-sdk applies it: a request that arrived
// on a loopback address must name a loopback host. It answers 403 and returns false
// otherwise.
func HostAllowed(w http.ResponseWriter, r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || local == nil || !IsLoopback(local.String()) || IsLoopback(r.Host) {
		return true
	}
	http.Error(w, "Forbidden: invalid Host header", http.StatusForbidden)
	return false
}

// IsLoopback reports whether a host or host:port names the loopback interface.
func IsLoopback(hostport string) bool {
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
