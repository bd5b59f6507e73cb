package mcphttp

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// How long, and how often, a Redelivery tries again; how many messages may wait.
const (
	redeliverPatience = 5 * time.Second
	redeliverInterval = 20 * time.Millisecond
	maxUndelivered    = 32
)

// Redelivery retries, in order, the server's requests and notifications that a session's
// client side refused. go-sdk's StreamableServerTransport sends what answers no client
// request on the client's standalone stream, and refuses the write until the client has
// opened that stream, which clients do only after initialize: a server that asks
// something at once (an elicitation during the first call) would otherwise lose its
// question. Retries run on a goroutine of their own, so the relay goes on meanwhile and
// answers to the client's calls are not held up behind them.
type Redelivery struct {
	client  mcp.Connection
	done    <-chan struct{}
	log     logr.Logger
	waiting chan jsonrpc.Message
	started bool
}

// NewRedelivery returns a Redelivery writing to client until done is closed. It is used
// from the relay's server-to-client loop only, which calls Add one message at a time.
func NewRedelivery(client mcp.Connection, done <-chan struct{}, log logr.Logger) *Redelivery {
	return &Redelivery{client: client, done: done, log: log, waiting: make(chan jsonrpc.Message, maxUndelivered)}
}

// Add queues msg for another try, if it is a request or notification (a response belongs
// to an HTTP request, which is gone). It drops msg when too many wait already.
func (r *Redelivery) Add(msg jsonrpc.Message) {
	if _, isResponse := msg.(*jsonrpc.Response); isResponse {
		r.log.V(1).Info("Dropped a response of the MCP server: its request went away")
		return
	}
	select {
	case r.waiting <- msg:
		if !r.started {
			r.started = true
			go r.run()
		}
	default:
		r.log.V(1).Info("Dropped a message from the MCP server: too many wait for the client's stream")
	}
}

// run writes the waiting messages in order, each tried for at most redeliverPatience.
func (r *Redelivery) run() {
	for {
		var msg jsonrpc.Message
		select {
		case msg = <-r.waiting:
		case <-r.done:
			return
		}
		deadline := time.Now().Add(redeliverPatience)
		for r.client.Write(context.Background(), msg) != nil {
			if time.Now().After(deadline) {
				r.log.V(1).Info("Dropped a message from the MCP server: the client opened no stream to carry it")
				break
			}
			select {
			case <-time.After(redeliverInterval):
			case <-r.done:
				return
			}
		}
	}
}
