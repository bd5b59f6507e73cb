package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/mcphttp"
	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
	"github.com/switchboard-mcp/switchboard/internal/sessionless"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
	"github.com/switchboard-mcp/switchboard/policy"
	"github.com/switchboard-mcp/switchboard/relay"
)

// errorLinger is how long the client side of a session stays open after the session
// ended for a reason the client did not choose, so that its calls learn that reason.
const errorLinger = 250 * time.Millisecond

// session is one client session: a go-sdk Streamable HTTP server transport facing the
// client, an upstream session the connector built facing the server, and a relay.Relay
// between them whose hook enforces the server's tool policy and writes the audit log.
type session struct {
	g        *Gateway
	id       string // Mcp-Session-Id; a bearer secret, never logged
	traceID  string // what spans record as mcp.session.id: a digest of id
	seq      uint64 // names the session in logs
	key      connector.Key
	caller   *identity.Caller
	audit    logr.Logger
	started  time.Time
	upstream *connector.Upstream

	transport *mcp.StreamableServerTransport
	client    mcp.Connection

	mu          sync.Mutex
	calls       map[jsonrpc.ID]*call // client calls the server has not answered
	initID      jsonrpc.ID
	initialized bool
	// initRefusal is the connector's reason for an initialize it answered with an
	// error (a refused token exchange, say), for the audit line of the session's end.
	initRefusal string
	version     string // the protocol version the server answered initialize with
	ending      bool
	reason      error

	activity *mcphttp.Activity // requests in flight, for idle reaping

	// elicits is true when the client's initialize declared form elicitation, which
	// approvals are asked with; approvals are the gateway's own elicitation requests
	// waiting for the client's answer.
	elicits   bool
	approvals map[jsonrpc.ID]chan *jsonrpc.Response

	pin pinWatch // what the pin remembers of the session's upstream session

	redelivery *mcphttp.Redelivery // the server's messages waiting for the client's stream
	done       chan struct{}       // closed once the session ends
}

// call is a client call on its way to the server.
type call struct {
	method string
	tool   string // for tools/call
	// firstPage is true for a tools/list without a cursor.
	firstPage bool
	// decided are the audit line's fields of the access policy that let the call run.
	decided []any
	start   time.Time
	callSpans
}

// finish ends the call's spans with outcome.
func (c *call) finish(outcome string) { c.end(outcome, outcome, time.Time{}) }

// finishAnswered is finish for a call the server answered at answered, which is when
// its client span ends (the server span ends now, with the answer written).
func (c *call) finishAnswered(outcome string, answered time.Time) { c.end(outcome, outcome, answered) }

func newSession(g *Gateway, id string, seq uint64, key connector.Key, caller *identity.Caller, up *connector.Upstream) (*session, error) {
	s := &session{
		g:         g,
		id:        id,
		traceID:   tracing.SessionID(id),
		seq:       seq,
		key:       key,
		caller:    caller,
		started:   time.Now(),
		upstream:  up,
		transport: &mcp.StreamableServerTransport{SessionID: id},
		calls:     make(map[jsonrpc.ID]*call),
		approvals: make(map[jsonrpc.ID]chan *jsonrpc.Response),

		done: make(chan struct{}),
	}
	s.activity = mcphttp.NewActivity(g.opts.IdleTimeout, func() { s.end(errIdle) })
	s.audit = g.audit.WithValues("caller", caller.Username, "namespace", key.Namespace, "server", key.Name, "session", seq)
	client, err := s.transport.Connect(context.Background())
	if err != nil {
		return nil, fmt.Errorf("connecting the client transport: %w", err)
	}
	s.client = client
	s.redelivery = mcphttp.NewRedelivery(client, s.done, g.log.WithValues("session", seq))
	return s, nil
}

