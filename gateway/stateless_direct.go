package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/mcphttp"
	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
	"github.com/switchboard-mcp/switchboard/internal/sessionless"
)

// serveToolCallDirectly answers a sessionless tools/call without go-sdk's stateless
// handler when the request is an ordinary one (see ordinaryToolCall), and reports
// whether it did; otherwise it writes nothing and go-sdk serves the request, answering
// whatever is unusual about it as the protocol says.
//
// Why: go-sdk's stateless handler builds a server session for every request and decodes
// its body about a dozen times over; for a plain call that was most of what the gateway
// cost. The call itself goes the same way as one go-sdk hands over: relayToolCall
// judges, relays, audits and traces it, in a server span as relayStateless makes. Only
// the wrapping of one request and of its one answer is done here, from the front door's
// strict decoding, and the answer is go-sdk's own JSON-RPC encoding, sent as JSON, as a
// Streamable HTTP server may answer any request.
func (g *Gateway) serveToolCallDirectly(w http.ResponseWriter, r *http.Request, sr *statelessRequest, msg *mcpmsg.Message) bool {
	params, ok := ordinaryToolCall(r, sr, msg)
	if !ok {
		return false
	}
	req := &mcp.CallToolRequest{Params: params, Extra: &mcp.RequestExtra{Header: r.Header}}
	ctx := context.WithValue(r.Context(), statelessRequestKey{}, sr)
	// As relayStateless relays a call go-sdk hands it, with its answer sent before its
	// spans are recorded.
	ctx, span, tt := g.startToolCallTrace(ctx, sr, r.Header, params)
	res, err := g.relayToolCall(ctx, sr, req)
	if err == nil {
		annotateServerInfo(res, sr.client.serverInfo())
	}
	writeAnswer(w, msg.ID, res, err)
	if span != nil {
		// net/http holds a short answer back until the handler returns; it is sent first.
		_ = http.NewResponseController(w).Flush()
		tt.end(span, outcomeOf(res, err))
	}
	return true
}

// ordinaryToolCall returns the params of msg, a sessionless request, when it is a
// tools/call that go-sdk's stateless handler would take as it stands and relay as
// relayStateless does alone: one call, to a server of the sessionless era, at the
// version this gateway speaks in both header and _meta, with the client's capabilities
// (and its info, if given) in _meta as go-sdk requires them, Mcp-Method and Mcp-Name
// headers equal to the body, no Mcp-Param headers or tool whose schema binds them, no
// progress token (whose notifications need go-sdk's response stream) and no state of the
// gateway's own input bridge. Anything else is left to go-sdk.
func ordinaryToolCall(r *http.Request, sr *statelessRequest, msg *mcpmsg.Message) (*mcp.CallToolParamsRaw, bool) {
	if msg.Method != "tools/call" || !msg.IsCall() || sr.client.key.caller != "" {
		return nil, false
	}
	version := r.Header.Get(sessionless.ProtocolVersionHeader)
	if version != sessionlessVersion || r.Header.Get(sessionless.MethodHeader) != msg.Method {
		return nil, false
	}
	for name := range r.Header {
		if strings.HasPrefix(name, sessionless.ParamHeaderPrefix) {
			return nil, false
		}
	}
	// Read as go-sdk reads params: exact member names, everything else ignored. The
	// front door has made sure no member has a second spelling.
	var wire struct {
		Meta           map[string]jsontext.Value `json:"_meta"`
		Name           string                    `json:"name"`
		Arguments      jsontext.Value            `json:"arguments"`
		InputResponses mcp.InputResponseMap      `json:"inputResponses"`
		RequestState   string                    `json:"requestState"`
	}
	if jsonv2.Unmarshal(msg.Params, &wire) != nil || wire.Name == "" || r.Header.Get(sessionless.NameHeader) != wire.Name {
		return nil, false
	}
	if sr.client.paramHeaders.Binds(wire.Name) || strings.HasPrefix(wire.RequestState, inputStatePrefix) {
		return nil, false
	}
	// The client's version, capabilities and info, as the types go-sdk requires of them
	// (a member of the wrong type fails the decoding).
	var clientVersion string
	var caps *mcp.ClientCapabilities
	var info *mcp.Implementation
	if jsonv2.Unmarshal(wire.Meta[mcp.MetaKeyProtocolVersion], &clientVersion) != nil || clientVersion != version ||
		jsonv2.Unmarshal(wire.Meta[mcp.MetaKeyClientCapabilities], &caps) != nil || caps == nil {
		return nil, false
	}
	if raw, given := wire.Meta[mcp.MetaKeyClientInfo]; given && (jsonv2.Unmarshal(raw, &info) != nil || info == nil) {
		return nil, false
	}
	if _, ok := wire.Meta["progressToken"]; ok {
		return nil, false
	}
	meta, ok := forwardedMeta(wire.Meta)
	if !ok {
		return nil, false
	}
	params := &mcp.CallToolParamsRaw{Meta: meta, Name: wire.Name, InputResponses: wire.InputResponses, RequestState: wire.RequestState}
	if len(wire.Arguments) > 0 {
		params.Arguments = json.RawMessage(wire.Arguments)
	}
	return params, true
}

