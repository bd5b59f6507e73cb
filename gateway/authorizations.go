package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway/userauth"
	"github.com/switchboard-mcp/switchboard/internal/mcphttp"
)

// Persons' authorizations of perUser servers (spec.http.auth.oauth2.perUser).
//
// A person who holds no grant for a perUser server is asked to authorize it by the
// connector's Upstream, which answers their call with the broker's URL elicitation
// (userauth.Broker.AuthorizationRequired, -32042). In a 2025-11-25 session that error
// reaches the client as it is, and once the person's grant is stored the session's
// client is sent notifications/elicitation/complete (authorizationCompleted); a
// 2026-07-28 client's tools/call is answered input_required with the same URL request
// (authorizationInput), and its next call, with the grant stored, runs.
//
// Each person sees and revokes their own grant of a server at
// <server endpoint>/authorization (serveAuthorization): GET says whether they hold one,
// DELETE removes it. Admins list grants as the Secrets they are, which hold no token in
// the clear (docs/guides/credentials.md).

// authorizationInputKey is the key of the URL request in a sessionless client's
// inputRequests, and of its answer in inputResponses: the gateway's own, never sent on.
const authorizationInputKey = "switchboard.authorization"

// authorizationCompleted tells the client of every session of the person with the
// server that the authorization it elicited completed, so that it retries.
func (g *Gateway) authorizationCompleted(c userauth.Completed) {
	g.mu.RLock()
	var sessions []*session
	for _, s := range g.sessions {
		if s != nil && s.key == c.Server && s.caller.Key == c.CallerKey {
			sessions = append(sessions, s)
		}
	}
	g.mu.RUnlock()
	if len(sessions) == 0 {
		return
	}
	params, err := json.Marshal(&mcp.ElicitationCompleteParams{ElicitationID: c.ElicitationID})
	if err != nil {
		return
	}
	for _, s := range sessions {
		s.notifyClient(&jsonrpc.Request{Method: "notifications/elicitation/complete", Params: params})
	}
}

// authorizationInput is the input_required answer to a sessionless tools/call that the
// server's Upstream answered with a URL elicitation (err, -32042): the same URL request,
// for a client that declared URL elicitation. ok is false for any other error, or a
// client that cannot be asked, which gets err itself (its message shows the code, its
// data the URL).
func authorizationInput(req mcp.Request, err error) (res *mcp.CallToolResult, ok bool) {
	wire, isWire := errors.AsType[*jsonrpc.Error](err)
	if !isWire || wire.Code != mcp.CodeURLElicitationRequired || !asksURLs(req) {
		return nil, false
	}
	var data struct {
		Elicitations []*mcp.ElicitParams `json:"elicitations"`
	}
	if json.Unmarshal(wire.Data, &data) != nil || len(data.Elicitations) != 1 || data.Elicitations[0].Mode != "url" {
		return nil, false
	}
	encoded, merr := json.Marshal(map[string]any{
		"resultType":    "input_required",
		"inputRequests": mcp.InputRequestMap{authorizationInputKey: data.Elicitations[0]},
	})
	if merr != nil {
		return nil, false
	}
	// Decoded by go-sdk from its wire form, which alone sets a result's type.
	res = &mcp.CallToolResult{}
	if json.Unmarshal(encoded, res) != nil {
		return nil, false
	}
	return res, true
}

// asksURLs reports whether the client of a sessionless request declared URL
// elicitation.
func asksURLs(req mcp.Request) bool {
	cr, ok := req.(*mcp.CallToolRequest)
	if !ok || cr == nil || cr.Params == nil {
		return false
	}
	caps := cr.ClientCapabilities()
	return caps != nil && caps.Elicitation != nil && caps.Elicitation.URL != nil
}

// authorizationView is what GET <server endpoint>/authorization answers: whether the
// caller holds a grant for the server, never the grant itself.
type authorizationView struct {
	Server     string     `json:"server"`
	Username   string     `json:"username"`
	Authorized bool       `json:"authorized"`
	Since      *time.Time `json:"since,omitempty"`
}

// serveAuthorization serves a person's own grant of a server: GET says whether they
// hold one, DELETE revokes it (their next call asks them to authorize again). Any
// authenticated caller may see and revoke their own grant, also after losing the use
// of the server.
func (g *Gateway) serveAuthorization(w http.ResponseWriter, r *http.Request) {
	if !mcphttp.HostAllowed(w, r) {
		return
	}
	key := connector.Key{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	caller, ok := g.authenticate(w, r)
	if !ok {
		return
	}
	broker := g.opts.Authorizations
	switch r.Method {
	case http.MethodGet:
		grants, err := broker.List(r.Context(), caller.Key)
		if err != nil {
			g.log.Error(err, "Could not list a person's grants")
			g.refuse(w, http.StatusServiceUnavailable, "could not read the caller's grants; retry shortly")
			return
		}
		view := authorizationView{Server: key.String(), Username: caller.Username}
		for _, gr := range grants {
			if gr.Server == key.String() {
				created := gr.Created
				view.Authorized, view.Since = true, &created
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(view)
	case http.MethodDelete:
		if err := broker.Revoke(r.Context(), caller.Key, key); err != nil {
			g.log.Error(err, "Could not revoke a person's grant", "server", key.String())
			g.refuse(w, http.StatusServiceUnavailable, "could not revoke the grant; retry shortly")
			return
		}
		g.audit.Info("Grant revoked", "caller", caller.Username, "namespace", key.Namespace, "server", key.Name)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, DELETE")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	}
}