// start begins relaying.
func (s *session) start() {
	r := relay.New(s.client, s.upstream, relay.Options{
		Hook:        s.hook,
		WriteFailed: s.writeFailed,
		Closed:      s.closed,
	})
	go r.Run(context.Background())
	s.g.watchAccess(s.caller, resourceServers, s.key, s.isEnding, func() { s.end(errAccessRevoked) })
	s.audit.Info("Session started", "transport", string(s.upstream.Transport()))
}

// hook is the session's policy on the relay: calls from the client are checked against
// the server's tool policy and remembered; answers from the server settle them, are
// filtered (tools/list) and audited (tools/call).
func (s *session) hook(ctx context.Context, from relay.Side, msg jsonrpc.Message) relay.Verdict {
	if from == relay.Server {
		if resp, ok := msg.(*jsonrpc.Response); ok {
			return s.answer(resp)
		}
		return relay.Forward(msg)
	}
	if resp, ok := msg.(*jsonrpc.Response); ok && s.answersApproval(resp) {
		return relay.Drop()
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return relay.Forward(msg)
	}
	return s.request(ctx, req)
}

// request decides a client call.
func (s *session) request(ctx context.Context, req *jsonrpc.Request) relay.Verdict {
	c := &call{method: req.Method, start: time.Now()}
	traced := tracing.Enabled()
	var params *mcpmsg.Params
	var paramsErr error
	if traced || req.Method == "tools/list" || req.Method == "tools/call" || judged[req.Method] && s.g.hasPolicies(s.key.Namespace) {
		// The front door checked the body; this is the one decoding of params the
		// decisions (and the call's trace context) are made on, and req.Params, the bytes
		// it read, are what the server is sent.
		params, paramsErr = mcpmsg.DecodeParams(req.Params)
	}
	published := false
	if traced && paramsErr == nil {
		// A call's span is named after its tool from the start, when the server
		// publishes it.
		tool := ""
		if req.Method == "tools/call" {
			tool = params.Name
			published = s.g.server(s.key).publishes(tool)
		}
		ctx, c.span, c.record = s.g.startCallSpan(ctx, requestHeader(req.Extra),
			tracing.Meta{Traceparent: params.Traceparent, Tracestate: params.Tracestate, Baggage: params.Baggage},
			req.Method, req.ID, target{key: s.key, caller: s.caller, session: s.traceID, version: s.negotiatedVersion()},
			tool, published)
	}
	if req.Method == "tools/list" {
		if paramsErr != nil {
			return relay.Answer(relay.ErrorResponse(req.ID, jsonrpc.CodeInvalidParams, paramsErr))
		}
		c.firstPage = params.Cursor == ""
	}
	if req.Method == "tools/call" {
		if paramsErr != nil {
			s.g.metrics.call(s.key, c.method, outcomeDenied, time.Since(c.start))
			s.auditCall(req.ID, c, outcomeDenied, "reason", "invalid params")
			return relay.Answer(relay.ErrorResponse(req.ID, jsonrpc.CodeInvalidParams, paramsErr))
		}
		c.tool = params.Name
	}
	if judged[req.Method] && (req.Method == "tools/call" || s.g.hasPolicies(s.key.Namespace)) {
		if paramsErr != nil {
			c.finish(outcomeDenied)
			return relay.Answer(relay.ErrorResponse(req.ID, jsonrpc.CodeInvalidParams, paramsErr))
		}
		q := s.ask(req, c, params)
		v := s.g.decide(ctx, q)
		c.decided = verdictKV(v)
		switch v.Effect {
		case policy.EffectDeny:
			c.finish(outcomeDenied)
			return relay.Answer(relay.ErrorResponse(req.ID, codeRefused, errors.New(v.Reason)))
		case policy.EffectRequireApproval:
			// The client's answer comes in on the relay's loop this hook runs on: the
			// call waits for it on a goroutine of its own.
			go s.approveThenForward(ctx, req, c, params, published, q, v)
			return relay.Drop()
		}
	}
	return s.forward(ctx, req, c, params, published).verdict()
}

