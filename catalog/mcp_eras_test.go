package catalog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
)

// The MCP protocol eras a catalogue client may speak: the stateless one, and the
// session-based ones before it.
const (
	statelessEra = "2026-07-28"
	sessionEra   = "2025-11-25"
)

// wire is the HTTP client side of a go-sdk client talking to the catalogue: it sends the
// token the test set last with every request, lets a test rewrite a request's headers,
// and records every exchange.
type wire struct {
	mu        sync.Mutex
	token     string
	rewrite   func(*http.Request)
	exchanges []exchange
}

// exchange is one recorded HTTP request and its answer.
type exchange struct {
	method   string // the JSON-RPC method of the request body
	request  http.Header
	status   int
	response http.Header
	body     []byte // the answer's body when it is JSON
}

func (w *wire) setToken(token string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.token = token
}

func (w *wire) setRewrite(f func(*http.Request)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rewrite = f
}

func (w *wire) recorded() []exchange {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.exchanges)
}

func (w *wire) RoundTrip(req *http.Request) (*http.Response, error) {
	w.mu.Lock()
	token, rewrite := w.token, w.rewrite
	w.mu.Unlock()
	req = req.Clone(req.Context())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rewrite != nil {
		rewrite(req)
	}
	ex := exchange{request: req.Header.Clone()}
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		if msg, err := jsonrpc.DecodeMessage(body); err == nil {
			if r, ok := msg.(*jsonrpc.Request); ok {
				ex.method = r.Method
			}
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	ex.status, ex.response = resp.StatusCode, resp.Header.Clone()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		ex.body = body
	}
	w.mu.Lock()
	w.exchanges = append(w.exchanges, ex)
	w.mu.Unlock()
	return resp, nil
}

// eraSession connects a go-sdk client that asks for protocol version to the catalogue
// over w.
func eraSession(tb testing.TB, c *running, version string, w *wire, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "catalog-era-test", Version: "v1"}, opts)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:             c.base + "/mcp",
		HTTPClient:           &http.Client{Transport: w, Timeout: 10 * time.Second},
		DisableStandaloneSSE: true,
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { _ = session.Close() })
	return session, nil
}

// result decodes the result of a recorded JSON-RPC answer into out.
func (ex exchange) result(tb testing.TB, out any) {
	tb.Helper()
	msg, err := jsonrpc.DecodeMessage(ex.body)
	if err != nil {
		tb.Fatalf("%s answer %q: %v", ex.method, ex.body, err)
	}
	resp, ok := msg.(*jsonrpc.Response)
	if !ok || resp.Error != nil {
		tb.Fatalf("%s answer %q is not a result", ex.method, ex.body)
	}
	if err := json.Unmarshal(resp.Result, out); err != nil {
		tb.Fatalf("%s result %q: %v", ex.method, resp.Result, err)
	}
}

// rpcError returns the JSON-RPC error in err, or fails the test.
func rpcError(tb testing.TB, what string, err error) *jsonrpc.Error {
	tb.Helper()
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		tb.Fatalf("%s: got %v, want a JSON-RPC error", what, err)
	}
	return werr
}

