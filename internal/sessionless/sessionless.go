// Package sessionless holds what the gateway and the bridge share to serve MCP's
// sessionless era (2026-07-28 and later) in front of a go-sdk client session: go-sdk's
// stateless Streamable HTTP handler is the front door, a go-sdk server answers what
// belongs to the protocol itself (server/discover, subscriptions/listen, header checks)
// and its receiving middleware relays every other request through the client session.
//
// The package owns:
//   - telling a sessionless request from a session's (IsRequest);
//   - the front server, built from what the client session learnt of the server, and the
//     tools registered on it only so that go-sdk checks their Mcp-Param headers;
//   - relaying one request: its params copied, its _meta rewritten (Meta), and the
//     server's progress notifications routed back into the request's own response
//     stream, the only way back to a sessionless client (Progress);
//   - the cache scope of answers on an endpoint that authenticates (CacheScope,
//     KeepPrivate), which the catalogue shares.
//
// It must not: frame JSON-RPC or HTTP itself (go-sdk does both sides), keep policy (what
// may be called is the gateway's to judge, in its middleware), or keep anything a request
// needs beyond the request: any replica serves any sessionless request.
package sessionless

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/mcphttp"
	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
)

// Version is the first MCP version without sessions: every request stands alone, naming
// its protocol version and the client's capabilities in _meta.
const Version = "2026-07-28"

// ProtocolVersionHeader is the HTTP header naming a request's MCP protocol version.
const ProtocolVersionHeader = "MCP-Protocol-Version"

// The headers a sessionless request names its method, its target (a tool, prompt or
// resource) and its header-bound arguments in (canonical form, as http.Header keys them).
const (
	MethodHeader      = "Mcp-Method"
	NameHeader        = "Mcp-Name"
	ParamHeaderPrefix = "Mcp-Param-"
)

// ReservedMetaPrefix prefixes the _meta keys MCP itself defines.
const ReservedMetaPrefix = "io.modelcontextprotocol/"

// protocolVersionMeta is the _meta key of a sessionless request's protocol version.
const protocolVersionMeta = ReservedMetaPrefix + "protocolVersion"

// IsRequest reports whether a POST belongs to the sessionless era: it names no session
// and carries a protocol version of 2026-07-28 or later, in its header or in the _meta of
// its message (a message with no header is then refused by go-sdk's header checks, as the
// protocol requires).
func IsRequest(r *http.Request, body *mcpmsg.Body) bool {
	if r.Header.Get(mcphttp.SessionIDHeader) != "" {
		return false
	}
	if r.Header.Get(ProtocolVersionHeader) >= Version {
		return true
	}
	for _, m := range body.Messages {
		if m.Method != "" && strings.Contains(string(m.Params), protocolVersionMeta) {
			return true
		}
	}
	return false
}

// Speaks reports whether a client session negotiated the sessionless era with its server.
func Speaks(cs *mcp.ClientSession) bool {
	res := cs.InitializeResult()
	return res != nil && res.ProtocolVersion >= Version
}

// NewHandler returns go-sdk's stateless Streamable HTTP handler serving the server
// getServer returns for a request. The caller has checked the Host header and read the
// body within maxBodyBytes already (see mcphttp).
func NewHandler(getServer func(*http.Request) *mcp.Server, maxBodyBytes int) http.Handler {
	return mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		MaxRequestBodyBytes: int64(maxBodyBytes),
		// The front door answers rebinding itself (mcphttp.HostAllowed).
		DisableLocalhostProtection: true,
		// A client that goes away cancels its call upstream.
		PropagateRequestCancellation: true,
	})
}

// NewFront returns the go-sdk server that answers for the server cs is connected to: its
// capabilities, instructions and name are the server's own, as cs learnt them, and
// relay, its receiving middleware, answers the requests it relays.
func NewFront(cs *mcp.ClientSession, fallbackName string, relay mcp.Middleware) *mcp.Server {
	opts := &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{}}
	impl := &mcp.Implementation{Name: fallbackName}
	if res := cs.InitializeResult(); res != nil {
		if res.Capabilities != nil {
			caps := *res.Capabilities
			opts.Capabilities = &caps
		}
		opts.Instructions = res.Instructions
		if res.ServerInfo != nil {
			impl = res.ServerInfo
		}
	}
	front := mcp.NewServer(impl, opts)
	front.AddReceivingMiddleware(relay)
	return front
}

// Relayed are the methods a front server relays to its server: every request a server
// answers in the sessionless era. The rest (server/discover, subscriptions/listen,
// ping) belong to the protocol, which the front server answers itself.
var Relayed = map[string]bool{
	"tools/call": true, "tools/list": true,
	"resources/list": true, "resources/templates/list": true, "resources/read": true,
	"prompts/list": true, "prompts/get": true,
	"completion/complete": true,
}

