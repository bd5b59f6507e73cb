package connector

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A person's Upstream of a perUser server, before the person authorized the server.
//
// Every request to a perUser server carries the person's own token, and a person who
// has not authorized the server yet has none: not even the session's initialize can be
// sent. So the Upstream answers that initialize itself, keeps it, and sends it to the
// server the first time the person holds a grant, just before the call that found one.
// Until then every call is answered with the pool's AuthorizationRequired (the
// gateway's URL elicitation, -32042) and the client's notifications are dropped: the
// server has no session they could belong to.
//
// The initialize answered meanwhile names the protocol version the client asked for
// (when go-sdk speaks it, else go-sdk's newest) and the capabilities the server answered
// the last person whose initialize reached it, or tools with list changes when none
// has. A server that later answers the kept initialize with another version ends the
// Upstream with a reason: the client was told one version and must not be spoken to in
// another.

// maxInitTemplate bounds what of a server's initialize answer is kept to answer the
// next person's deferred initialize with.
const maxInitTemplate = 64 << 10

// initTemplate is what of a server's initialize answer is told a person whose
// initialize the Upstream answers itself: the capabilities MCP defines and the server's
// name and version, never its instructions, experimental capabilities or extensions,
// which may be another person's own.
type initTemplate struct {
	Capabilities *mcp.ServerCapabilities `json:"capabilities"`
	ServerInfo   *mcp.Implementation     `json:"serverInfo,omitempty"`
}

// deferredInit is the client's initialize an Upstream answered itself.
type deferredInit struct {
	// mu serializes sending the initialize to the server.
	mu sync.Mutex
	// req is the client's initialize; nil once sent, or when it was never deferred.
	req *jsonrpc.Request
	// initialized says the client sent notifications/initialized.
	initialized bool
	// version is the protocol version the Upstream answered with.
	version string
	// sentID is the id the initialize was sent with, answer where its answer goes;
	// both under the Upstream's mu, which Read holds to hand the answer over.
	sentID jsonrpc.ID
	answer chan *jsonrpc.Response
}

// writeDeferred handles msg while the person holds no grant: it reports whether msg was
// taken care of (answered or dropped) rather than sent.
func (u *Upstream) writeDeferred(msg jsonrpc.Message) bool {
	req, isReq := msg.(*jsonrpc.Request)
	if isReq && req.Method == "initialize" && req.IsCall() {
		if held, e := u.user.hasGrant(); e != nil || held {
			return false // sent now: with the person's token, or failing with e's reason
		}
		return u.deferInitialize(req)
	}
	d := &u.deferred
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.req == nil {
		return false
	}
	if isReq && req.IsCall() {
		return false // call sends the initialize first, or answers AuthorizationRequired
	}
	if isReq && req.Method == "notifications/initialized" {
		d.initialized = true
	}
	return true
}

// deferInitialize keeps the client's initialize and answers it.
func (u *Upstream) deferInitialize(req *jsonrpc.Request) bool {
	var params struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	_ = json.Unmarshal(req.Params, &params)
	version := params.ProtocolVersion
	if supported := mcp.SupportedProtocolVersions(); !slices.Contains(supported, version) || version >= modernProtocol {
		version = newestSessionVersion(supported)
	}
	tmpl := u.owner.initTemplate.Load()
	if tmpl == nil {
		tmpl = &initTemplate{Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
			ServerInfo: &mcp.Implementation{Name: u.key.String(), Version: "unknown"}}
	}
	result, err := json.Marshal(struct {
		ProtocolVersion string `json:"protocolVersion"`
		initTemplate
	}{version, *tmpl})
	if err != nil {
		return false
	}
	u.deferred.mu.Lock()
	u.deferred.req, u.deferred.version = req, version
	u.deferred.mu.Unlock()
	u.version.Store(&version)
	u.mu.Lock()
	u.answers = append(u.answers, &jsonrpc.Response{ID: req.ID, Result: result})
	u.mu.Unlock()
	u.interrupt()
	return true
}

// newestSessionVersion is the newest protocol version of supported that has sessions.
func newestSessionVersion(supported []string) string {
	newest := ""
	for _, v := range supported {
		if v < modernProtocol && v > newest {
			newest = v
		}
	}
	return newest
}