// A client restricted to 2026-07-28 uses the catalogue without a session: it discovers
// the server, every request carries the version and the caller's own token, answers
// that depend on the caller are marked private, and who the caller is gets decided
// anew on every request.
func TestMCPStatelessEra(t *testing.T) {
	c := startCatalog(t, catalog.AuthTokenReview)
	ns, other := newNamespace(t), newNamespace(t)
	createServer(t, ns, serverSpec{name: "docs", description: "Documentation search", tools: []mcpv1alpha1.ToolInfo{
		tool("search_docs", "Search documentation", "Full-text search over the docs"),
	}})
	createServer(t, other, serverSpec{name: "secret-project", tools: []mcpv1alpha1.ToolInfo{tool("search_secrets", "", "")}})
	token := newCaller(t, ns, "agent", true)
	otherToken := newCaller(t, other, "agent", true)
	c.waitServers(t, token, ns, 1)
	c.waitServers(t, otherToken, other, 1)

	// A client that would follow tool list changes: the catalogue's never change, so it
	// must not be asked to hold a subscriptions/listen stream open for them.
	w := &wire{token: token}
	session, err := eraSession(t, c, statelessEra, w, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {},
	})
	if err != nil {
		t.Fatalf("a 2026-07-28 client cannot connect: %v", err)
	}
	if got := session.InitializeResult().ProtocolVersion; got != statelessEra {
		t.Fatalf("negotiated %q, want %q", got, statelessEra)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listed, err := session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed.Tools) != 4 {
		t.Errorf("tools/list: %d tools, want 4", len(listed.Tools))
	}
	// The catalogue's tools answer whoever is authenticated, so no shared cache may keep
	// them for someone else.
	if listed.CacheScope != "private" || listed.TTLMs != catalog.MCPCacheTTLMs {
		t.Errorf("tools/list caching hints: ttlMs %d, cacheScope %q; want %d, private", listed.TTLMs, listed.CacheScope, catalog.MCPCacheTTLMs)
	}

	var found catalog.ToolList
	callTool(t, session, "search_tools", map[string]any{"query": "search"}, &found)
	if got := toolNames(found); !slices.Equal(got, []string{ns + "/docs/search_docs"}) {
		t.Errorf("search_tools = %q", got)
	}
	var servers catalog.ServerList
	callTool(t, session, "list_servers", nil, &servers)
	if got := serverNames(servers); !slices.Equal(got, []string{ns + "/docs"}) {
		t.Errorf("list_servers = %q", got)
	}
	var detail catalog.ServerDetail
	callTool(t, session, "get_server", map[string]any{"namespace": ns, "name": "docs"}, &detail)
	if detail.Name != "docs" || len(detail.Tools) != 1 {
		t.Errorf("get_server = %+v", detail)
	}

	// On the wire: discover instead of initialize, the version and method on every
	// request, the tool's name on every call, and never a session.
	exchanges := w.recorded()
	if len(exchanges) == 0 || exchanges[0].method != "server/discover" {
		t.Fatalf("the client's first request was not server/discover: %+v", exchanges)
	}
	var discovered mcp.DiscoverResult
	exchanges[0].result(t, &discovered)
	if !slices.Contains(discovered.SupportedVersions, statelessEra) || !slices.Contains(discovered.SupportedVersions, sessionEra) {
		t.Errorf("server/discover supports %q", discovered.SupportedVersions)
	}
	if discovered.CacheScope != "private" || discovered.TTLMs != catalog.MCPCacheTTLMs {
		t.Errorf("server/discover caching hints: ttlMs %d, cacheScope %q", discovered.TTLMs, discovered.CacheScope)
	}
	if caps, _ := json.Marshal(discovered.Capabilities); string(caps) != `{"tools":{}}` {
		t.Errorf("server/discover capabilities %s, want tools only, without listChanged", caps)
	}
	for _, ex := range exchanges {
		if ex.method == "initialize" || ex.method == "notifications/initialized" || ex.method == "subscriptions/listen" {
			t.Errorf("a 2026-07-28 client sent %s", ex.method)
		}
		if ex.status != http.StatusOK {
			t.Errorf("%s: HTTP %d %s", ex.method, ex.status, ex.body)
		}
		if v := ex.request.Get("Mcp-Protocol-Version"); v != statelessEra {
			t.Errorf("%s: Mcp-Protocol-Version %q", ex.method, v)
		}
		if m := ex.request.Get("Mcp-Method"); m != ex.method {
			t.Errorf("%s: Mcp-Method %q", ex.method, m)
		}
		if ex.method == "tools/call" && ex.request.Get("Mcp-Name") == "" {
			t.Errorf("tools/call without Mcp-Name")
		}
		if id := ex.response.Get("Mcp-Session-Id"); id != "" {
			t.Errorf("%s: the catalogue issued session %q", ex.method, id)
		}
	}

	// Each request is authenticated on its own: the same client with another caller's
	// token sees that caller's namespaces only, and without a valid token gets 401.
	w.setToken(otherToken)
	servers = catalog.ServerList{}
	callTool(t, session, "list_servers", nil, &servers)
	if got := serverNames(servers); !slices.Equal(got, []string{other + "/secret-project"}) {
		t.Errorf("list_servers with the other caller's token = %q", got)
	}
	found = catalog.ToolList{}
	callTool(t, session, "search_tools", map[string]any{"query": "search"}, &found)
	if got := toolNames(found); !slices.Equal(got, []string{other + "/secret-project/search_secrets"}) {
		t.Errorf("search_tools with the other caller's token = %q", got)
	}
	res := callTool(t, session, "get_server", map[string]any{"namespace": ns, "name": "docs"}, nil)
	if !res.IsError || !strings.Contains(toolText(res), "cannot list mcpservers") {
		t.Errorf("get_server in the first caller's namespace with the other caller's token: %+v", res)
	}
	forged := token[:len(token)-8] + "AAAAAAAA"
	for _, bad := range []string{"", "not-a-jwt", forged} {
		w.setToken(bad)
		_, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "list_servers"})
		last := w.recorded()[len(w.recorded())-1]
		if err == nil || last.status != http.StatusUnauthorized {
			t.Errorf("tools/call with token %.10q: HTTP %d, err %v; want 401", bad, last.status, err)
		}
	}
}

