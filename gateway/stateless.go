package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/mcphttp"
	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
	"github.com/switchboard-mcp/switchboard/internal/sessionless"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
	"github.com/switchboard-mcp/switchboard/policy"
)

// sessionlessVersion is the first MCP version without sessions (see internal/sessionless).
const sessionlessVersion = sessionless.Version

// statelessRequestKey carries a sessionless request's *statelessRequest from the front
// door to the go-sdk server that serves it.
type statelessRequestKey struct{}

// statelessRequest is what the front door decided about a sessionless request before
// go-sdk reads it: who the caller is, which server it may use, and the client the
// request is relayed through.
type statelessRequest struct {
	key    connector.Key
	caller *identity.Caller
	srv    *server
	client *upstreamClient
}

// newStatelessHandler returns the go-sdk handler that serves the sessionless era's
// requests: go-sdk's stateless Streamable HTTP server checks the protocol version, the
// Mcp-Method and Mcp-Name headers against the body and answers server/discover; its
// receiving middleware relays every other request to the server.
func (g *Gateway) newStatelessHandler() http.Handler {
	return sessionless.NewHandler(func(r *http.Request) *mcp.Server {
		if sr, ok := r.Context().Value(statelessRequestKey{}).(*statelessRequest); ok {
			return sr.client.front(g)
		}
		return nil
	}, g.opts.MaxMessageBytes)
}

// serveStateless relays one sessionless request of an authorized caller. Nothing it
// needs lives in this replica's memory beyond caches: any replica serves any request.
func (g *Gateway) serveStateless(w http.ResponseWriter, r *http.Request, key connector.Key, caller *identity.Caller, srv *server, body *mcpmsg.Body) {
	var id jsonrpc.ID
	if len(body.Messages) == 1 {
		id = body.Messages[0].ID
	}
	if body.Batch {
		mcphttp.WriteError(w, http.StatusBadRequest, id, jsonrpc.CodeInvalidRequest,
			"JSON-RPC batches are not part of MCP "+sessionlessVersion+"; send one message per request")
		return
	}
	release, ok := g.admitSessionless(w, caller, &body.Messages[0])
	if !ok {
		return
	}
	defer release()
	if !g.admitRate(w, caller, srv, key, 1) {
		return
	}
	if !srv.ready {
		g.metrics.refused.WithLabelValues(strconv.Itoa(http.StatusServiceUnavailable)).Inc()
		w.Header().Set("Retry-After", "5")
		mcphttp.WriteError(w, http.StatusServiceUnavailable, id, codeUnavailable,
			fmt.Sprintf("MCPServer %s is not Ready (%s): %s", key, srv.reason, srv.message))
		return
	}
	client, done, err := g.upstreamClients.acquire(r.Context(), key, caller, upstreamCaller(r, caller))
	if err != nil {
		g.refuseSession(w, id, caller, key.Namespace, []any{"server", key.Name}, err)
		return
	}
	defer done()
	sr := &statelessRequest{key: key, caller: caller, srv: srv, client: client}
	if g.serveToolCallDirectly(w, r, sr, &body.Messages[0]) {
		return
	}
	g.statelessHandler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), statelessRequestKey{}, sr)))
}

// front returns the go-sdk server that answers for c's server: its capabilities and
// instructions are the server's own, as the client session learned them.
func (c *upstreamClient) front(g *Gateway) *mcp.Server {
	c.frontOnce.Do(func() {
		c.frontServer = sessionless.NewFront(c.cs, c.key.server.String(), g.relayStateless)
	})
	return c.frontServer
}

// relayStateless is the front server's receiving middleware: the requests a server
// answers are judged and relayed to it; what belongs to the protocol itself
// (server/discover, subscriptions/listen) go-sdk answers.
func (g *Gateway) relayStateless(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		sr, ok := ctx.Value(statelessRequestKey{}).(*statelessRequest)
		if !ok {
			return next(ctx, method, req)
		}
		if method != "tools/call" && !sessionless.Relayed[method] {
			// What go-sdk answers itself (server/discover) answers the caller too.
			res, err := next(ctx, method, req)
			g.keepPrivate(res)
			return res, err
		}
		if method == "tools/call" {
			params, _ := req.GetParams().(*mcp.CallToolParamsRaw)
			var header http.Header
			if extra := req.GetExtra(); extra != nil {
				header = extra.Header
			}
			ctx, span, tt := g.startToolCallTrace(ctx, sr, header, params)
			res, err := g.relayToolCall(ctx, sr, req)
			tt.end(span, outcomeOf(res, err))
			return res, err
		}
		ctx, span := g.startStatelessSpan(ctx, method, req, target{key: sr.key, caller: sr.caller, version: sessionlessVersion})
		res, err := g.relayCall(ctx, sr, method, req)
		g.keepPrivate(res)
		if span != nil {
			endSpan(span, outcomeOf(res, err))
		}
		return res, err
	}
}

