package connector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// personalServer is an MCP server that takes only the tokens of tokens, answers whoami
// with the token's subject, serves the protected resource and authorization server
// metadata of a perUser server, and records the method of every message it gets.
type personalServer struct {
	url     string
	version string // the protocol version it answers initialize with; "" is go-sdk's choice

	mu      sync.Mutex
	methods []string
}

func (s *personalServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.methods)
}

func startPersonalServer(t *testing.T, tokens map[string]string, version string) *personalServer {
	t.Helper()
	ps := &personalServer{version: version}
	server := mcp.NewServer(&mcp.Implementation{Name: "personal", Version: "1"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}, Prompts: &mcp.PromptCapabilities{},
			Experimental: map[string]any{"notes": "meant for whoever initialized"}},
		Instructions: "meant for whoever initialized",
	})
	server.AddTool(&mcp.Tool{Name: "whoami", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: req.Extra.TokenInfo.UserID}}}, nil
		})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if who, ok := tokens[token]; ok {
			return &auth.TokenInfo{UserID: who, Expiration: time.Now().Add(time.Hour)}, nil
		}
		return nil, auth.ErrInvalidToken
	}
	var protected http.Handler
	srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/oauth-protected-resource/mcp":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"resource": ps.url + "/mcp", "authorization_servers": []string{ps.url}})
			return
		case "/.well-known/oauth-authorization-server":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"issuer": ps.url, "authorization_endpoint": ps.url + "/authorize",
				"token_endpoint": ps.url + "/token", "code_challenge_methods_supported": []string{"S256"}})
			return
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			r.Body = io.NopCloser(bytes.NewReader(body))
			_ = json.Unmarshal(body, &msg)
			ps.mu.Lock()
			ps.methods = append(ps.methods, msg.Method)
			ps.mu.Unlock()
		}
		if msg.Method == "initialize" && ps.version != "" {
			// A server that settles on a version of its own.
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Mcp-Session-Id", "s-1")
			_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(msg.ID) + `,"result":{"protocolVersion":"` + ps.version + `","capabilities":{},"serverInfo":{"name":"odd","version":"1"}}}`))
			return
		}
		protected.ServeHTTP(w, r)
	}))
	ps.url = srv.URL
	protected = auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: srv.URL + "/.well-known/oauth-protected-resource/mcp"})(
		mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	return ps
}