// approveThenForward asks the client's user to approve a call (settle), and forwards it
// once they have, or answers it with the refusal.
func (s *session) approveThenForward(ctx context.Context, req *jsonrpc.Request, c *call, params *mcpmsg.Params, published bool, q *query, v policy.Verdict) {
	v = s.g.settle(ctx, q, v)
	c.decided = verdictKV(v)
	if v.Effect == policy.EffectDeny {
		c.finish(outcomeDenied)
		s.writeClient(relay.ErrorResponse(req.ID, codeRefused, errors.New(v.Reason)))
		return
	}
	out := s.forward(ctx, req, c, params, published)
	if out.answer != nil {
		s.writeClient(out.answer)
		return
	}
	if err := s.upstream.Write(out.ctx, out.msg); err != nil {
		s.writeFailed(out.ctx, relay.Server, out.msg, err)
	}
}

// forward registers a call the decision let through and forwards it to the server, or
// answers it when the session cannot take it.
func (s *session) forward(ctx context.Context, req *jsonrpc.Request, c *call, params *mcpmsg.Params, published bool) sending {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ending:
		c.finish(outcomeUpstreamError)
		return answering(relay.ErrorResponse(req.ID, codeUnavailable, s.reason))
	case s.calls[req.ID] != nil:
		// Its answer could not be told from the pending call's, and it would slip past
		// MaxPendingCalls.
		c.finish(outcomeDenied)
		return answering(relay.ErrorResponse(req.ID, jsonrpc.CodeInvalidRequest,
			fmt.Errorf("request id %s is already waiting for an answer in this session", clip(fmt.Sprint(req.ID.Raw())))))
	case len(s.calls) >= s.g.opts.MaxPendingCalls:
		c.finish(outcomeDenied)
		return answering(relay.ErrorResponse(req.ID, codeUnavailable,
			fmt.Errorf("more than %d calls of this session are waiting for the server", s.g.opts.MaxPendingCalls)))
	}
	if req.Method == "initialize" {
		s.initID = req.ID
		s.elicits = elicitsForm(req.Params)
	}
	s.calls[req.ID] = c
	if c.span == nil {
		return sending{ctx: ctx, msg: req}
	}
	tool := ""
	if published {
		tool = c.tool
	}
	ctx, c.client, c.clientRecord = startUpstreamSpan(ctx, req.Method, tool, s.key)
	// The server continues the trace from _meta as well as from the HTTP headers the
	// connector sets: the caller's trace context in _meta gives way to the gateway's.
	if rewritten, err := tracing.MetaParams(req.Params, params.MetaEnd, tracing.MetaOfContext(ctx)); err == nil {
		forwarded := *req
		forwarded.Params = rewritten
		return sending{ctx: ctx, msg: &forwarded}
	}
	return sending{ctx: ctx, msg: req}
}

// sending is what forward decided: msg to send the server in ctx, or answer to write
// back to the client.
type sending struct {
	ctx    context.Context
	msg    jsonrpc.Message
	answer *jsonrpc.Response
}

func answering(resp *jsonrpc.Response) sending { return sending{answer: resp} }

// verdict is the relay's verdict that does what s says.
func (s sending) verdict() relay.Verdict {
	if s.answer != nil {
		return relay.Answer(s.answer)
	}
	return relay.ForwardContext(s.ctx, s.msg)
}

// judged are the methods of a client's call the gateway's decision judges (decide).
var judged = map[string]bool{
	policy.MethodToolsCall: true, policy.MethodResourcesRead: true, policy.MethodPromptsGet: true,
}