// keepPrivate makes the caching hints of res, an answer on one of the gateway's
// endpoints, say private when the endpoint requires authentication, whatever the server
// said (see sessionless.CacheScope).
func (g *Gateway) keepPrivate(res mcp.Result) {
	if g.opts.Authenticator != nil {
		sessionless.KeepPrivate(res)
	}
}

// startToolCallTrace starts the server span of a sessionless tools/call, named after its
// tool from the start when the server publishes it, in the trace of the params' _meta,
// else of header. It returns a nil span while tracing is off, and the call's records
// (see toolCallTrace), carried in the context it returns too, only when the span records.
func (g *Gateway) startToolCallTrace(ctx context.Context, sr *statelessRequest, header http.Header, params *mcp.CallToolParamsRaw) (context.Context, trace.Span, *toolCallTrace) {
	if !tracing.Enabled() {
		return ctx, nil, nil
	}
	if params == nil {
		params = &mcp.CallToolParamsRaw{}
	}
	published := g.server(sr.key).publishes(params.Name)
	ctx, span, record := g.startCallSpan(ctx, header, tracing.MetaOf(params.Meta), "tools/call", jsonrpc.ID{},
		target{key: sr.key, caller: sr.caller, version: sessionlessVersion}, params.Name, published)
	if record == nil {
		return ctx, span, nil
	}
	tt := &toolCallTrace{callSpans: callSpans{span: span, record: record}, published: published}
	return context.WithValue(ctx, toolCallTraceKey{}, tt), span, tt
}

// startStatelessSpan starts the server span of a request go-sdk decoded: its trace
// context comes from the params' _meta as go-sdk read it, else from the HTTP headers.
// It returns a nil span while tracing is off.
func (g *Gateway) startStatelessSpan(ctx context.Context, method string, req mcp.Request, t target) (context.Context, trace.Span) {
	if !tracing.Enabled() {
		return ctx, nil
	}
	var meta tracing.Meta
	if p := req.GetParams(); p != nil {
		meta = tracing.MetaOf(p.GetMeta())
	}
	var header http.Header
	if extra := req.GetExtra(); extra != nil {
		header = extra.Header
	}
	return g.startServerSpan(ctx, header, meta, method, jsonrpc.ID{}, t)
}

// outcomeOf is the outcome of a call go-sdk answers with res and err, as the audit
// line records it.
func outcomeOf(res mcp.Result, err error) string {
	if err != nil {
		if wire, ok := errors.AsType[*jsonrpc.Error](err); ok && wire.Code == codeRefused {
			return outcomeDenied
		}
		return outcomeUpstreamError
	}
	if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
		return outcomeToolError
	}
	return outcomeOK
}

// relayCall relays a request other than tools/call to the server, with the _meta
// the progress Rewriter makes of the client's, judges a tools/list answer, and records the call's
// metrics.
func (g *Gateway) relayCall(ctx context.Context, sr *statelessRequest, method string, req mcp.Request) (mcp.Result, error) {
	start := time.Now()
	if judged[method] && g.hasPolicies(sr.key.Namespace) {
		if err := g.judgeStatelessRead(ctx, sr, method, req, start); err != nil {
			return nil, err
		}
	}
	meta, done := g.upstreamClients.progress.Rewriter(ctx, req, sr.client.key.caller == "")
	defer done()
	ctx, client := startClientSpan(ctx, method, "", sr.key)
	res, err := sessionless.Call(ctx, sr.client.cs, method, req, func(in map[string]any) map[string]any {
		return tracing.InjectMeta(ctx, meta(in))
	})
	if client.IsRecording() {
		endSpan(client, outcomeOf(res, err))
	}
	if list, ok := res.(*mcp.ListToolsResult); ok && err == nil {
		params, _ := req.GetParams().(*mcp.ListToolsParams)
		err = g.judgeStatelessToolList(sr, list, params)
	}
	return g.settleStateless(sr, method, start, res, err)
}