// A client of the session era (2025-11-25 and before) initializes as it always did, and
// is never handed a session the next request would need.
func TestMCPSessionEra(t *testing.T) {
	c := startCatalog(t, catalog.AuthTokenReview)
	ns := newNamespace(t)
	createServer(t, ns, serverSpec{name: "docs", tools: []mcpv1alpha1.ToolInfo{tool("search_docs", "", "Search the docs")}})
	token := newCaller(t, ns, "agent", true)
	c.waitServers(t, token, ns, 1)

	for _, version := range []string{sessionEra, "2025-06-18", "2025-03-26"} {
		t.Run(version, func(t *testing.T) {
			w := &wire{token: token}
			session, err := eraSession(t, c, version, w, nil)
			if err != nil {
				t.Fatalf("a %s client cannot connect: %v", version, err)
			}
			if got := session.InitializeResult().ProtocolVersion; got != version {
				t.Fatalf("negotiated %q, want %q", got, version)
			}
			var found catalog.ToolList
			callTool(t, session, "search_tools", map[string]any{"query": "docs"}, &found)
			if got := toolNames(found); !slices.Equal(got, []string{ns + "/docs/search_docs"}) {
				t.Errorf("search_tools = %q", got)
			}
			var methods []string
			for _, ex := range w.recorded() {
				methods = append(methods, ex.method)
				if id := ex.response.Get("Mcp-Session-Id"); id != "" {
					t.Errorf("%s: the catalogue issued session %q", ex.method, id)
				}
				if ex.status != http.StatusOK && ex.status != http.StatusAccepted {
					t.Errorf("%s: HTTP %d %s", ex.method, ex.status, ex.body)
				}
			}
			if want := []string{"initialize", "notifications/initialized", "tools/call"}; !slices.Equal(methods, want) {
				t.Errorf("requests %q, want %q", methods, want)
			}
		})
	}
}

// postMCP posts one JSON-RPC request, encoded by go-sdk, to the catalogue's /mcp with
// the stateless era's headers for it (unless headers override them), and returns the
// HTTP status and body of the answer.
func postMCP(tb testing.TB, c *running, token string, req *jsonrpc.Request, headers map[string]string) (int, []byte) {
	tb.Helper()
	body, err := jsonrpc.EncodeMessage(req)
	if err != nil {
		tb.Fatal(err)
	}
	return postMCPBody(tb, c, token, req.Method, body, headers)
}

// postMCPBody is postMCP for a body the test wrote itself.
func postMCPBody(tb testing.TB, c *running, token, method string, body []byte, headers map[string]string) (int, []byte) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/mcp", bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json, text/event-stream")
	hreq.Header.Set("Mcp-Protocol-Version", statelessEra)
	hreq.Header.Set("Mcp-Method", method)
	for k, v := range headers {
		hreq.Header.Set(k, v)
	}
	resp, err := bearerTransport{token: token}.RoundTrip(hreq)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, data
}

// answer decodes a JSON-RPC response as go-sdk does; nil when it is none.
func answer(data []byte) *jsonrpc.Response {
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return nil
	}
	r, _ := msg.(*jsonrpc.Response)
	return r
}

