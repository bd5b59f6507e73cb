package gateway

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	toolscache "k8s.io/client-go/tools/cache"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/mcphttp"
	"github.com/switchboard-mcp/switchboard/internal/objectevents"
	"github.com/switchboard-mcp/switchboard/internal/sessionless"
)

// Reasons a toolset session ends besides those of a server session.
var (
	errToolsetDeleted       = errors.New("the MCPToolset was deleted")
	errToolsetAccessRevoked = errors.New("the caller may no longer use this toolset")
)

// UpdateToolset records the latest state of an MCPToolset; its open sessions recompute
// their tools.
func (g *Gateway) UpdateToolset(obj *mcpv1alpha1.MCPToolset) {
	key := connector.Key{Namespace: obj.Namespace, Name: obj.Name}
	g.mu.Lock()
	g.toolsets[key] = obj
	g.mu.Unlock()
	g.resyncToolsets(func(s *toolsetSession) bool { return s.key == key })
}

// DeleteToolset forgets an MCPToolset and ends its sessions.
func (g *Gateway) DeleteToolset(key connector.Key) {
	g.mu.Lock()
	delete(g.toolsets, key)
	var ending []*toolsetSession
	for _, s := range g.toolsetSessions {
		if s != nil && s.key == key {
			ending = append(ending, s)
		}
	}
	g.mu.Unlock()
	for _, s := range ending {
		s.end(errToolsetDeleted)
	}
}

// ToolsetEventHandler keeps the gateway's picture of MCPToolsets in step with an
// informer.
func (g *Gateway) ToolsetEventHandler() toolscache.ResourceEventHandler {
	return objectevents.Handler(g.UpdateToolset, func(o *mcpv1alpha1.MCPToolset) {
		g.DeleteToolset(connector.Key{Namespace: o.Namespace, Name: o.Name})
	})
}

// toolset returns the gateway's copy of key, or nil.
func (g *Gateway) toolset(key connector.Key) *mcpv1alpha1.MCPToolset {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.toolsets[key]
}

// serversIn returns the MCPServers of a namespace the gateway knows.
func (g *Gateway) serversIn(namespace string) []mcpv1alpha1.MCPServer {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []mcpv1alpha1.MCPServer
	for key, s := range g.servers {
		if key.Namespace == namespace && s.obj != nil {
			out = append(out, *s.obj)
		}
	}
	return out
}

// resyncToolsets has every open toolset session that match selects recompute its
// tools, in the background.
func (g *Gateway) resyncToolsets(match func(*toolsetSession) bool) {
	g.mu.RLock()
	var list []*toolsetSession
	for _, s := range g.toolsetSessions {
		if s != nil && match(s) {
			list = append(list, s)
		}
	}
	g.mu.RUnlock()
	for _, s := range list {
		s.resync()
	}
}

