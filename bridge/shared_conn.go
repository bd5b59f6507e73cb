package bridge

// This file holds a session's connection to the shared process and the JSON helpers the
// routing uses.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
	"github.com/switchboard-mcp/switchboard/relay"
)

// sharedConn is one session's connection to the shared process.
type sharedConn struct {
	p   *sharedProcess
	log logr.Logger

	inbound   chan jsonrpc.Message // messages for the session, at most sharedQueueSize
	dropped   atomic.Int64         // messages dropped since the session last kept up
	closed    chan struct{}        // Close was called
	ended     chan struct{}        // the sharedProcess closed
	closeOnce sync.Once
	endOnce   sync.Once

	// Guarded by sharedProcess.mu.
	calls map[jsonrpc.ID]*sharedCall // calls in flight, by the session's ID
	subs  map[string]struct{}        // resource URIs it subscribed to
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
		return
	case methodDiscover:
		// The process speaks the session the bridge began with initialize; a client that
		// probes for the stateless protocol (SEP-2575) learns to fall back to initialize.
		c.deliver(relay.ErrorResponse(req.ID, mcp.CodeUnsupportedProtocolVersion,
			errors.New("the shared mcp server is used through sessions: send initialize")))
		return
	case methodSetLevel:
		c.deliver(setLevelResponse(req))
		return
	}
	req, call, err := newSessionCall(req)
	if err != nil {
		c.deliver(relay.ErrorResponse(req.ID, jsonrpc.CodeInvalidParams, err))
		return
	}
	switch req.Method {
	case methodSubscribe:
		c.p.subscribe(ctx, c, req, call)
	case methodUnsubscribe:
		c.p.unsubscribe(ctx, c, req, call)
	default:
		c.p.forward(ctx, c, req, call)
	}
}

// newSessionCall strictly decodes the params of a session's call, once, and returns the
// call to register and the request to send: one that carries a progress token gets a
// random one of the process in its place. Decoding fails for params that are not an
// object, or that spell a member the bridge decides on (_meta, progressToken, uri, ...)
// in another case: the process could read such a member where the bridge did not.
func newSessionCall(req *jsonrpc.Request) (*jsonrpc.Request, *sharedCall, error) {
	call := &sharedCall{}
	if len(req.Params) == 0 || string(req.Params) == "null" {
		return req, call, nil
	}
	params, err := mcpmsg.DecodeParams(req.Params)
	if err != nil {
		return req, nil, fmt.Errorf("invalid params of %s: %w", req.Method, err)
	}
	call.uri = params.URI
	if token := params.ProgressToken; token != nil && string(token) != "null" {
		call.token, call.origToken = newProcessID(), token
		swapped, err := withProgressToken(req.Params, rawID(call.token))
		if err != nil {
			return req, nil, fmt.Errorf("invalid params of %s: %w", req.Method, err)
		}
		req = &jsonrpc.Request{ID: req.ID, Method: req.Method, Params: swapped}
	}
	return req, call, nil
}

// loggingLevels are the levels logging/setLevel may set.
var loggingLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// setLevelResponse answers a session's logging/setLevel: {} for a valid level. The level
// is not passed on: no log message of the shared process reaches any session (see
// sharedProcess), and the process's level is not one session's to set for all.
func setLevelResponse(req *jsonrpc.Request) *jsonrpc.Response {
	var params struct {
		Level string `json:"level"`
	}
	if err := json.Unmarshal(req.Params, &params); err != nil || !slices.Contains(loggingLevels, params.Level) {
		return relay.ErrorResponse(req.ID, jsonrpc.CodeInvalidParams,
			fmt.Errorf("logging/setLevel needs a level, one of %s", strings.Join(loggingLevels, ", ")))
	}
	return emptyResult(req.ID)
}

// notify takes a session's notification. Only notifications/cancelled reaches the
// process: notifications/initialized is the bridge's own to send, progress and roots
// concern requests and capabilities of the process the bridge did not pass on, and any
// other notification would reach a process every session shares.
func (c *sharedConn) notify(note *jsonrpc.Request) {
	switch note.Method {
	case methodInitialized:
	case methodCancelled:
		c.p.cancel(c, note)
	default:
		c.log.V(1).Info("Dropped a notification from the client", "method", note.Method)
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

// processIDBytes is the randomness of a request ID or progress token the bridge gives
// the process: 96 bits, which no session guesses and no two calls draw alike.
const processIDBytes = 12

// newProcessID returns a random request ID or progress token for the process: a string
// of 16 base64url characters.
func newProcessID() jsonrpc.ID {
	var b [processIDBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	id, _ := jsonrpc.MakeID(base64.RawURLEncoding.EncodeToString(b[:]))
	return id
}

// rawID is the JSON form of a process ID or token.
func rawID(id jsonrpc.ID) json.RawMessage {
	raw, _ := json.Marshal(id.Raw())
	return raw
}

// withProgressToken returns params, which mcpmsg.DecodeParams accepted with a progress
// token, with _meta.progressToken set to token. Since they passed that check, no two of
// their member names are alike, and the members decoded here are the ones it judged.
func withProgressToken(params, token json.RawMessage) (json.RawMessage, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(params, &members); err != nil {
		return nil, err
	}
	meta, err := withMember(members["_meta"], "progressToken", token)
	if err != nil {
		return nil, err
	}
	members["_meta"] = meta
	return json.Marshal(members)
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