// forwardedMeta is the _meta a call carries on, read from the members of the client's:
// its objects and arrays (the client's capabilities and info among them) are the
// client's own bytes, as the front door checked them, which the gateway does not read
// and the client session encodes as they are; its strings, numbers, booleans and nulls
// are decoded as go-sdk decodes them, for the gateway's readers of _meta (the trace
// context, the progress token).
//
// Why: decoded into maps and encoded again, the client's capabilities and info cost
// more than anything else the gateway does with a call, and only to be sent on.
func forwardedMeta(members map[string]jsontext.Value) (mcp.Meta, bool) {
	meta := make(mcp.Meta, len(members))
	for name, value := range members {
		switch value.Kind() {
		case '{', '[':
			meta[name] = json.RawMessage(value)
		default:
			var v any
			if jsonv2.Unmarshal(value, &v) != nil {
				return nil, false
			}
			meta[name] = v
		}
	}
	return meta, true
}

// serverInfo is the server's own name and version, as its session learnt them, which
// results of the sessionless era name in _meta.
func (c *upstreamClient) serverInfo() *mcp.Implementation {
	if res := c.cs.InitializeResult(); res != nil && res.ServerInfo != nil {
		return res.ServerInfo
	}
	return &mcp.Implementation{Name: c.key.server.String()}
}

// annotateServerInfo names the server in a result's _meta unless the result names one
// already, as go-sdk's server does for every answer of the sessionless era.
func annotateServerInfo(res mcp.Result, info *mcp.Implementation) {
	if res == nil {
		return
	}
	meta := res.GetMeta()
	if _, named := meta[mcp.MetaKeyServerInfo]; named {
		return
	}
	if meta == nil {
		meta = map[string]any{}
	}
	meta[mcp.MetaKeyServerInfo] = info
	res.SetMeta(meta)
}

// writeAnswer writes the JSON-RPC answer to the request id names: res, or err as the
// JSON-RPC error go-sdk's server would make of it, with the HTTP status the protocol
// gives that error.
func writeAnswer(w http.ResponseWriter, id jsonrpc.ID, res mcp.Result, err error) {
	answer := &jsonrpc.Response{ID: id}
	status := http.StatusOK
	if err == nil {
		answer.Result, err = json.Marshal(res)
	}
	if err != nil {
		wire, ok := errors.AsType[*jsonrpc.Error](err)
		if !ok {
			wire = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		}
		answer.Result, answer.Error = nil, wire
		status = errorStatus(wire.Code)
	}
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	mcphttp.WriteResponse(w, status, answer)
}

// errorStatus is the HTTP status of a sessionless request answered with a JSON-RPC error
// of code (SEP-2575): 404 for an unknown method, 400 for invalid params, an unsupported
// protocol version or a missing client capability, 200 otherwise.
func errorStatus(code int64) int {
	switch code {
	case jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case jsonrpc.CodeInvalidParams, mcp.CodeUnsupportedProtocolVersion, mcp.CodeMissingRequiredClientCapabilities:
		return http.StatusBadRequest
	}
	return http.StatusOK
}
