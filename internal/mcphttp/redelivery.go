package mcphttp

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// How long, and how often, a Redelivery tries again; how many messages, and how many
// bytes of them, may wait (the one being tried included).
const (
	redeliverPatience   = 5 * time.Second
	redeliverInterval   = 20 * time.Millisecond
	maxUndelivered      = 32
	maxUndeliveredBytes = 1 << 20
)

// Redelivery retries, in order, the server's requests and notifications that a session's
// client side refused. go-sdk's StreamableServerTransport sends what answers no client
// request on the client's standalone stream, and refuses the write until the client has
// opened that stream, which clients do only after initialize: a server that asks
// something at once (an elicitation during the first call) would otherwise lose its
// question. Retries run on a goroutine of their own, so the relay goes on meanwhile and
// answers to the client's calls are not held up behind them.
//
// What waits is bounded by count and by bytes, per session: a message that does not fit
// is dropped (and logged at V(1)), so a server cannot pin more than maxUndeliveredBytes
// of a client that never opens its stream.
type Redelivery struct {
	client  mcp.Connection
	done    <-chan struct{}
	log     logr.Logger
	waiting chan *jsonrpc.Request
	started bool
	// held is the size (see messageSize) of the waiting messages and the one being
	// tried; Add adds to it, run takes off what it has written or dropped.
	held atomic.Int64
}

// NewRedelivery returns a Redelivery writing to client until done is closed. It is used
// from the relay's server-to-client loop only, which calls Add one message at a time.
func NewRedelivery(client mcp.Connection, done <-chan struct{}, log logr.Logger) *Redelivery {
	return &Redelivery{client: client, done: done, log: log, waiting: make(chan *jsonrpc.Request, maxUndelivered)}
}

// Add queues msg for another try, if it is a request or notification (a response belongs
// to an HTTP request, which is gone). It drops msg when too many messages, or too many
// bytes of them, wait already.
func (r *Redelivery) Add(msg jsonrpc.Message) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok {
		r.log.V(1).Info("Dropped a response of the MCP server: its request went away")
		return
	}
	size := messageSize(req)
	// Only Add raises held, one message at a time, so the check cannot be overtaken.
	if held := r.held.Load(); held+size > maxUndeliveredBytes {
		r.log.V(1).Info("Dropped a message from the MCP server: too many bytes wait for the client's stream",
			"method", req.Method, "bytes", size, "waitingBytes", held, "limitBytes", maxUndeliveredBytes)
		return
	}
	r.held.Add(size)
	select {
	case r.waiting <- req:
		if !r.started {
			r.started = true
			go r.run()
		}
	default:
		r.held.Add(-size)
		r.log.V(1).Info("Dropped a message from the MCP server: too many wait for the client's stream",
			"method", req.Method, "limit", maxUndelivered)
	}
}

// messageSize is what req costs while it waits: its method and its parameters, the bulk
// of its encoding, without encoding it again.
func messageSize(req *jsonrpc.Request) int64 {
	return int64(len(req.Method) + len(req.Params))
}

// run writes the waiting messages in order, each tried for at most redeliverPatience.
func (r *Redelivery) run() {
	for {
		var req *jsonrpc.Request
		select {
		case req = <-r.waiting:
		case <-r.done:
			return
		}
		r.deliver(req)
		r.held.Add(-messageSize(req))
	}
}

// deliver writes msg to the client, trying for at most redeliverPatience.
func (r *Redelivery) deliver(msg *jsonrpc.Request) {
	deadline := time.Now().Add(redeliverPatience)
	for r.client.Write(context.Background(), msg) != nil {
		if time.Now().After(deadline) {
			r.log.V(1).Info("Dropped a message from the MCP server: the client opened no stream to carry it")
			return
		}
		select {
		case <-time.After(redeliverInterval):
		case <-r.done:
			return
		}
	}
}