// Call relays a request other than tools/call through cs: its params copied, with the
// _meta meta makes of the client's.
func Call(ctx context.Context, cs *mcp.ClientSession, method string, req mcp.Request, meta func(map[string]any) map[string]any) (mcp.Result, error) {
	switch method {
	case "tools/list":
		return relay(ctx, req, meta, cs.ListTools)
	case "resources/list":
		return relay(ctx, req, meta, cs.ListResources)
	case "resources/templates/list":
		return relay(ctx, req, meta, cs.ListResourceTemplates)
	case "resources/read":
		return relay(ctx, req, meta, cs.ReadResource)
	case "prompts/list":
		return relay(ctx, req, meta, cs.ListPrompts)
	case "prompts/get":
		return relay(ctx, req, meta, cs.GetPrompt)
	case "completion/complete":
		return relay(ctx, req, meta, cs.Complete)
	}
	return nil, errors.New("sessionless: " + method + " is not relayed by Call")
}

// relay sends the client's request with send, its params copied with the _meta meta
// makes of the client's.
func relay[P any, PP interface {
	*P
	mcp.Params
}, R mcp.Result](ctx context.Context, req mcp.Request, meta func(map[string]any) map[string]any, send func(context.Context, PP) (R, error)) (mcp.Result, error) {
	params := PP(new(P))
	if in, ok := req.GetParams().(PP); ok && in != nil {
		*params = *in
	}
	params.SetMeta(meta(params.GetMeta()))
	return send(ctx, params)
}

// ToolCall returns the params to relay a client's tools/call with: the client's, with
// the _meta meta makes of the client's.
func ToolCall(req mcp.Request, meta func(map[string]any) map[string]any) *mcp.CallToolParams {
	in, _ := req.GetParams().(*mcp.CallToolParamsRaw)
	if in == nil {
		in = &mcp.CallToolParamsRaw{}
	}
	up := &mcp.CallToolParams{Name: in.Name, InputResponses: in.InputResponses, RequestState: in.RequestState}
	if len(in.Arguments) > 0 {
		up.Arguments = in.Arguments
	}
	up.Meta = meta(in.Meta)
	return up
}

// Progress routes servers' progress notifications back to the requests that asked for
// them: a relayed request's progress token is replaced by one of the relay's own (so that
// no client can name another's), under which the server's progress reaches the request's
// own response stream until the request is answered.
type Progress struct {
	routes sync.Map // our token (string) -> *progressRoute
}

// progressRoute is where a server's progress notifications for one relayed request go:
// the front session of the request, under the token its client chose.
type progressRoute struct {
	// ctx is the request's own context in go-sdk's server, which sends what is sent in it
	// on that request's response stream.
	ctx     context.Context
	session *mcp.ServerSession
	token   any
}

// Meta returns the _meta to send the server in place of in, the client's: the protocol's
// own keys are dropped except where keepReserved (a server of the sessionless era, to
// which the client session adds the protocol version itself), and a progress token of
// p's own replaces the client's until forget.
func (p *Progress) Meta(ctx context.Context, req mcp.Request, in map[string]any, keepReserved bool) (meta map[string]any, forget func()) {
	forget = func() {}
	if len(in) == 0 {
		return nil, forget
	}
	meta = make(map[string]any, len(in))
	for k, v := range in {
		if strings.HasPrefix(k, ReservedMetaPrefix) && (!keepReserved || k == protocolVersionMeta) {
			continue
		}
		meta[k] = v
	}
	if token, ok := in["progressToken"]; ok && token != nil {
		if session, ok := req.GetSession().(*mcp.ServerSession); ok && session != nil {
			ours := "switchboard-" + rand.Text()
			meta["progressToken"] = ours
			p.routes.Store(ours, &progressRoute{ctx: ctx, session: session, token: token})
			forget = func() { p.routes.Delete(ours) }
		} else {
			delete(meta, "progressToken")
		}
	}
	return meta, forget
}

// Rewriter returns the meta function Call and ToolCall take, which rewrites the client's
// _meta as Meta does, and done, which forgets the progress route it made: call done once
// the request is answered.
func (p *Progress) Rewriter(ctx context.Context, req mcp.Request, keepReserved bool) (meta func(map[string]any) map[string]any, done func()) {
	forget := func() {}
	meta = func(in map[string]any) map[string]any {
		out, f := p.Meta(ctx, req, in, keepReserved)
		forget = f
		return out
	}
	return meta, func() { forget() }
}

// Relay passes a server's progress notification to the request whose token it carries;
// one for no request in flight is dropped.
func (p *Progress) Relay(_ context.Context, n *mcp.ProgressNotificationClientRequest) error {
	token, ok := n.Params.ProgressToken.(string)
	if !ok {
		return nil
	}
	v, ok := p.routes.Load(token)
	if !ok {
		return nil
	}
	route, _ := v.(*progressRoute)
	params := *n.Params
	params.ProgressToken = route.token
	return route.session.NotifyProgress(route.ctx, &params)
}