// ask is what the session asks the gateway's decision about a call: its audit
// line (and its count) are the session's, and the pin judges the session's upstream.
func (s *session) ask(req *jsonrpc.Request, c *call, params *mcpmsg.Params) *query {
	q := &query{caller: s.caller, server: s.key, method: req.Method, arguments: params.Arguments,
		conn: &s.pin, log: s.audit, record: c.record, later: true, approve: s.approver()}
	switch req.Method {
	case policy.MethodToolsCall:
		q.tool = params.Name
		q.audit = func(outcome string, kv ...any) {
			s.g.metrics.call(s.key, c.method, outcome, time.Since(c.start))
			s.auditCall(req.ID, c, outcome, kv...)
		}
	case policy.MethodResourcesRead:
		q.resource = params.URI
	case policy.MethodPromptsGet:
		q.prompt = params.Name
	}
	if req.Method != policy.MethodToolsCall {
		q.audit = func(outcome string, kv ...any) {
			s.g.metrics.call(s.key, c.method, outcome, time.Since(c.start))
			s.audit.Info("Request refused", append([]any{"method", req.Method, "id", clip(fmt.Sprint(req.ID.Raw()))}, kv...)...)
		}
	}
	return q
}

// judgeToolList judges a tools/list result as the gateway's decision judges lists
// (judgeList): for a pinned server, a list with a tool that is not pinned, or changed, is
// withheld, and the session's calls are refused from then on; the tools the caller may
// not see (spec.tools, access policies) are removed.
func (s *session) judgeToolList(result json.RawMessage, firstPage bool) (json.RawMessage, error) {
	srv, shows, err := s.g.judgeList(&query{caller: s.caller, server: s.key, conn: &s.pin, log: s.audit},
		func() ([]connector.Tool, bool, error) {
			tools, next, err := servedTools(result)
			return s.upstream.ConvertTools(tools), firstPage && next == "", err
		})
	if err != nil {
		return nil, err
	}
	if !s.g.filtersList(srv) {
		return result, nil
	}
	return filterToolList(result, shows)
}

// answer settles the call resp answers: tools/list answers lose the tools the server's
// policy hides, and tools/call answers are audited.
func (s *session) answer(resp *jsonrpc.Response) relay.Verdict {
	c := s.settle(resp)
	if c == nil {
		return relay.Forward(resp)
	}
	outcome := outcomeOK
	if resp.Error != nil {
		outcome = outcomeUpstreamError
	}
	switch c.method {
	case "tools/list":
		if resp.Error == nil {
			if judged, err := s.judgeToolList(resp.Result, c.firstPage); err == nil {
				resp.Result = judged
			} else {
				outcome = outcomeUpstreamError
				resp = relay.ErrorResponse(resp.ID, codeUnavailable, err)
			}
		}
	case "tools/call":
		if resp.Error == nil && isToolError(resp.Result) {
			outcome = outcomeToolError
		}
		s.auditCall(resp.ID, c, outcome)
	}
	if resp.Error == nil && cacheable[c.method] && s.g.opts.Authenticator != nil {
		resp.Result = keepPrivateRaw(resp.Result)
	}
	s.g.metrics.call(s.key, c.method, outcome, time.Since(c.start))
	if c.span == nil && c.client == nil {
		return relay.Forward(resp)
	}
	// The spans end once the answer is on its way to the client: handing them to the
	// span processor need not delay it, and the server span then covers the write too.
	answered := time.Now()
	return relay.ForwardThen(resp, func() { c.finishAnswered(outcome, answered) })
}

// settle forgets the call resp answers and returns it, or nil when the client did not
// make it.
func (s *session) settle(resp *jsonrpc.Response) *call {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls[resp.ID]
	delete(s.calls, resp.ID)
	if s.initID.IsValid() && resp.ID == s.initID && resp.Error != nil {
		s.initRefusal = connector.ReasonOf(resp.Error)
	}
	if s.initID.IsValid() && resp.ID == s.initID && resp.Error == nil {
		s.initialized = true
		var result struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		// Read as the client reads it (exact key, no duplicates): batches are judged on
		// it. A result read otherwise leaves the version unknown, which refuses batches.
		if mcpmsg.Check(resp.Result) == nil && jsonv2.Unmarshal(resp.Result, &result) == nil {
			s.version = result.ProtocolVersion
		}
	}
	return c
}

