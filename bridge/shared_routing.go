package bridge

// This file holds Shared mode's routing: what the multiplexer does with each message
// from the process and from a session (see sharedProcess for the rules).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
	"github.com/switchboard-mcp/switchboard/relay"
)

// read routes every message the process writes until its stdout fails.
func (p *sharedProcess) read(inc *incarnation) {
	defer p.wg.Done()
	defer close(inc.readDone)
	for {
		msg, err := inc.conn.Read(context.Background())
		if err != nil {
			inc.readErr = err
			return
		}
		switch msg := msg.(type) {
		case *jsonrpc.Response:
			p.routeResponse(inc, msg)
		case *jsonrpc.Request:
			if msg.IsCall() {
				p.answerProcessCall(inc, msg)
			} else {
				p.routeNotification(inc, msg)
			}
		}
	}
}

// routeResponse settles the call resp answers and passes it to the session that made it,
// under that session's ID.
func (p *sharedProcess) routeResponse(inc *incarnation, resp *jsonrpc.Response) {
	p.mu.Lock()
	call := inc.pending[resp.ID]
	if call == nil {
		p.mu.Unlock()
		inc.log.V(1).Info("Dropped a response to no call in flight (cancelled, or its session ended)")
		return
	}
	p.forgetLocked(call)
	if call.method == methodSubscribe {
		p.subscribeSettledLocked(call, resp.Error == nil)
	}
	p.mu.Unlock()

	switch {
	case call.reply != nil:
		call.reply <- resp
	case call.conn != nil:
		call.conn.deliver(&jsonrpc.Response{ID: call.origID, Result: resp.Result, Error: resp.Error})
	case resp.Error != nil:
		inc.log.Info("The shared MCP server refused a request of the bridge", "method", call.method, "error", resp.Error.Error())
	}
}

// subscribeSettledLocked records the process's answer to a resources/subscribe.
func (p *sharedProcess) subscribeSettledLocked(call *sharedCall, accepted bool) {
	s := p.subs[call.uri]
	if s == nil {
		return
	}
	if accepted {
		if call.inc == p.live {
			s.confirmed = true
		}
		return
	}
	if call.conn != nil {
		// Refused: that session holds no subscription after all.
		delete(s.sessions, call.conn)
		delete(call.conn.subs, call.uri)
		if len(s.sessions) == 0 {
			delete(p.subs, call.uri)
		}
	}
}

// answerProcessCall answers a request of the process: the bridge is its only client, and
// has nothing to answer but ping with. The answer is written off the read loop, which
// must not wait for stdin.
func (p *sharedProcess) answerProcessCall(inc *incarnation, req *jsonrpc.Request) {
	resp := &jsonrpc.Response{ID: req.ID, Result: json.RawMessage("{}")}
	if req.Method != methodPing {
		inc.log.V(1).Info("Refused a request of the shared MCP server", "method", req.Method)
		resp = relay.ErrorResponse(req.ID, jsonrpc.CodeMethodNotFound, fmt.Errorf(
			"method %q not found: the bridge shares this server among its clients and declared no client capabilities", req.Method))
	}
	p.wg.Go(func() {
		if err := inc.conn.Write(context.Background(), resp); err != nil {
			inc.log.V(1).Info("Could not answer a request of the shared MCP server", "reason", err.Error())
		}
	})
}

// routeNotification passes a notification of the process to the sessions it concerns:
// the one whose call it reports progress on, the ones subscribed to the resource it
// updates, or all of them for a change of the state they share. Any other notification
// (a log message above all) is dropped: nothing on stdio says which session's request it
// was produced for, and no session may receive what was produced for another.
func (p *sharedProcess) routeNotification(inc *incarnation, note *jsonrpc.Request) {
	var uri string
	switch note.Method {
	case methodProgress:
		p.routeProgress(inc, note)
		return
	case methodResourceUpdated:
		var params mcp.ResourceUpdatedNotificationParams
		if err := json.Unmarshal(note.Params, &params); err != nil || params.URI == "" {
			inc.log.V(1).Info("Dropped a malformed resource update")
			return
		}
		uri = params.URI
	case methodToolsChanged, methodPromptsChanged, methodResourcesChanged:
	case methodCancelled:
		return // it cancels a request of the process, which the bridge has answered
	default:
		inc.log.V(1).Info("Dropped a notification of the shared MCP server: it belongs to no one session", "method", note.Method)
		return
	}
	p.mu.Lock()
	targets := make([]*sharedConn, 0, len(p.conns))
	for c := range p.conns {
		if uri == "" || c.subscribedLocked(uri) {
			targets = append(targets, c)
		}
	}
	p.mu.Unlock()
	for _, c := range targets {
		copied := *note // each session's transport may keep what it is given
		c.deliver(&copied)
	}
}