// relayToolCall judges a tools/call against the server's tool policy and pins, relays it
// and audits it.
func (g *Gateway) relayToolCall(ctx context.Context, sr *statelessRequest, req mcp.Request) (mcp.Result, error) {
	start := time.Now()
	params, _ := req.GetParams().(*mcp.CallToolParamsRaw)
	if params == nil {
		params = &mcp.CallToolParamsRaw{}
	}
	c := &call{method: "tools/call", tool: params.Name, start: start, callSpans: callSpans{span: trace.SpanFromContext(ctx)}}
	// The records of the call's spans, which its caller (startToolCallTrace) ends; nil
	// unless its server span records.
	tt := toolCallTraceOf(ctx)
	q := g.statelessQuery(sr, policy.MethodToolsCall)
	q.tool, q.arguments = params.Name, params.Arguments
	q.observe = func(ctx context.Context, srv *server) string {
		if err := g.observePin(ctx, sr, srv); err != nil {
			return fmt.Sprintf("the tools of MCPServer %s are pinned (spec.tools.pinnedDigest) and could not be listed to judge them before the call: %s",
				sr.key, upstreamReason(err))
		}
		return ""
	}
	if tt != nil {
		q.record = tt.record
	}
	q.audit = func(outcome string, kv ...any) {
		g.metrics.call(sr.key, c.method, outcome, time.Since(start))
		g.auditStatelessCall(sr, c, outcome, kv...)
	}
	// A call a policy requires approval for is put to the client's user by
	// input_required (settleByInput).
	q.later = true
	v, ask := g.settleByInput(ctx, q, g.decide(ctx, q), roundOf(req, params), strings.HasPrefix(params.RequestState, inputStatePrefix))
	if ask != nil {
		return ask, nil
	}
	c.decided = verdictKV(v)
	if v.Effect == policy.EffectDeny {
		return nil, &jsonrpc.Error{Code: codeRefused, Message: v.Reason}
	}
	up := &mcp.CallToolParams{Name: params.Name}
	up.InputResponses, up.RequestState = forwardedInput(params)
	if len(params.Arguments) > 0 {
		up.Arguments = params.Arguments
	}
	meta, forget := g.upstreamMeta(ctx, sr, req, params.Meta)
	defer forget()
	if tt != nil {
		// Started only where it is ended (tt.end); without records ctx's span does not
		// record, and nor would the client span.
		tool := ""
		if tt.published {
			tool = params.Name
		}
		ctx, tt.client, tt.clientRecord = startUpstreamSpan(ctx, c.method, tool, sr.key)
	}
	up.Meta = tracing.InjectMeta(ctx, meta)
	var res *mcp.CallToolResult
	var err error
	target := bridgeTarget{key: sr.key, caller: sr.caller.Key, tool: params.Name, bridge: sr.client.inputs, cs: sr.client.cs}
	switch {
	case strings.HasPrefix(params.RequestState, inputStatePrefix):
		res, err = g.resumeBridged(ctx, target, params)
	case sr.client.key.caller != "" && takesInput(req):
		res, err = g.callBridged(ctx, target, up)
	default:
		// This goroutine only waits for the answer: the call goes out on it.
		res, err = sr.client.cs.CallTool(connector.WithWaitingWriter(ctx), up)
	}
	outcome := outcomeOK
	switch {
	case err != nil:
		outcome = outcomeUpstreamError
	case res.IsError:
		outcome = outcomeToolError
	}
	g.metrics.call(sr.key, c.method, outcome, time.Since(start))
	if tt != nil {
		tt.answered, tt.outcome = time.Now(), outcome
	}
	if ask, ok := authorizationInput(req, err); ok {
		// The person holds no grant for a perUser server: they are asked to authorize
		// it, and call again.
		g.auditStatelessCall(sr, c, outcome, "reason", connector.ReasonAuthorizationRequired)
		return ask, nil
	}
	if err != nil {
		// In the gateway's words, as a toolset's origin's failure is: the server's own
		// error text is its to choose.
		g.auditStatelessCall(sr, c, outcome, "reason", upstreamReason(err))
		return nil, upstreamError(sr.key, err)
	}
	g.auditStatelessCall(sr, c, outcome)
	return res, nil
}

// statelessQuery is what a sessionless request asks the gateway's decision about a
// request of method: the pin judges the upstream client that relays it, and its audit
// lines are written in the request's caller's name.
func (g *Gateway) statelessQuery(sr *statelessRequest, method string) *query {
	return &query{caller: sr.caller, server: sr.key, method: method, conn: &sr.client.pin, log: g.audit, who: statelessWho(sr)}
}

// statelessWho names a sessionless request's caller and server in an audit line.
func statelessWho(sr *statelessRequest) []any {
	return []any{"caller", sr.caller.Username, "namespace", sr.key.Namespace, "server", sr.key.Name, "era", sessionlessVersion}
}