// negotiatedVersion is the protocol version of the session; empty before initialize.
func (s *session) negotiatedVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// auditCall writes the audit line of one tools/call: never its arguments or result; the
// trace id of its span when it has one.
func (s *session) auditCall(id jsonrpc.ID, c *call, outcome string, extra ...any) {
	kv := make([]any, 0, 10+len(extra)) // with room for the trace id
	kv = append(kv, "tool", clip(c.tool), "outcome", outcome,
		"duration", time.Since(c.start).Round(time.Microsecond).String(), "id", clip(fmt.Sprint(id.Raw())))
	kv = append(kv, extra...)
	if len(extra) == 0 {
		kv = append(kv, c.decided...)
	}
	if c.span != nil && c.span.SpanContext().HasTraceID() {
		kv = append(kv, "traceID", c.span.SpanContext().TraceID().String())
	}
	s.audit.Info("Tool call", kv...)
}

// writeFailed handles a message the relay could not deliver. A call the server could not
// be sent is answered with the reason; the client side stops once the session ends.
func (s *session) writeFailed(_ context.Context, to relay.Side, msg jsonrpc.Message, err error) bool {
	if to == relay.Client {
		if s.isEnding() {
			return true
		}
		s.redelivery.Add(msg)
		return false
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return false
	}
	c := s.settle(&jsonrpc.Response{ID: req.ID})
	if c != nil {
		s.g.metrics.call(s.key, c.method, outcomeUpstreamError, time.Since(c.start))
		if c.method == "tools/call" {
			s.auditCall(req.ID, c, outcomeUpstreamError, "reason", err.Error())
		}
		c.finish(outcomeUpstreamError)
	}
	s.replyError(req.ID, fmt.Errorf("MCPServer %s: %w", s.key, err))
	return false
}

// closed handles a side the relay can no longer read: either side ending ends the
// session.
func (s *session) closed(side relay.Side, err error) {
	if side == relay.Server {
		s.end(fmt.Errorf("MCPServer %s: %w", s.key, err))
		return
	}
	s.end(errClientEnded)
}

// approvalTimeout bounds how long a call waits for its user's approval.
const approvalTimeout = 10 * time.Minute

// writeClient writes the gateway's own message to the client.
func (s *session) writeClient(msg jsonrpc.Message) {
	if err := s.client.Write(context.Background(), msg); err != nil {
		s.g.log.V(1).Info("Could not write to the client", "session", s.seq, "reason", err.Error())
	}
}

// approver returns how the session asks its client's user to approve a call: a form
// elicitation (elicitation/create) of the gateway's own; nil when the client did not
// declare form elicitation.
func (s *session) approver() func(context.Context, approval) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.elicits {
		return nil
	}
	return s.elicitApproval
}

// elicitApproval sends the client an elicitation/create asking its user to approve a,
// and waits for the answer (at most approvalTimeout, and no longer than the session).
func (s *session) elicitApproval(ctx context.Context, a approval) error {
	params, err := json.Marshal(map[string]any{"message": a.message(), "requestedSchema": approvalSchema})
	if err != nil {
		return err
	}
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	id, err := jsonrpc.MakeID(fmt.Sprintf("switchboard-approval-%x", suffix))
	if err != nil {
		return err
	}
	answer := make(chan *jsonrpc.Response, 1)
	s.mu.Lock()
	if s.ending || len(s.approvals) >= s.g.opts.MaxPendingCalls {
		s.mu.Unlock()
		return fmt.Errorf("more than %d approvals of this session are waiting for the user", s.g.opts.MaxPendingCalls)
	}
	s.approvals[id] = answer
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.approvals, id)
		s.mu.Unlock()
	}()
	if err := s.client.Write(ctx, &jsonrpc.Request{ID: id, Method: "elicitation/create", Params: params}); err != nil {
		return fmt.Errorf("the approval request could not be sent: %w", err)
	}
	timer := time.NewTimer(approvalTimeout)
	defer timer.Stop()
	var resp *jsonrpc.Response
	select {
	case resp = <-answer:
	case <-timer.C:
		return fmt.Errorf("the user did not answer within %s", approvalTimeout)
	case <-s.done:
		return errors.New("the session ended")
	}
	if resp.Error != nil {
		if wire, ok := errors.AsType[*jsonrpc.Error](resp.Error); ok {
			return fmt.Errorf("the client answered the approval request with JSON-RPC error %d", wire.Code)
		}
		return errors.New("the client answered the approval request with an error")
	}
	var res mcp.ElicitResult
	// Read as the client wrote it: exact member names, no duplicates.
	if err := mcpmsg.Check(resp.Result); err != nil {
		return fmt.Errorf("the client's answer to the approval request is malformed: %w", err)
	}
	if err := jsonv2.Unmarshal(resp.Result, &res); err != nil {
		return fmt.Errorf("the client's answer to the approval request is malformed: %w", err)
	}
	return approvalAnswer(&res, nil)
}