// routeProgress passes a progress notification to the session whose call carries its
// token, under that session's token.
func (p *sharedProcess) routeProgress(inc *incarnation, note *jsonrpc.Request) {
	var params mcp.ProgressNotificationParams
	if err := json.Unmarshal(note.Params, &params); err != nil {
		inc.log.V(1).Info("Dropped a malformed progress notification")
		return
	}
	token, err := jsonrpc.MakeID(params.ProgressToken)
	if err != nil {
		inc.log.V(1).Info("Dropped a progress notification with a malformed token")
		return
	}
	p.mu.Lock()
	call := inc.progress[token]
	p.mu.Unlock()
	if call == nil || call.conn == nil {
		return // its call is over
	}
	rewritten, err := withMember(note.Params, "progressToken", call.origToken)
	if err != nil {
		return
	}
	call.conn.deliver(&jsonrpc.Request{Method: note.Method, Params: rewritten})
}

// await returns the live process, waiting for the next start to settle if there is none.
func (p *sharedProcess) await(ctx context.Context, c *sharedConn) (*incarnation, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrShuttingDown
		}
		if live := p.live; live != nil {
			p.mu.Unlock()
			return live, nil
		}
		next := p.next
		p.mu.Unlock()
		select {
		case <-next.settled:
			if next.err != nil {
				return nil, next.err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.closed:
			return nil, mcp.ErrConnectionClosed
		case <-p.done:
			return nil, ErrShuttingDown
		}
	}
}

// registerLocked records call as owed by inc and returns req as the process must see it:
// under a random ID of its own. A call with a progress token (call.token, set by
// newSessionCall, which put it in req's params) is found by it too.
func (p *sharedProcess) registerLocked(inc *incarnation, call *sharedCall, req *jsonrpc.Request) *jsonrpc.Request {
	call.inc = inc
	call.id = newProcessID()
	call.origID = req.ID
	call.method = req.Method
	if call.token.IsValid() {
		inc.progress[call.token] = call
	}
	inc.pending[call.id] = call
	if call.conn != nil {
		call.conn.calls[call.origID] = call
	}
	return &jsonrpc.Request{ID: call.id, Method: req.Method, Params: req.Params}
}

// ownCallLocked registers a call of the bridge itself whose response nobody waits for.
func (p *sharedProcess) ownCallLocked(inc *incarnation, method string, params any, uri string) (*jsonrpc.Request, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	call := &sharedCall{uri: uri}
	return p.registerLocked(inc, call, &jsonrpc.Request{Method: method, Params: raw}), nil
}

// forgetLocked removes a call from the tables it is in.
func (p *sharedProcess) forgetLocked(call *sharedCall) {
	delete(call.inc.pending, call.id)
	if call.token.IsValid() {
		delete(call.inc.progress, call.token)
	}
	if call.conn != nil && call.conn.calls[call.origID] == call {
		delete(call.conn.calls, call.origID)
	}
}