// observePin has the pin judge the tools the server serves the upstream client that is
// to carry a call, unless a complete list through that client was judged already under
// the same pin (or its calls are refused anyway).
//
// Why: a sessionless request needs nothing one replica remembers. Through a session, a
// withheld list refuses the session's later calls because they share the session; a
// sessionless client's list and call share nothing, and may reach different replicas. So
// a call is judged on what the server serves the connection that carries it, as the
// session's would be on what its session was served: the gateway lists the tools itself
// where no list through this client was judged yet. The judgement is kept on the client
// (a cache any replica makes again by listing) until the pin changes, the server says
// its tools changed, or the client ends. A list that cannot be had fails the call: what
// the connection serves is not known to be the pinned tools.
func (g *Gateway) observePin(ctx context.Context, sr *statelessRequest, srv *server) error {
	if why, judged := sr.client.pin.state(srv.pinned); why != "" || judged {
		return nil
	}
	listed, err := sr.client.up.ListTools(ctx, sr.client.cs)
	if err != nil {
		return err
	}
	g.judgePin(pinCheck{srv: srv, conn: &sr.client.pin, audit: g.audit, who: statelessWho(sr),
		listed: sr.client.up.ConvertTools(listed), isList: true, complete: true})
	return nil
}

// judgeStatelessToolList judges a tools/list answer as the gateway's decision judges
// lists (judgeList): for a pinned server, an answer with tools that are not the pinned
// ones is withheld, and the client's calls refused; the tools the caller may not see
// (spec.tools, access policies) are removed.
func (g *Gateway) judgeStatelessToolList(sr *statelessRequest, res *mcp.ListToolsResult, params *mcp.ListToolsParams) error {
	_, shows, err := g.judgeList(g.statelessQuery(sr, ""), func() ([]connector.Tool, bool, error) {
		// Read again as the client's exact reader reads it (servedTools), as a session's
		// answer is.
		raw, err := json.Marshal(res.Tools)
		if err != nil {
			return nil, false, err
		}
		tools, _, err := servedTools(fmt.Appendf(nil, `{"tools":%s}`, raw))
		complete := (params == nil || params.Cursor == "") && res.NextCursor == ""
		return sr.client.up.ConvertTools(tools), complete, err
	})
	if err != nil {
		return err
	}
	kept := res.Tools[:0]
	for _, t := range res.Tools {
		if t != nil && shows(t.Name) {
			kept = append(kept, t)
		}
	}
	res.Tools = kept
	sr.client.paramHeaders.Learn(sr.client.front(g), res.Tools)
	return nil
}

// judgeStatelessRead has the gateway's decision judge a sessionless resources/read or
// prompts/get, on the params go-sdk decoded and forwards.
func (g *Gateway) judgeStatelessRead(ctx context.Context, sr *statelessRequest, method string, req mcp.Request, start time.Time) error {
	q := g.statelessQuery(sr, method)
	switch p := req.GetParams().(type) {
	case *mcp.ReadResourceParams:
		q.resource = p.URI
	case *mcp.GetPromptParams:
		q.prompt = p.Name
		if len(p.Arguments) > 0 {
			q.arguments, _ = json.Marshal(p.Arguments)
		}
	}
	q.audit = func(outcome string, kv ...any) {
		g.metrics.call(sr.key, method, outcome, time.Since(start))
		g.audit.Info("Request refused", append(append(statelessWho(sr), "method", method), kv...)...)
	}
	if v := g.decide(ctx, q); v.Effect == policy.EffectDeny {
		return &jsonrpc.Error{Code: codeRefused, Message: v.Reason}
	}
	return nil
}

// settleStateless records a relayed call's metrics and turns its error into the one the
// client gets.
func (g *Gateway) settleStateless(sr *statelessRequest, method string, start time.Time, res mcp.Result, err error) (mcp.Result, error) {
	outcome := outcomeOK
	if err != nil {
		outcome = outcomeUpstreamError
	}
	g.metrics.call(sr.key, method, outcome, time.Since(start))
	if err != nil {
		return nil, upstreamError(sr.key, err)
	}
	return res, nil
}

// upstreamError is the error a client gets for a call the server failed: the server's
// own JSON-RPC error as it sent it (scrubbed by the connector), or the gateway's.
func upstreamError(key connector.Key, err error) error {
	if wire, ok := errors.AsType[*jsonrpc.Error](err); ok {
		return wire
	}
	return &jsonrpc.Error{Code: codeUnavailable, Message: fmt.Sprintf("MCPServer %s: %v", key, err)}
}