// ParamHeaders registers, on a front server, the tools of tools/list answers whose input
// schema binds arguments to Mcp-Param headers (x-mcp-header), so that go-sdk checks those
// headers of later calls against their body as it checks Mcp-Name. The registration only
// serves that check: the front's middleware answers every call.
type ParamHeaders struct {
	mu    sync.Mutex
	known map[string]string // tool name -> the schema it was registered with
}

// Learn registers the tools of one tools/list answer on front.
func (h *ParamHeaders) Learn(front *mcp.Server, tools []*mcp.Tool) {
	for _, t := range tools {
		if t == nil {
			continue
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil || !strings.Contains(string(schema), `"x-mcp-header"`) {
			continue
		}
		var object struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(schema, &object) != nil || object.Type != "object" {
			continue
		}
		h.mu.Lock()
		known := h.known[t.Name] == string(schema)
		if !known {
			if h.known == nil {
				h.known = map[string]string{}
			}
			h.known[t.Name] = string(schema)
		}
		h.mu.Unlock()
		if !known {
			front.AddTool(&mcp.Tool{Name: t.Name, InputSchema: json.RawMessage(schema)}, answeredByTheMiddleware)
		}
	}
}

// Binds reports whether a tool Learn registered binds arguments to Mcp-Param headers,
// which go-sdk's front server checks on its calls.
func (h *ParamHeaders) Binds(tool string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.known[tool]
	return ok
}

// answeredByTheMiddleware is the handler of the tools ParamHeaders registers, which the
// front's middleware answers before go-sdk would call it.
func answeredByTheMiddleware(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return nil, errors.New("this call is relayed, not answered here")
}

// listChangedPlaceholder names what AnnounceListChanged registers for a moment.
const listChangedPlaceholder = "switchboard.list-changed-placeholder"

// AnnounceListChanged has front tell its clients that the server's list of kind ("tools",
// "prompts" or "resources") changed, as the server told the front's client: to the
// sessionless era's subscriptions/listen streams that asked for it. go-sdk announces only
// changes to what a server registers, and a front relays its lists instead; registering
// a placeholder and removing it again, within go-sdk's notification delay, makes go-sdk
// send exactly one notifications/<kind>/list_changed. The placeholder is never listed,
// read or called: the front's middleware relays those requests.
func AnnounceListChanged(front *mcp.Server, kind string) {
	switch kind {
	case "tools":
		front.AddTool(&mcp.Tool{Name: listChangedPlaceholder, InputSchema: json.RawMessage(`{"type":"object"}`)}, answeredByTheMiddleware)
		front.RemoveTools(listChangedPlaceholder)
	case "prompts":
		front.AddPrompt(&mcp.Prompt{Name: listChangedPlaceholder}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return nil, errors.New("this request is relayed, not answered here")
		})
		front.RemovePrompts(listChangedPlaceholder)
	case "resources":
		uri := "switchboard:" + listChangedPlaceholder
		front.AddResource(&mcp.Resource{URI: uri, Name: listChangedPlaceholder}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return nil, errors.New("this request is relayed, not answered here")
		})
		front.RemoveResources(uri)
	}
}

// Cache scopes of the sessionless era's caching hints (cacheScope).
const (
	// CachePrivate lets only the requesting user's client cache an answer.
	CachePrivate = "private"
	// CachePublic lets any client or intermediary cache an answer and serve it to anyone.
	CachePublic = "public"
)

// CacheScope is the cacheScope of every cacheable answer of an endpoint: private where
// the endpoint requires authentication, since the answer is for one authenticated caller
// and a shared cache must not hand it to anyone else (as HTTP caches treat responses to
// requests with Authorization); public only where nobody authenticates and every caller
// gets the same answer.
func CacheScope(authenticated bool) string {
	if authenticated {
		return CachePrivate
	}
	return CachePublic
}

// KeepPrivate makes the caching hints of res, when it carries them (server/discover, the
// list methods, resources/read), say private, whatever the server that answered said:
// for answers relayed on an endpoint that requires authentication (see CacheScope).
func KeepPrivate(res mcp.Result) {
	var c *mcp.Cacheable
	switch r := res.(type) {
	case *mcp.DiscoverResult:
		if r != nil {
			c = &r.Cacheable
		}
	case *mcp.ListToolsResult:
		if r != nil {
			c = &r.Cacheable
		}
	case *mcp.ListResourcesResult:
		if r != nil {
			c = &r.Cacheable
		}
	case *mcp.ListResourceTemplatesResult:
		if r != nil {
			c = &r.Cacheable
		}
	case *mcp.ListPromptsResult:
		if r != nil {
			c = &r.Cacheable
		}
	case *mcp.ReadResourceResult:
		if r != nil {
			c = &r.Cacheable
		}
	}
	if c != nil {
		c.CacheScope = CachePrivate
	}
}