// writeProcess writes msg to inc's stdin. A failed write is remembered as the likely
// reason the process is ending, and closes its connection, which ends the read loop
// (and so the process), since a process whose stdin is broken can serve nobody.
func (p *sharedProcess) writeProcess(inc *incarnation, msg jsonrpc.Message) bool {
	inc.writeMu.Lock()
	_ = inc.proc.stdin.SetWriteDeadline(time.Now().Add(sharedWriteTimeout))
	err := inc.conn.Write(context.Background(), msg)
	inc.writeMu.Unlock()
	if err == nil {
		return true
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("it read nothing from its stdin for %s", sharedWriteTimeout)
	}
	p.mu.Lock()
	if inc.writeErr == nil {
		inc.writeErr = err
	}
	p.mu.Unlock()
	// The supervisor stops and replaces a process whose stdin is broken, even one that
	// keeps its stdout open.
	inc.brokenOnce.Do(func() { close(inc.broken) })
	// Give the read loop a moment to see the exit, the better reason.
	timer := time.NewTimer(exitWait)
	defer timer.Stop()
	select {
	case <-inc.readDone:
	case <-timer.C:
		_ = inc.conn.Close()
	}
	return false
}

// forward passes a session's call to the process, waiting for one if none is live. A call
// that cannot be sent is answered with a JSON-RPC error.
func (p *sharedProcess) forward(ctx context.Context, c *sharedConn, req *jsonrpc.Request, call *sharedCall) {
	for {
		inc, err := p.await(ctx, c)
		if err != nil {
			c.deliver(errorResponse(req.ID, err))
			return
		}
		out, err := p.register(inc, c, req, call)
		if errors.Is(err, errProcessReplaced) {
			continue
		}
		if err != nil {
			return // the connection closed: nobody to answer
		}
		p.send(inc, call, out)
		return
	}
}

// register records a session's call as owed by inc, unless inc is no longer live.
func (p *sharedProcess) register(inc *incarnation, c *sharedConn, req *jsonrpc.Request, call *sharedCall) (*jsonrpc.Request, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.isClosed() {
		return nil, mcp.ErrConnectionClosed
	}
	if p.live != inc {
		return nil, errProcessReplaced
	}
	call.conn = c
	return p.registerLocked(inc, call, req), nil
}

// send writes a registered call to the process; if that fails, the call fails with the
// reason, unless the process's end has answered it already.
func (p *sharedProcess) send(inc *incarnation, call *sharedCall, out *jsonrpc.Request) {
	if p.writeProcess(inc, out) {
		return
	}
	p.mu.Lock()
	owed := inc.pending[call.id] == call
	if owed {
		p.forgetLocked(call)
	}
	p.mu.Unlock()
	if !owed || call.conn == nil {
		return
	}
	call.conn.deliver(errorResponse(call.origID, p.endReason(inc)))
}

// answerInitialize answers a session's initialize from the process's InitializeResult.
func (p *sharedProcess) answerInitialize(ctx context.Context, c *sharedConn, req *jsonrpc.Request) {
	p.mu.Lock()
	result := p.initResult
	p.mu.Unlock()
	if result == nil {
		if _, err := p.await(ctx, c); err != nil {
			c.deliver(errorResponse(req.ID, err))
			return
		}
		p.mu.Lock()
		result = p.initResult
		p.mu.Unlock()
	}
	c.log.V(1).Info("Answered initialize from the shared MCP server's result")
	c.deliver(&jsonrpc.Response{ID: req.ID, Result: result})
}

// subscribe passes a session's resources/subscribe of call.uri on unless the process
// already holds a subscription for the URI, in which case it answers {}.
func (p *sharedProcess) subscribe(ctx context.Context, c *sharedConn, req *jsonrpc.Request, call *sharedCall) {
	if call.uri == "" {
		p.forward(ctx, c, req, call) // the server explains what is wrong with it
		return
	}
	for {
		inc, err := p.await(ctx, c)
		if err != nil {
			c.deliver(errorResponse(req.ID, err))
			return
		}
		p.subsOrder.Lock()
		p.mu.Lock()
		if c.isClosed() {
			p.mu.Unlock()
			p.subsOrder.Unlock()
			return
		}
		if p.live != inc {
			p.mu.Unlock()
			p.subsOrder.Unlock()
			continue
		}
		s := p.subs[call.uri]
		if s == nil {
			s = &subscription{sessions: make(map[*sharedConn]struct{})}
			p.subs[call.uri] = s
		}
		s.sessions[c] = struct{}{}
		c.subs[call.uri] = struct{}{}
		var out *jsonrpc.Request
		call.conn = c
		if !s.confirmed {
			out = p.registerLocked(inc, call, req)
		}
		p.mu.Unlock()
		if out == nil {
			c.deliver(emptyResult(req.ID))
		} else {
			p.send(inc, call, out)
		}
		p.subsOrder.Unlock()
		return
	}
}