// auditStatelessCall writes the audit line of one sessionless tools/call. Who called
// which server goes into the line itself rather than into a logger derived per call with
// WithValues, which would copy the audit logger's state on every request.
func (g *Gateway) auditStatelessCall(sr *statelessRequest, c *call, outcome string, extra ...any) {
	kv := append([]any{"caller", sr.caller.Username, "namespace", sr.key.Namespace, "server", sr.key.Name,
		"tool", clip(c.tool), "outcome", outcome,
		"duration", time.Since(c.start).Round(time.Microsecond).String(), "era", sessionlessVersion}, extra...)
	if len(extra) == 0 {
		kv = append(kv, c.decided...)
	}
	if c.span != nil && c.span.SpanContext().HasTraceID() {
		kv = append(kv, "traceID", c.span.SpanContext().TraceID().String())
	}
	g.audit.Info("Tool call", kv...)
}

// upstreamMeta returns the _meta to send the server in place of the client's (see
// sessionless.Progress.Meta): the protocol's own keys only where the server speaks the
// sessionless era too, and a progress token of the gateway's own.
func (g *Gateway) upstreamMeta(ctx context.Context, sr *statelessRequest, req mcp.Request, in map[string]any) (meta map[string]any, forget func()) {
	return g.upstreamClients.progress.Meta(ctx, req, in, sr.client.key.caller == "")
}

// toolsetCaller names one caller's use of one toolset.
type toolsetCaller struct {
	toolset connector.Key
	caller  string // identity.Caller.Key
}

// statelessToolsetKey carries the toolset session that serves a sessionless request from
// the front door to go-sdk's handler.
type statelessToolsetKey struct{}

// newStatelessToolsetHandler returns the go-sdk handler that serves the sessionless
// era's requests to toolsets: each is served by the go-sdk server of the caller's
// sessionless toolset session, whose tools are the toolset's the caller may use.
func (g *Gateway) newStatelessToolsetHandler() http.Handler {
	return mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if s, ok := r.Context().Value(statelessToolsetKey{}).(*toolsetSession); ok {
			return s.server
		}
		return nil
	}, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		MaxRequestBodyBytes:          int64(g.opts.MaxMessageBytes),
		DisableLocalhostProtection:   true,
		PropagateRequestCancellation: true,
	})
}

// serveToolsetStateless serves one sessionless request to a toolset. The caller's
// requests share a toolset session on this replica (its tools and its origins' upstream
// sessions, a cache any replica rebuilds), counted against the caller's session quotas
// and ended when idle like any other.
func (g *Gateway) serveToolsetStateless(w http.ResponseWriter, r *http.Request, key connector.Key, caller *identity.Caller, body *mcpmsg.Body) {
	var id jsonrpc.ID
	if len(body.Messages) == 1 {
		id = body.Messages[0].ID
	}
	if body.Batch {
		mcphttp.WriteError(w, http.StatusBadRequest, id, jsonrpc.CodeInvalidRequest,
			"JSON-RPC batches are not part of MCP "+sessionlessVersion+"; send one message per request")
		return
	}
	release, ok := g.admitSessionless(w, caller, &body.Messages[0])
	if !ok {
		return
	}
	defer release()
	s, err := g.sessionlessToolsetSession(key, caller)
	if err != nil {
		g.refuseSession(w, id, caller, key.Namespace, []any{"toolset", key.Name}, err)
		return
	}
	if !s.activity.Begin() {
		mcphttp.WriteError(w, http.StatusServiceUnavailable, id, codeUnavailable, "the toolset's session for this caller is ending; retry")
		return
	}
	defer s.activity.End()
	s.presentCaller(upstreamCaller(r, caller))
	g.statelessToolsetHandler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), statelessToolsetKey{}, s)))
}

// sessionlessToolsetSession returns the caller's sessionless session with the toolset,
// opening one when there is none.
func (g *Gateway) sessionlessToolsetSession(key connector.Key, caller *identity.Caller) (*toolsetSession, error) {
	tc := toolsetCaller{toolset: key, caller: caller.Key}
	g.mu.RLock()
	s := g.sessionlessToolsets[tc]
	g.mu.RUnlock()
	if s != nil && !s.isEnding() {
		return s, nil
	}
	s, err := g.openToolsetSession(key, caller, true)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	if other := g.sessionlessToolsets[tc]; other != nil && !other.isEnding() {
		// Another request opened one first: use it, and give this one back.
		g.mu.Unlock()
		s.end(errClientEnded)
		return other, nil
	}
	g.sessionlessToolsets[tc] = s
	g.mu.Unlock()
	return s, nil
}
