package bridge

// This file holds a session's connection to the shared process and the JSON helpers the
// routing uses.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

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

// swapProgressToken returns params with _meta.progressToken set to token, and the token
// it replaced; both nil when params carry none. It parses params once: they hold a
// tool's arguments, of any size.
func swapProgressToken(params, token json.RawMessage) (swapped, old json.RawMessage) {
	if !bytes.Contains(params, []byte(`"progressToken"`)) {
		return nil, nil // most calls
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(params, &members) != nil {
		return nil, nil
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(members["_meta"], &meta) != nil {
		return nil, nil
	}
	if old = meta["progressToken"]; len(old) == 0 || string(old) == "null" {
		return nil, nil
	}
	meta["progressToken"] = token
	rawMeta, err := json.Marshal(meta)
	if err != nil {
		return nil, nil
	}
	members["_meta"] = rawMeta
	if swapped, err = json.Marshal(members); err != nil {
		return nil, nil
	}
	return swapped, old
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
