package relay

import (
	"context"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Side is one of the two connections a Relay joins.
type Side int

const (
	// Client is the side of the MCP client: the session that sends initialize.
	Client Side = iota
	// Server is the side of the MCP server that answers it.
	Server
)

// Other returns the opposite side.
func (s Side) Other() Side {
	if s == Client {
		return Server
	}
	return Client
}

// String returns "client" or "server".
func (s Side) String() string {
	if s == Client {
		return "client"
	}
	return "server"
}

// Verdict is what a Hook decides for one message: forward it (or a rewrite of it),
// drop it, or answer it locally. Make one with Forward, Drop or Answer.
type Verdict struct {
	forward jsonrpc.Message // written to the other side when non-nil
	answer  jsonrpc.Message // written back to the side the message came from when non-nil
	ctx     context.Context // the context of the write when non-nil
	then    func()          // called once the forward has been written (or failed to be)
}

// Forward passes msg on to the other side: the message the hook saw, or a rewrite of it.
func Forward(msg jsonrpc.Message) Verdict { return Verdict{forward: msg} }

// ForwardContext is Forward with the write made in ctx instead of the relay's: a
// context derived from the one the hook got that carries what the write should know
// (the span of the outgoing request, say).
func ForwardContext(ctx context.Context, msg jsonrpc.Message) Verdict {
	return Verdict{forward: msg, ctx: ctx}
}

// ForwardThen is Forward, with then called once msg has been written to the other side
// (or its write has failed): for work that belongs to the message but need not delay it,
// such as ending the spans of the call it answers.
func ForwardThen(msg jsonrpc.Message, then func()) Verdict {
	return Verdict{forward: msg, then: then}
}

// Drop forwards nothing.
func Drop() Verdict { return Verdict{} }

// Answer forwards nothing and writes resp back to the side the message came from, as
// the answer to the request the hook saw. The other side never sees that request.
func Answer(resp *jsonrpc.Response) Verdict { return Verdict{answer: resp} }

// ErrorResponse is a JSON-RPC error answering the call with the given id; its message is
// err's text.
func ErrorResponse(id jsonrpc.ID, code int64, err error) *jsonrpc.Response {
	return &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: code, Message: err.Error()}}
}

// A Hook sees every message the relay reads from side from, before anything is written
// to the other side, and decides what happens to it. It runs on the loop of its
// direction: messages in one direction reach it one at a time and in order, while the
// two directions run concurrently. A Hook that blocks holds up its direction.
type Hook func(ctx context.Context, from Side, msg jsonrpc.Message) Verdict

// Chain returns a Hook that runs hooks in order: each one sees what the one before it
// forwarded, and the first that drops or answers a message decides for it. Nil hooks are
// skipped.
func Chain(hooks ...Hook) Hook {
	return func(ctx context.Context, from Side, msg jsonrpc.Message) Verdict {
		v := Forward(msg)
		for _, h := range hooks {
			if h == nil {
				continue
			}
			hctx := ctx
			if v.ctx != nil {
				hctx = v.ctx
			}
			next := h(hctx, from, v.forward)
			if next.ctx == nil {
				next.ctx = v.ctx
			}
			next.then = both(v.then, next.then)
			if v = next; v.forward == nil {
				return v // the relay runs then at once: nothing is written
			}
		}
		return v
	}
}

// both returns a function that calls a then b, either of which may be nil.
func both(a, b func()) func() {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func() { a(); b() }
}

// Options are a Relay's hooks. Every field is optional.
type Options struct {
	// Hook decides what happens to each message. Nil forwards every message unchanged.
	Hook Hook
	// WriteFailed is called when writing msg to side to failed: a message forwarded
	// there, or a Hook's answer to a message from there. For a forwarded message it
	// reports whether the relay stops reading the side the message came from (true) or
	// carries on with the next message (false); a failed answer never stops the relay.
	// Nil drops the message and carries on: the connection's next Read reports a side
	// that is really gone.
	WriteFailed func(ctx context.Context, to Side, msg jsonrpc.Message, err error) (stop bool)
	// Closed is called once for each side when reading from it failed, with the error
	// (the side closed or broke, or ctx is done); the relay then stops reading that side.
	// Nil closes the other side, so that whoever is there sees the session end. A Closed
	// hook that wants that must close the other side itself, when it is ready to.
	Closed func(side Side, err error)
}

// Relay moves messages between a client-side and a server-side connection. Create it
// with New and start it with Run.
type Relay struct {
	conns [2]mcp.Connection
	opts  Options
}

// New returns a Relay between client, the connection to the MCP client, and server, the
// connection to the MCP server. It reads from neither until Run.
func New(client, server mcp.Connection, opts Options) *Relay {
	return &Relay{conns: [2]mcp.Connection{Client: client, Server: server}, opts: opts}
}

// Conn returns the connection of side.
func (r *Relay) Conn(side Side) mcp.Connection { return r.conns[side] }

// Run relays messages in both directions until each has stopped: reading from a side
// failed (see Options.Closed), or a write to it failed and Options.WriteFailed asked to
// stop. With the default Closed hook, closing either connection, or ctx being done, ends
// Run with both connections closed.
func (r *Relay) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { r.loop(ctx, Server) })
	r.loop(ctx, Client)
	wg.Wait()
}

// loop relays the messages read from side from to the other side until a read fails or
// WriteFailed asks to stop.
func (r *Relay) loop(ctx context.Context, from Side) {
	src, dst := r.conns[from], r.conns[from.Other()]
	for {
		msg, err := src.Read(ctx)
		if err != nil {
			r.closed(from, err)
			return
		}
		v := Forward(msg)
		if r.opts.Hook != nil {
			v = r.opts.Hook(ctx, from, msg)
		}
		if v.answer != nil {
			if err := src.Write(ctx, v.answer); err != nil && r.opts.WriteFailed != nil {
				r.opts.WriteFailed(ctx, from, v.answer, err)
			}
		}
		if v.forward == nil {
			if v.then != nil {
				v.then() // nothing is written: what waited for the write is due now
			}
			continue
		}
		wctx := ctx
		if v.ctx != nil {
			wctx = v.ctx
		}
		err = dst.Write(wctx, v.forward)
		if v.then != nil {
			v.then()
		}
		if err != nil && r.opts.WriteFailed != nil {
			if r.opts.WriteFailed(wctx, from.Other(), v.forward, err) {
				return
			}
		}
	}
}

// closed reports that reading side failed.
func (r *Relay) closed(side Side, err error) {
	if r.opts.Closed != nil {
		r.opts.Closed(side, err)
		return
	}
	_ = r.conns[side.Other()].Close()
}