// answersApproval hands resp, a message of the client, to the approval it answers, and
// reports whether it answered one.
func (s *session) answersApproval(resp *jsonrpc.Response) bool {
	s.mu.Lock()
	answer, ok := s.approvals[resp.ID]
	delete(s.approvals, resp.ID)
	s.mu.Unlock()
	if ok {
		answer <- resp
	}
	return ok
}

// elicitsForm reports whether the params of a client's initialize declare form
// elicitation (an elicitation capability without form or url means form).
func elicitsForm(params json.RawMessage) bool {
	var p struct {
		Capabilities struct {
			Elicitation *struct {
				Form *struct{} `json:"form"`
				URL  *struct{} `json:"url"`
			} `json:"elicitation"`
		} `json:"capabilities"`
	}
	if jsonv2.Unmarshal(params, &p) != nil || p.Capabilities.Elicitation == nil {
		return false
	}
	e := p.Capabilities.Elicitation
	return e.Form != nil || e.URL == nil
}

// notifyClient sends the client a notification of the gateway's own.
func (s *session) notifyClient(n *jsonrpc.Request) {
	if err := s.client.Write(context.Background(), n); err != nil {
		s.g.log.V(1).Info("Could not notify the client", "session", s.seq, "method", n.Method, "reason", err.Error())
	}
}

func (s *session) replyError(id jsonrpc.ID, reason error) {
	if err := s.client.Write(context.Background(), relay.ErrorResponse(id, codeUnavailable, reason)); err != nil {
		s.g.log.V(1).Info("Could not tell the client why its call failed", "session", s.seq, "reason", err.Error())
	}
}

func (s *session) isEnding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ending
}

func (s *session) isInitialized() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.initialized
}

// beginRequest marks a client request in flight, which holds off idle reaping; false
// once the session is ending.
func (s *session) beginRequest() bool { return !s.isEnding() && s.activity.Begin() }

// endRequest marks a client request done.
func (s *session) endRequest() { s.activity.End() }

// end ends the session for reason; only the first call counts. Calls the server still
// owes are answered with the reason, later requests get 404 (so the client starts a new
// session), and the upstream session is closed.
func (s *session) end(reason error) {
	s.mu.Lock()
	if s.ending {
		s.mu.Unlock()
		return
	}
	s.ending, s.reason = true, reason
	s.activity.Stop()
	close(s.done)
	pending := s.calls
	s.calls = nil
	// A session whose initialize the connector refused ends for that reason, whoever
	// ends it: the gateway finding it uninitialized, or the client going first.
	why := reason.Error()
	if !s.initialized && s.initRefusal != "" {
		why += ": initialize was refused: " + s.initRefusal
	}
	s.mu.Unlock()

	s.g.forget(s)
	for id, c := range pending {
		s.g.metrics.call(s.key, c.method, outcomeUpstreamError, time.Since(c.start))
		if c.method == "tools/call" {
			s.auditCall(id, c, outcomeUpstreamError, "reason", reason.Error())
		}
		c.finish(outcomeUpstreamError)
	}
	if errors.Is(reason, errClientEnded) {
		_ = s.client.Close()
	} else {
		for id := range pending {
			s.replyError(id, reason)
		}
		time.AfterFunc(errorLinger, func() { _ = s.client.Close() })
	}
	go func() { _ = s.upstream.Close() }()
	s.audit.Info("Session ended", "reason", why,
		"duration", time.Since(s.started).Round(time.Millisecond).String())
}