// unsubscribe releases a session's subscription to call.uri; the last one for a URI
// passes the request on to a live process, anything else is answered {}.
func (p *sharedProcess) unsubscribe(ctx context.Context, c *sharedConn, req *jsonrpc.Request, call *sharedCall) {
	if call.uri == "" {
		p.forward(ctx, c, req, call)
		return
	}
	p.subsOrder.Lock()
	defer p.subsOrder.Unlock()
	p.mu.Lock()
	if c.isClosed() {
		p.mu.Unlock()
		return
	}
	var out *jsonrpc.Request
	call.conn = c
	inc := p.live
	if p.releaseLocked(c, call.uri) && inc != nil {
		out = p.registerLocked(inc, call, req)
	}
	p.mu.Unlock()
	if out == nil {
		c.deliver(emptyResult(req.ID))
		return
	}
	p.send(inc, call, out)
}

// releaseLocked drops c's subscription to uri and reports whether it was the last one
// the process holds.
func (p *sharedProcess) releaseLocked(c *sharedConn, uri string) bool {
	if _, ok := c.subs[uri]; !ok {
		return false
	}
	delete(c.subs, uri)
	s := p.subs[uri]
	if s == nil {
		return false
	}
	delete(s.sessions, c)
	if len(s.sessions) > 0 {
		return false
	}
	delete(p.subs, uri)
	return s.confirmed
}

// cancel passes a session's notifications/cancelled on under the process ID of the call
// it names, if that call is the session's and still in flight. What reaches the process
// is rebuilt from the requestId and reason the bridge read, nothing else of what the
// session sent.
func (p *sharedProcess) cancel(c *sharedConn, note *jsonrpc.Request) {
	if mcpmsg.Check(note.Params) != nil {
		return
	}
	var params struct {
		RequestID any `json:"requestId"`
		Reason    any `json:"reason"`
	}
	if err := json.Unmarshal(note.Params, &params); err != nil {
		return
	}
	id, err := jsonrpc.MakeID(params.RequestID)
	if err != nil || !id.IsValid() {
		return
	}
	reason, _ := params.Reason.(string)
	p.mu.Lock()
	call := c.calls[id]
	if call == nil || call.inc != p.live {
		p.mu.Unlock()
		return // answered already, or owed by a process that is gone
	}
	p.forgetLocked(call)
	p.mu.Unlock()
	out, err := newNotification(methodCancelled, &mcp.CancelledParams{RequestID: call.id.Raw(), Reason: reason})
	if err != nil {
		return
	}
	p.writeProcess(call.inc, out)
}

// release forgets everything a closed connection held: its calls are dropped (and
// cancelled in the process) and its subscriptions released (the last one for a URI is
// unsubscribed in the process).
func (p *sharedProcess) release(c *sharedConn) {
	p.subsOrder.Lock()
	defer p.subsOrder.Unlock()
	p.mu.Lock()
	delete(p.conns, c)
	inc := p.live
	var out []*jsonrpc.Request
	for _, call := range c.calls {
		p.forgetLocked(call)
		if call.inc == inc {
			if note, err := newNotification(methodCancelled, &mcp.CancelledParams{RequestID: call.id.Raw(), Reason: sessionEndedReason}); err == nil {
				out = append(out, note)
			}
		}
	}
	for uri := range c.subs {
		if p.releaseLocked(c, uri) && inc != nil {
			if req, err := p.ownCallLocked(inc, methodUnsubscribe, &mcp.UnsubscribeParams{URI: uri}, uri); err == nil {
				out = append(out, req)
			}
		}
	}
	p.mu.Unlock()
	for _, msg := range out {
		if !p.writeProcess(inc, msg) {
			return
		}
	}
}