// A person's Upstream of a perUser server before they authorized it: the initialize is
// answered without the server (which would refuse it, there being no token to send),
// every call is answered with the pool's AuthorizationRequired, and nothing reaches the
// server. Once the person holds a grant, their next call sends the kept initialize and
// the call itself with their own token, and answers as them; another person still gets
// AuthorizationRequired, and a Kubernetes caller is refused at once, told what an admin
// can do.
func TestAPersonsUpstreamWaitsForTheirGrant(t *testing.T) {
	ps := startPersonalServer(t, map[string]string{"token-of-alice": "alice", "token-of-bob": "bob"}, "")
	grants := &memGrants{}
	var asked []string
	var askedMu sync.Mutex
	p := testPool(t, func(o *Options) {
		o.Grants = grants
		o.AuthorizationRequired = func(_ context.Context, key Key, c Caller) *jsonrpc.Error {
			askedMu.Lock()
			asked = append(asked, c.Username+"@"+key.String())
			askedMu.Unlock()
			return &jsonrpc.Error{Code: mcp.CodeURLElicitationRequired, Message: "authorize at the gateway"}
		}
	})
	key := Key{Namespace: "ns", Name: "personal"}
	cfg := fastConfig(ps.url + "/mcp")
	cfg.Protocol = ProtocolStreamableHTTP
	cfg.PerUser = &PerUser{Provider: "corp", ClientID: "switchboard", AuthorizationServers: []string{ps.url},
		Resources: []string{ps.url}, AllowInsecureHTTP: true}
	p.Ensure(key, cfg)
	if snap := waitReady(t, p, key); !snap.ToolsPerCaller {
		t.Fatalf("a perUser server's tools are not discovered per caller: %+v", snap)
	}
	alice := Caller{Key: "key-of-alice", Provider: "corp", Username: "alice"}
	bob := Caller{Key: "key-of-bob", Provider: "corp", Username: "bob"}

	if _, err := p.OpenUpstream(t.Context(), key, &Caller{Key: "key-of-sa", Username: "system:serviceaccount:agents:triage"}); ReasonOf(err) != ReasonCallerNotAllowed ||
		!strings.Contains(err.Error(), "workload") {
		t.Fatalf("a ServiceAccount caller's upstream: %v; want %s naming a workload credential", err, ReasonCallerNotAllowed)
	}

	open := func(c Caller) (*Upstream, *mcp.InitializeResult) {
		u, err := p.OpenUpstream(t.Context(), key, &c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = u.Close() })
		init := &jsonrpc.Request{ID: mustID(t, float64(1)), Method: "initialize",
			Params: json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}`)}
		if err := u.Write(t.Context(), init); err != nil {
			t.Fatal(err)
		}
		resp := readResponse(t, u)
		var res mcp.InitializeResult
		if resp.Error != nil || json.Unmarshal(resp.Result, &res) != nil || res.ProtocolVersion != "2025-06-18" || res.Capabilities.Tools == nil {
			t.Fatalf("%s's initialize answered %s %v; want the version asked for and tools", c.Username, resp.Result, resp.Error)
		}
		if err := u.Write(t.Context(), &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		return u, &res
	}
	call := func(u *Upstream, id float64) *jsonrpc.Response {
		t.Helper()
		req := &jsonrpc.Request{ID: mustID(t, id), Method: "tools/call", Params: json.RawMessage(`{"name":"whoami","arguments":{}}`)}
		if err := u.Write(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		resp, err := nextResponse(t.Context(), u, req.ID)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	authorizationAsked := func(resp *jsonrpc.Response) bool {
		wire, ok := errors.AsType[*jsonrpc.Error](resp.Error)
		return ok && wire.Code == mcp.CodeURLElicitationRequired
	}

	ua, first := open(alice)
	if first.Capabilities.Prompts != nil {
		t.Fatalf("alice's initialize, answered before anyone reached the server, claims prompts")
	}
	if resp := call(ua, 2); !authorizationAsked(resp) {
		t.Fatalf("alice's call without a grant answered %s %v; want the pool's AuthorizationRequired", resp.Result, resp.Error)
	}
	if seen := ps.seen(); len(seen) != 0 {
		t.Fatalf("the server was sent %v before anyone held a grant", seen)
	}

	// alice authorizes (the broker stores her grant).
	if err := grants.SaveGrant(t.Context(), &Grant{Key: GrantKey{Caller: alice.Key, Server: key}, Username: "alice",
		Issuer: ps.url, AccessToken: "token-of-alice", Expiry: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	resp := call(ua, 3)
	var res mcp.CallToolResult
	if resp.Error != nil || json.Unmarshal(resp.Result, &res) != nil || len(res.Content) != 1 {
		t.Fatalf("alice's call with a grant answered %s %v", resp.Result, resp.Error)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != "alice" {
		t.Fatalf("alice's call reached the server as %q", got)
	}
	// (The Upstream's own subscriptions/listen, which opens the stream of the server's
	// notifications, may come before the call.)
	if seen := slices.DeleteFunc(ps.seen(), func(m string) bool { return m == "subscriptions/listen" }); !slices.Equal(seen, []string{"initialize", "notifications/initialized", "tools/call"}) {
		t.Fatalf("the server was sent %v; want alice's initialize, initialized and her call", seen)
	}

	// bob has no grant: alice's does not serve him.
	ub, his := open(bob)
	if resp := call(ub, 2); !authorizationAsked(resp) {
		t.Fatalf("bob's call answered %s %v; want the pool's AuthorizationRequired", resp.Result, resp.Error)
	}
	// His initialize was answered with the capabilities the server answered alice's.
	if his.Capabilities.Prompts == nil || his.ServerInfo == nil || his.ServerInfo.Name != "personal" {
		t.Errorf("bob's initialize, answered without the server, did not tell what the server told alice: %+v", his)
	}
	// Only what MCP defines: what the server told alice of her own is not bob's.
	if his.Instructions != "" || his.Capabilities.Experimental != nil {
		t.Errorf("bob's initialize carries the instructions or experimental capabilities the server told alice: %+v", his)
	}
	askedMu.Lock()
	defer askedMu.Unlock()
	if !slices.Equal(asked, []string{"alice@ns/personal", "bob@ns/personal"}) {
		t.Errorf("the pool asked for authorization for %v", asked)
	}
}

// A server that answers a person's kept initialize with another protocol version than
// the one the person's client was told ends the Upstream with a reason, rather than
// speaking one version to the server and another to the client.
func TestAPersonsKeptInitializeAnsweredWithAnotherVersionEndsTheUpstream(t *testing.T) {
	ps := startPersonalServer(t, map[string]string{"token-of-alice": "alice"}, "2024-11-05")
	grants := &memGrants{}
	p := testPool(t, func(o *Options) { o.Grants = grants })
	key := Key{Namespace: "ns", Name: "odd"}
	cfg := fastConfig(ps.url + "/mcp")
	cfg.Protocol = ProtocolStreamableHTTP
	cfg.PerUser = &PerUser{Provider: "corp", ClientID: "switchboard", AuthorizationServers: []string{ps.url},
		Resources: []string{ps.url}, AllowInsecureHTTP: true}
	p.Ensure(key, cfg)
	waitReady(t, p, key)
	alice := Caller{Key: "key-of-alice", Provider: "corp", Username: "alice"}
	u, err := p.OpenUpstream(t.Context(), key, &alice)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	init := &jsonrpc.Request{ID: mustID(t, float64(1)), Method: "initialize",
		Params: json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}`)}
	if err := u.Write(t.Context(), init); err != nil {
		t.Fatal(err)
	}
	if resp := readResponse(t, u); resp.Error != nil {
		t.Fatal(resp.Error)
	}
	_ = grants.SaveGrant(t.Context(), &Grant{Key: GrantKey{Caller: alice.Key, Server: key}, Issuer: ps.url, AccessToken: "token-of-alice"})
	req := &jsonrpc.Request{ID: mustID(t, float64(2)), Method: "tools/call", Params: json.RawMessage(`{"name":"whoami","arguments":{}}`)}
	if err := u.Write(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	resp, err := nextResponse(t.Context(), u, req.ID)
	if err == nil && (resp.Error == nil || !strings.Contains(resp.Error.Error(), "protocol version")) {
		t.Fatalf("the call answered %s %v; want the Upstream ended over the protocol version", resp.Result, resp.Error)
	}
	if _, err := u.Read(t.Context()); ReasonOf(err) != ReasonProtocolError {
		t.Fatalf("the Upstream reads %v; want it ended with %s", err, ReasonProtocolError)
	}
}