// sendDeferredInit sends the kept initialize once the person holds a grant, and
// notifications/initialized after it when the client sent one. A person still without
// a grant gets the pool's AuthorizationRequired. It returns nil when nothing was kept.
func (u *Upstream) sendDeferredInit(ctx context.Context) *Error {
	d := &u.deferred
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.req == nil {
		return nil
	}
	held, e := u.user.hasGrant()
	if e != nil {
		return e
	}
	if !held {
		return u.user.auth.authorizationRequired("the caller has not authorized it yet")
	}
	id, err := jsonrpc.MakeID("switchboard-init-" + rand.Text())
	if err != nil {
		return newError(ReasonProtocolError, "%s", err.Error())
	}
	answer := make(chan *jsonrpc.Response, 1)
	u.mu.Lock()
	u.initID, d.sentID, d.answer = id, id, answer
	u.mu.Unlock()
	if err := u.conn.Write(ctx, &jsonrpc.Request{ID: id, Method: "initialize", Params: d.req.Params}); err != nil {
		return u.red.scrubError(u.classify(err))
	}
	var resp *jsonrpc.Response
	select {
	case resp = <-answer:
	case <-ctx.Done():
		return newError(ReasonTimeout, "server did not answer initialize in time")
	case <-u.failed:
		return u.failure
	}
	if resp.Error != nil {
		return u.red.scrubError(classify(resp.Error, nil))
	}
	if got := protocolVersionOf(u.ctx); got != d.version {
		return u.fail(newError(ReasonProtocolError,
			"server answered initialize with protocol version %q, and the session was opened with %q while the person authorized it: start a new session",
			TruncateUTF8(got, 32), d.version))
	}
	// (answered, reading the answer, kept what the next person is told.)
	if d.initialized {
		if err := u.conn.Write(ctx, &jsonrpc.Request{Method: "notifications/initialized"}); err != nil {
			return u.red.scrubError(u.classify(err))
		}
		if u.transport == TransportStreamableHTTP {
			go u.listen()
		}
	}
	d.req = nil
	return nil
}

// answersDeferredInit hands resp to sendDeferredInit when it answers the kept
// initialize, and reports whether it did.
func (u *Upstream) answersDeferredInit(resp *jsonrpc.Response) bool {
	if u.user == nil {
		return false
	}
	d := &u.deferred
	// Not d.mu: sendDeferredInit holds it while it waits for this answer.
	u.mu.Lock()
	defer u.mu.Unlock()
	if !d.sentID.IsValid() || resp.ID != d.sentID || d.answer == nil {
		return false
	}
	d.answer <- resp
	d.answer = nil
	return true
}

// authorizationRequired is the answer to a call of a person without a grant: the
// pool's (the gateway's URL elicitation), or e as the connector's error.
func (u *Upstream) authorizationRequired(ctx context.Context, e *Error) *jsonrpc.Error {
	if hook := u.owner.pool.opts.AuthorizationRequired; hook != nil {
		if wire := hook(ctx, u.key, u.user.caller); wire != nil {
			return wire
		}
	}
	return e.wire()
}

// rememberInit keeps what of a server's initialize answer the next person's deferred
// initialize is answered with.
func (s *session) rememberInit(result json.RawMessage) {
	if len(result) > maxInitTemplate {
		return
	}
	var t initTemplate
	if json.Unmarshal(result, &t) != nil || t.Capabilities == nil {
		return
	}
	c := t.Capabilities
	t.Capabilities = &mcp.ServerCapabilities{Completions: c.Completions, Prompts: c.Prompts, Resources: c.Resources, Tools: c.Tools,
		Logging: c.Logging} //nolint:staticcheck // sessions of 2025-11-25 have logging still
	if info := t.ServerInfo; info != nil {
		t.ServerInfo = &mcp.Implementation{Name: TruncateUTF8(info.Name, 256), Title: TruncateUTF8(info.Title, 256), Version: TruncateUTF8(info.Version, 256)}
	}
	s.initTemplate.Store(&t)
}