// filterToolList removes from a tools/list result the tools shows does not show, keeping
// every other field of the result and of each tool as the server sent it.
func filterToolList(result json.RawMessage, shows func(tool string) bool) (json.RawMessage, error) {
	// Read as the client reads it: no member names two readers could take apart, and
	// exact-case names.
	if err := mcpmsg.Check(result); err != nil {
		return nil, fmt.Errorf("malformed tools/list result from the server: %w", err)
	}
	var fields map[string]jsontext.Value
	if err := jsonv2.Unmarshal(result, &fields); err != nil {
		return nil, fmt.Errorf("malformed tools/list result from the server: %w", err)
	}
	var tools []jsontext.Value
	if raw, ok := fields["tools"]; ok {
		if err := jsonv2.Unmarshal(raw, &tools); err != nil {
			return nil, fmt.Errorf("malformed tools/list result from the server: %w", err)
		}
	}
	kept := tools[:0]
	for _, t := range tools {
		var tool struct {
			Name string `json:"name"`
		}
		if jsonv2.Unmarshal(t, &tool) == nil && shows(tool.Name) {
			kept = append(kept, t)
		}
	}
	raw, err := jsonv2.Marshal(kept)
	if err != nil {
		return nil, err
	}
	fields["tools"] = raw
	return jsonv2.Marshal(fields, jsonv2.Deterministic(true))
}

// cacheable are the methods whose results carry caching hints (ttlMs, cacheScope).
var cacheable = map[string]bool{
	"tools/list": true, "resources/list": true, "resources/templates/list": true,
	"prompts/list": true, "resources/read": true, "server/discover": true,
}

// keepPrivateRaw makes the cacheScope of a result the server sent a session say private,
// as sessionless.KeepPrivate does for the sessionless era: the session's client is one
// authenticated caller. The result is read as leniently as any client might read it
// (duplicate members, the last of which a Go client keeps; invalid UTF-8), and every
// member a client could take for cacheScope (any spelling that folds to it) gives way
// to one cacheScope: private. A result that is no object is left as it is.
func keepPrivateRaw(result json.RawMessage) json.RawMessage {
	var fields map[string]jsontext.Value
	lenient := jsonv2.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if jsonv2.Unmarshal(result, &fields, lenient) != nil {
		return result
	}
	private := jsontext.Value(`"` + sessionless.CachePrivate + `"`)
	changed := false
	for name, value := range fields {
		if !strings.EqualFold(name, "cacheScope") || (name == "cacheScope" && bytes.Equal(value, private)) {
			continue
		}
		delete(fields, name)
		changed = true
	}
	if !changed {
		return result
	}
	fields["cacheScope"] = private
	out, err := jsonv2.Marshal(fields, lenient, jsonv2.Deterministic(true))
	if err != nil {
		return result
	}
	return out
}

// isToolError reports whether a tools/call result says the tool failed (isError).
func isToolError(result json.RawMessage) bool {
	// Most results are not errors: they are not parsed in full to find that out.
	if !bytes.Contains(result, []byte(`"isError"`)) {
		return false
	}
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(result, &r) == nil && r.IsError
}

// clip bounds a name or id a client chose for the audit log: tracing.MaxName bytes (see
// audit.go).
func clip(s string) string { return tracing.Clip(s) }