// errorCode reads the error code of a JSON-RPC error answer, which may lack an id (the
// request's id could not be read).
func errorCode(data []byte) (int64, bool) {
	var r struct {
		Error *struct {
			Code int64 `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &r) != nil || r.Error == nil {
		return 0, false
	}
	return r.Error.Code, true
}

// statelessCall is a 2026-07-28 tools/call request for tool with args, at version.
func statelessCall(tb testing.TB, version, tool string, args map[string]any) *jsonrpc.Request {
	tb.Helper()
	params, err := json.Marshal(&mcp.CallToolParams{
		Meta: mcp.Meta{
			"io.modelcontextprotocol/protocolVersion":    version,
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		},
		Name:      tool,
		Arguments: args,
	})
	if err != nil {
		tb.Fatal(err)
	}
	id, err := jsonrpc.MakeID(float64(1))
	if err != nil {
		tb.Fatal(err)
	}
	return &jsonrpc.Request{ID: id, Method: "tools/call", Params: params}
}

// Stateless requests are judged before they run: headers that disagree with the body,
// versions the catalogue does not speak, bodies that could be read two ways and
// requests without a valid token never reach a tool.
func TestMCPStatelessRequestsAreJudged(t *testing.T) {
	c := startCatalog(t, catalog.AuthTokenReview)
	ns := newNamespace(t)
	createServer(t, ns, serverSpec{name: "docs", tools: []mcpv1alpha1.ToolInfo{tool("search_docs", "", "Search the docs")}})
	token := newCaller(t, ns, "agent", true)
	c.waitServers(t, token, ns, 1)

	// A go-sdk client whose Mcp-Name or Mcp-Method header is changed on the way.
	w := &wire{token: token}
	session, err := eraSession(t, c, statelessEra, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for header, value := range map[string]string{"Mcp-Name": "list_servers", "Mcp-Method": "tools/list"} {
		w.setRewrite(func(r *http.Request) { r.Header.Set(header, value) })
		_, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "get_server", Arguments: map[string]any{"namespace": ns, "name": "docs"}})
		if werr := rpcError(t, "a call whose "+header+" disagrees with its body", err); werr.Code != mcp.CodeHeaderMismatch {
			t.Errorf("%s mismatch: code %d (%s), want %d", header, werr.Code, werr.Message, mcp.CodeHeaderMismatch)
		}
		recorded := w.recorded()
		if last := recorded[len(recorded)-1]; last.status != http.StatusBadRequest {
			t.Errorf("%s mismatch: HTTP %d, want 400", header, last.status)
		}
	}
	w.setRewrite(nil)
	var servers catalog.ServerList
	callTool(t, session, "list_servers", nil, &servers)
	if len(servers.Items) != 1 {
		t.Errorf("after the refused calls, list_servers = %+v", servers)
	}

	// A version the catalogue does not speak is refused with the versions it does.
	status, data := postMCP(t, c, token, statelessCall(t, "2099-01-01", "list_servers", nil), map[string]string{
		"Mcp-Protocol-Version": "2099-01-01", "Mcp-Name": "list_servers",
	})
	resp := answer(data)
	if resp == nil || resp.Error == nil {
		t.Fatalf("tools/call at 2099-01-01: HTTP %d %s, want a JSON-RPC error", status, data)
	}
	werr := rpcError(t, "tools/call at 2099-01-01", resp.Error)
	var unsupported mcp.UnsupportedProtocolVersionData
	if err := json.Unmarshal(werr.Data, &unsupported); err != nil {
		t.Fatalf("error data %q: %v", werr.Data, err)
	}
	if status != http.StatusBadRequest || werr.Code != mcp.CodeUnsupportedProtocolVersion || unsupported.Requested != "2099-01-01" ||
		!slices.Contains(unsupported.Supported, statelessEra) || !slices.Contains(unsupported.Supported, sessionEra) {
		t.Errorf("tools/call at 2099-01-01: HTTP %d, code %d, data %s", status, werr.Code, werr.Data)
	}
	// A go-sdk client that asks for it settles on 2026-07-28 from that list.
	w = &wire{token: token}
	session, err = eraSession(t, c, "2099-01-01", w, nil)
	if err != nil {
		t.Fatalf("a client asking for 2099-01-01 cannot connect: %v", err)
	}
	if got := session.InitializeResult().ProtocolVersion; got != statelessEra {
		t.Errorf("a client asking for 2099-01-01 settled on %q, want %q", got, statelessEra)
	}

	// The well-formed call the next cases spoil.
	status, data = postMCP(t, c, token, statelessCall(t, statelessEra, "list_servers", nil), map[string]string{"Mcp-Name": "list_servers"})
	if resp := answer(data); status != http.StatusOK || resp == nil || resp.Error != nil {
		t.Fatalf("a well-formed stateless tools/call: HTTP %d %s", status, data)
	}
	// Bodies another reader could read as a different call: the tool's name twice, or in
	// another case; a namespace argument twice.
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, params := range []string{
		`{` + meta + `,"name":"get_server","name":"list_servers"}`,
		`{` + meta + `,"name":"list_servers","NAME":"get_server","arguments":{"namespace":"` + ns + `","name":"docs"}}`,
		`{` + meta + `,"name":"list_servers","arguments":{"namespace":"kube-system","namespace":"` + ns + `"}}`,
	} {
		body := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":` + params + `}`)
		status, data := postMCPBody(t, c, token, "tools/call", body, map[string]string{"Mcp-Name": "list_servers"})
		if code, ok := errorCode(data); status != http.StatusBadRequest || !ok || code != jsonrpc.CodeInvalidRequest {
			t.Errorf("ambiguous call %s: HTTP %d %s; want 400 with JSON-RPC error %d", params, status, data, jsonrpc.CodeInvalidRequest)
		}
	}

	// Bounded as every catalogue request is.
	big := statelessCall(t, statelessEra, "search_tools", map[string]any{"query": strings.Repeat("x", 128<<10)})
	if status, _ := postMCP(t, c, token, big, map[string]string{"Mcp-Name": "search_tools"}); status != http.StatusRequestEntityTooLarge {
		t.Errorf("a 128 KiB stateless call: HTTP %d, want 413", status)
	}

	// No valid token, no answer: each stateless request authenticates on its own.
	forged := token[:len(token)-8] + "AAAAAAAA"
	for _, bad := range []string{"", "not-a-jwt", forged} {
		status, _ := postMCP(t, c, bad, statelessCall(t, statelessEra, "list_servers", nil), map[string]string{"Mcp-Name": "list_servers"})
		if status != http.StatusUnauthorized {
			t.Errorf("stateless tools/call with token %.10q: HTTP %d, want 401", bad, status)
		}
	}
}