// serveToolset is the endpoint of one toolset: authenticate, authorize use of the
// toolset, then serve the session's own go-sdk server.
func (g *Gateway) serveToolset(w http.ResponseWriter, r *http.Request) {
	if !mcphttp.HostAllowed(w, r) {
		return
	}
	r, forget := g.fronts.begin(r)
	defer forget()
	key := connector.Key{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	caller, ok := g.authorize(w, r, key, g.toolsetUse())
	if !ok {
		return
	}
	if g.toolset(key) == nil {
		g.refuse(w, http.StatusNotFound, fmt.Sprintf("MCPToolset %s not found", key))
		return
	}
	serveMethod(w, r, func() { g.serveToolsetPOST(w, r, key, caller) }, func() clientSession {
		if s := g.requestToolsetSession(w, r, key, caller); s != nil {
			return s
		}
		return nil
	})
}

// serveToolsetPOST hands a message to its session, or starts a session for an
// initialize request without a session id.
func (g *Gateway) serveToolsetPOST(w http.ResponseWriter, r *http.Request, key connector.Key, caller *identity.Caller) {
	if !mcphttp.CheckPOST(w, r) {
		return
	}
	body, msgs, ok := mcphttp.ReadMessages(w, r, int64(g.opts.MaxMessageBytes), bodyReadTimeout)
	if !ok {
		return
	}
	if ft := frontTraceOf(r.Context()); ft != nil && len(msgs.Messages) == 1 {
		ft.id = msgs.Messages[0].ID
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if sessionless.IsRequest(r, msgs) {
		g.serveToolsetStateless(w, r, key, caller, msgs)
		return
	}
	if r.Header.Get(mcphttp.SessionIDHeader) != "" {
		s := g.requestToolsetSession(w, r, key, caller)
		if s == nil || !refuseBatch(w, msgs, s.requestedVersion()) || !s.activity.Begin() {
			return
		}
		defer s.activity.End()
		s.presentCaller(upstreamCaller(r, caller))
		s.transport.ServeHTTP(w, r)
		return
	}
	req := mcphttp.InitializeRequest(w, body)
	if req == nil {
		return
	}
	s, err := g.startToolsetSession(key, caller)
	if err != nil {
		g.refuseSession(w, req.ID, caller, key.Namespace, []any{"toolset", key.Name}, err)
		return
	}
	s.presentCaller(upstreamCaller(r, caller))
	if !s.activity.Begin() {
		mcphttp.NotFound(w, "")
		return
	}
	s.transport.ServeHTTP(w, r)
	s.activity.End()
	if s.session.InitializeParams() == nil {
		// The client went away before initialize completed: nobody can use the session,
		// and it would hold its slot until the idle timeout.
		s.end(errNotReady)
	}
}

// requestToolsetSession returns the session a request names, or answers 400 or 404.
func (g *Gateway) requestToolsetSession(w http.ResponseWriter, r *http.Request, key connector.Key, caller *identity.Caller) *toolsetSession {
	id, ok := requestSessionID(w, r)
	if !ok {
		return nil
	}
	s := g.lookupToolsetSession(id)
	if s == nil || s.key != key || s.caller.Key != caller.Key {
		mcphttp.NotFound(w, "")
		return nil
	}
	return s
}

func (g *Gateway) lookupToolsetSession(id string) *toolsetSession {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.toolsetSessions[id]
}

// startToolsetSession reserves a session slot (the replica's, the namespace's and the
// caller's, at the caller's session rate) and connects a go-sdk server of the session's
// own to a Streamable HTTP transport. No upstream session opens until the client lists
// or calls tools. A refusal is a *sessionRefusal.
func (g *Gateway) startToolsetSession(key connector.Key, caller *identity.Caller) (*toolsetSession, error) {
	return g.openToolsetSession(key, caller, false)
}

// openToolsetSession is startToolsetSession; a sessionless session serves the
// sessionless era's requests of its caller (see serveToolsetStateless) and is connected
// to no client transport.
func (g *Gateway) openToolsetSession(key connector.Key, caller *identity.Caller, sessionless bool) (*toolsetSession, error) {
	start, err := g.reserveSessionStart(caller)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	if err := g.takeSessionSlotLocked(key.Namespace, caller); err != nil {
		g.mu.Unlock()
		start.Cancel()
		return nil, err
	}
	id := rand.Text()
	g.seq++
	seq := g.seq
	g.toolsetSessions[id] = nil
	g.mu.Unlock()

	s := newToolsetSession(g, id, seq, key, caller)
	s.sessionless = sessionless
	if err := s.connect(); err != nil {
		g.mu.Lock()
		delete(g.toolsetSessions, id)
		g.releaseSessionSlotLocked(key.Namespace, caller.Key)
		g.mu.Unlock()
		return nil, &sessionRefusal{status: http.StatusInternalServerError, err: err}
	}
	g.mu.Lock()
	g.toolsetSessions[id] = s
	g.mu.Unlock()
	g.metrics.toolsets.WithLabelValues(key.Namespace, key.Name).Inc()
	s.audit.Info("Session started")
	return s, nil
}

// forgetToolsetSession removes an ended session and gives its slots back.
func (g *Gateway) forgetToolsetSession(s *toolsetSession) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.toolsetSessions[s.id] != s {
		return
	}
	delete(g.toolsetSessions, s.id)
	if key := (toolsetCaller{toolset: s.key, caller: s.caller.Key}); g.sessionlessToolsets[key] == s {
		delete(g.sessionlessToolsets, key)
	}
	g.releaseSessionSlotLocked(s.key.Namespace, s.caller.Key)
	g.metrics.toolsets.WithLabelValues(s.key.Namespace, s.key.Name).Dec()
	if _, exists := g.toolsets[s.key]; !exists && !g.hasToolsetSessionsLocked(s.key) {
		// The toolset is gone with its last session: so is its series.
		g.metrics.toolsets.DeleteLabelValues(s.key.Namespace, s.key.Name)
	}
}

func (g *Gateway) hasToolsetSessionsLocked(key connector.Key) bool {
	for _, other := range g.toolsetSessions {
		if other != nil && other.key == key {
			return true
		}
	}
	return false
}

// toolResult turns a tools/call error into what the client gets: a JSON-RPC error,
// keeping the server's own code where it sent one.
func toolError(err error) error {
	var jerr *jsonrpc.Error
	if errors.As(err, &jerr) {
		return jerr
	}
	return &jsonrpc.Error{Code: codeUnavailable, Message: err.Error()}
}

// exposedTool copies an origin's tool definition under its exposed name, or returns nil
// when the definition cannot be served (an input schema that is not an object).
func exposedTool(origin *mcp.Tool, name, description string, hasDescription bool) *mcp.Tool {
	t := *origin
	t.Name = name
	if hasDescription {
		t.Description = description
	}
	if t.InputSchema == nil {
		return nil
	}
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil
	}
	var schema struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(raw, &schema) != nil || schema.Type != "object" {
		return nil
	}
	t.InputSchema = json.RawMessage(raw)
	if t.OutputSchema != nil {
		if out, err := json.Marshal(t.OutputSchema); err == nil {
			t.OutputSchema = json.RawMessage(out)
		}
	}
	return &t
}

// durationSince rounds an audit line's duration.
func durationSince(start time.Time) string {
	return time.Since(start).Round(time.Microsecond).String()
}