// Without authentication (switchboard dev) every caller gets the same answers, and the
// catalogue says a shared cache may keep them.
func TestMCPCacheScopeWithoutAuth(t *testing.T) {
	c := startCatalog(t, catalog.AuthNone)
	session, err := eraSession(t, c, statelessEra, &wire{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listed, err := session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if listed.CacheScope != "public" || listed.TTLMs != catalog.MCPCacheTTLMs {
		t.Errorf("tools/list caching hints without authentication: ttlMs %d, cacheScope %q", listed.TTLMs, listed.CacheScope)
	}
}

// BenchmarkMCPSearchTools measures one search_tools call through the catalogue's /mcp
// over loopback, per protocol era, with the caller's authentication cached:
//
//	go test -run '^$' -bench BenchmarkMCPSearchTools ./catalog/
func BenchmarkMCPSearchTools(b *testing.B) {
	c := startCatalog(b, catalog.AuthTokenReview, func(o *catalog.Options) { o.AuthCacheTTL = 10 * time.Minute })
	ns := newNamespace(b)
	for i := range 20 {
		createServer(b, ns, serverSpec{name: "server-" + string(rune('a'+i)), tools: []mcpv1alpha1.ToolInfo{
			tool("search_issues", "Search issues", "Search the issues of a project"),
			tool("create_ticket", "Create a ticket", "Open a ticket in the tracker"),
		}})
	}
	token := newCaller(b, ns, "bench-agent", true)
	c.waitServers(b, token, ns, 20)
	for _, version := range []string{statelessEra, sessionEra} {
		b.Run(version, func(b *testing.B) {
			session := mcpSessionAt(b, c, token, version)
			ctx := context.Background()
			args := map[string]any{"query": "search issues", "namespace": ns, "limit": 10}
			for b.Loop() {
				res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "search_tools", Arguments: args})
				if err != nil || res.IsError {
					b.Fatalf("search_tools: %v %+v", err, res)
				}
			}
		})
	}
}
