package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// sessionlessVersion is MCP's first protocol version without sessions.
const sessionlessVersion = "2026-07-28"

// connectSessionless connects a go-sdk client that speaks only the sessionless era
// through the gateway: it discovers the server and sends every request on its own.
func (h *harness) connectSessionless() *mcp.ClientSession {
	h.t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   h.url(),
		HTTPClient: &http.Client{Transport: bearer{token: callerToken}},
		MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: sessionlessVersion})
	if err != nil {
		h.t.Fatalf("connecting a %s client through the gateway: %v", sessionlessVersion, err)
	}
	h.t.Cleanup(func() { _ = cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != sessionlessVersion {
		h.t.Fatalf("the client settled on %q through the gateway, want %s", got, sessionlessVersion)
	}
	return cs
}

// A client of the sessionless era uses a server of either era through the gateway: it
// discovers the server, lists and calls its tools without a session, and the server
// never sees the caller's token.
func TestASessionlessClientUsesServersOfBothEras(t *testing.T) {
	for _, era := range []struct {
		name      string
		stateless bool
	}{{"server with sessions (2025-11-25)", false}, {"sessionless server (2026-07-28)", true}} {
		t.Run(era.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{statelessUpstream: era.stateless})
			initializedBefore := h.upstream.calls("initialize") // the connector's own session's
			cs := h.connectSessionless()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			if len(tools.Tools) != 3 {
				t.Errorf("tools/list answered %d tools, want the server's 3", len(tools.Tools))
			}
			for i := range 3 {
				got, err := callText(t, cs, "echo", map[string]any{"text": "hello"})
				if err != nil || got != "hello" {
					t.Fatalf("call %d of echo answered %q, %v; want hello", i, got, err)
				}
			}
			if n := h.gw.Sessions(); n != 0 {
				t.Errorf("the gateway holds %d client sessions for a sessionless client, want none", n)
			}
			for _, v := range h.upstream.seenHeaders("Authorization") {
				if strings.Contains(v, callerToken) {
					t.Fatal("the caller's token reached the server")
				}
			}
			if lines := h.audit.matching(`"Tool call"`, `"tool"="echo"`, `"outcome"="ok"`); len(lines) != 3 {
				t.Errorf("audit lines of the echo calls: %d, want 3:\n%s", len(lines), h.audit.all())
			}
			initialized := h.upstream.calls("initialize") - initializedBefore
			if era.stateless {
				if initialized != 0 {
					t.Errorf("the sessionless server was sent initialize %d times", initialized)
				}
			} else if initialized != 1 {
				t.Errorf("the server with sessions was sent initialize %d times for three calls, want 1 (the session is kept)", initialized)
			}
		})
	}
}

// The server's tool policy holds for sessionless requests: a denied tool is neither
// listed nor called, and the server never sees the call.
func TestSessionlessRequestsKeepTheToolPolicy(t *testing.T) {
	h := newHarness(t, harnessOptions{statelessUpstream: true, server: func(s *mcpv1alpha1.MCPServer) {
		s.Spec.Tools = &mcpv1alpha1.ToolFilter{Deny: []string{"delete_*"}}
	}})
	cs := h.connectSessionless()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "delete_all" {
			t.Error("tools/list lists delete_all, which spec.tools.deny hides")
		}
	}
	if got, err := callText(t, cs, "delete_all", nil); err == nil {
		t.Errorf("delete_all answered %q through the gateway; want it refused", got)
	}
	if n := h.upstream.calls("tools/call"); n != 0 {
		t.Errorf("the server received %d tools/call for a denied tool", n)
	}
	if lines := h.audit.matching(`"tool"="delete_all"`, `"outcome"="denied"`); len(lines) != 1 {
		t.Errorf("audit lines of the denied call: %d, want 1:\n%s", len(lines), h.audit.all())
	}
}

// postSessionless sends one sessionless request with the given headers and returns the
// HTTP status and the JSON-RPC error code of the answer (0 without one).
func postSessionless(t *testing.T, h *harness, header map[string]string, body string) (int, int64) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, h.url(), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+callerToken)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	text := string(data)
	if i := strings.Index(text, "data: "); i >= 0 {
		text = strings.TrimSpace(text[i+len("data: "):])
	}
	var answer struct {
		Error *struct {
			Code int64 `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(text), &answer) != nil || answer.Error == nil {
		return resp.StatusCode, 0
	}
	return resp.StatusCode, answer.Error.Code
}

// A sessionless request whose Mcp-Method or Mcp-Name header says other than its body is
// refused with HeaderMismatch, one of a version the gateway does not speak with
// UnsupportedProtocolVersion, and one without the client's capabilities with
// InvalidParams; none reaches the server.
func TestSessionlessRequestsAreJudgedOnHeadersThatMatchTheirBody(t *testing.T) {
	h := newHarness(t, harnessOptions{statelessUpstream: true})
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"%s","io.modelcontextprotocol/clientCapabilities":{}}`
	call := func(version, tool string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":{},` +
			strings.Replace(meta, "%s", version, 1) + `}}`
	}
	headers := func(method, name, version string) map[string]string {
		return map[string]string{"Mcp-Method": method, "Mcp-Name": name, "MCP-Protocol-Version": version}
	}
	const headerMismatch, unsupportedVersion, invalidParams = -32020, -32022, -32602
	for _, tc := range []struct {
		name   string
		header map[string]string
		body   string
		code   int64
	}{
		{"Mcp-Name names another tool", headers("tools/call", "echo", sessionlessVersion), call(sessionlessVersion, "delete_all"), headerMismatch},
		{"Mcp-Method names another method", headers("tools/list", "delete_all", sessionlessVersion), call(sessionlessVersion, "delete_all"), headerMismatch},
		{"no Mcp-Name", map[string]string{"Mcp-Method": "tools/call", "MCP-Protocol-Version": sessionlessVersion}, call(sessionlessVersion, "delete_all"), headerMismatch},
		{"an unknown protocol version", headers("tools/call", "delete_all", "2099-01-01"), call("2099-01-01", "delete_all"), unsupportedVersion},
		{"no client capabilities", headers("tools/call", "delete_all", sessionlessVersion),
			strings.Replace(call(sessionlessVersion, "delete_all"), `,"io.modelcontextprotocol/clientCapabilities":{}`, "", 1), invalidParams},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, code := postSessionless(t, h, tc.header, tc.body)
			if code != tc.code || status != http.StatusBadRequest {
				t.Errorf("answered HTTP %d with JSON-RPC error %d, want 400 with %d", status, code, tc.code)
			}
		})
	}
	if n := h.upstream.calls("tools/call"); n != 0 {
		t.Errorf("the server received %d tools/call of refused requests", n)
	}
}

// connectSessionlessTo connects a client of the sessionless era to endpoint with opts.
func connectSessionlessTo(t *testing.T, endpoint string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs := connectAs(t, endpoint, callerToken, sessionlessVersion, opts)
	if got := cs.InitializeResult().ProtocolVersion; got != sessionlessVersion {
		t.Fatalf("the client settled on %q, want %s", got, sessionlessVersion)
	}
	return cs
}

// A server of the session era asks its client a question in the middle of a call; a
// client of the sessionless era gets it as input_required, answers it with its retry,
// and gets the call's result: the question and the answer cross the eras.
func TestASessionEraElicitationReachesASessionlessClient(t *testing.T) {
	tickets := newTicketsUpstream(t)
	h := newHarness(t, harnessOptions{upstreamURL: tickets.URL})
	asked := make(chan string, 4)
	cs := connectSessionlessTo(t, h.url(), &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- req.Params.Message
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"priority": "high"}}, nil
		},
	})
	for i := range 2 {
		got, err := callText(t, cs, "ask", nil)
		if err != nil || got != "accept:high" {
			t.Fatalf("round trip %d: ask answered %q, %v; want accept:high", i, got, err)
		}
		select {
		case q := <-asked:
			if q != "Which priority?" {
				t.Errorf("the client was asked %q", q)
			}
		default:
			t.Fatal("the server's question never reached the client")
		}
	}
	// A requestState this replica never issued is refused, not passed to the server.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask", RequestState: "switchboard-input-FORGED"}); err == nil ||
		!strings.Contains(err.Error(), "call the tool again") {
		t.Errorf("a forged requestState answered %v; want it refused", err)
	}
}

// A toolset serves the sessionless era too, in Direct and Search mode: its tools are
// listed and called without a session, under the toolset's names and rules, and one
// caller's requests share the upstream sessions this replica opened for it.
func TestASessionlessClientUsesAToolset(t *testing.T) {
	h := newToolsetHarness(t, nil)
	notesInits := h.notes.calls("initialize")
	cs := connectSessionlessTo(t, h.url(), nil)
	if got, want := toolNames(t, cs), []string{"notes_echo", "search", "t_ask", "t_create_ticket"}; !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}
	for range 3 {
		if text, err := callText(t, cs, "notes_echo", map[string]any{"text": "hello"}); err != nil || text != "hello" {
			t.Fatalf("notes_echo = %q, %v; want hello", text, err)
		}
	}
	if text, err := callText(t, cs, "t_create_ticket", nil); err != nil || text != "created" {
		t.Errorf("t_create_ticket = %q, %v; want created", text, err)
	}
	if _, err := callText(t, cs, "notes_delete_all", nil); err == nil {
		t.Error("notes_delete_all, which the toolset denies, was called")
	}
	if n := h.notes.calls("initialize") - notesInits; n != 1 {
		t.Errorf("four requests opened %d upstream sessions with notes, want 1", n)
	}
	if lines := h.audit.matching(`"Tool call"`, `"tool"="notes_echo"`, `"outcome"="ok"`); len(lines) != 3 {
		t.Errorf("audit lines of the notes_echo calls: %d, want 3:\n%s", len(lines), h.audit.all())
	}

	ts := h.toolset.DeepCopy()
	ts.Spec.Discovery = mcpv1alpha1.ToolsetDiscoverySearch
	h.gw.UpdateToolset(ts)
	testutil.Eventually(t, 5*time.Second, "Search mode's tools", func() error {
		if got := toolNames(t, cs); !slices.Equal(got, []string{"call_tool", "find_tools"}) {
			return fmt.Errorf("tools = %v", got)
		}
		return nil
	})
	if text, err := callText(t, cs, "call_tool", map[string]any{"name": "notes_echo", "arguments": map[string]any{"text": "hi"}}); err != nil || text != "hi" {
		t.Errorf("call_tool(notes_echo) = %q, %v; want hi", text, err)
	}
}

// A client of the session era uses a server that speaks only the sessionless era (go-sdk's
// stateless server) through the gateway: its session is the gateway's to keep.
func TestASessionClientUsesASessionlessServer(t *testing.T) {
	h := newHarness(t, harnessOptions{statelessUpstream: true})
	cs := h.connect(nil)
	if got := cs.InitializeResult().ProtocolVersion; got != sessionEra {
		t.Fatalf("the client settled on %q, want %s", got, sessionEra)
	}
	for i := range 3 {
		if got, err := callText(t, cs, "echo", map[string]any{"text": "hello"}); err != nil || got != "hello" {
			t.Fatalf("call %d of echo answered %q, %v; want hello", i, got, err)
		}
	}
	if n := h.gw.Sessions(); n != 1 {
		t.Errorf("the gateway holds %d sessions, want the client's 1", n)
	}
}

// A plain sessionless tools/call is answered by the gateway's own direct path, which
// judges the name it forwards: a denied tool spelled with a JSON escape, in its value or
// in its member's name, is still the denied tool; a second spelling of name or _meta is
// refused as invalid; and a call that qualifies is answered as JSON. None of the refused
// calls reaches the server.
func TestTheDirectAnswerJudgesTheNameItForwards(t *testing.T) {
	h := newHarness(t, harnessOptions{statelessUpstream: true, server: func(s *mcpv1alpha1.MCPServer) {
		s.Spec.Tools = &mcpv1alpha1.ToolFilter{Deny: []string{"delete_*"}}
	}})
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	header := func(name string) map[string]string {
		return map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": name, "MCP-Protocol-Version": sessionlessVersion}
	}
	const refused, invalidRequest = -32602, -32600
	for _, tc := range []struct {
		name, header, params string
		code                 int64
	}{
		{"an escape in the name", "delete_all", `{"name":"del\u0065te_all","arguments":{},` + meta + `}`, refused},
		{"an escape in the member's name", "delete_all", `{"n\u0061me":"delete_all","arguments":{},` + meta + `}`, refused},
		{"a second spelling of name", "echo", `{"name":"echo","NAME":"delete_all","arguments":{},` + meta + `}`, invalidRequest},
		{"_meta spelled otherwise", "delete_all", `{"name":"delete_all","arguments":{},` + strings.Replace(meta, "_meta", "_META", 1) + `}`, invalidRequest},
		// Past the few names the front door compares in turn, they are kept by folded
		// form: a case twin 20,000 members on is found there, and in linear time.
		{"a case twin far into wide arguments", "echo", `{"name":"echo","arguments":` + wideArguments(20000, `"M0":"x"`) + `,` + meta + `}`, invalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, code := postSessionless(t, h, header(tc.header), `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":`+tc.params+`}`)
			if code != tc.code {
				t.Errorf("answered with JSON-RPC error %d, want %d", code, tc.code)
			}
		})
	}
	if n := h.upstream.calls("tools/call"); n != 0 {
		t.Fatalf("the server received %d tools/call of refused requests", n)
	}

	body := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},` + meta + `}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, h.url(), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header("echo") {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+callerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(data), `"id":2`) || !strings.Contains(string(data), "hi") {
		t.Errorf("a plain call answered HTTP %d %s: %s; want 200 with the JSON result", resp.StatusCode, resp.Header.Get("Content-Type"), data)
	}
	if n := h.upstream.calls("tools/call"); n != 1 {
		t.Errorf("the server received %d tools/call, want 1", n)
	}
}

// wideArguments is a JSON object of n members "m0".."m{n-1}" and then last.
func wideArguments(n int, last string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		fmt.Fprintf(&b, `"m%d":%d,`, i, i)
	}
	b.WriteString(last + "}")
	return b.String()
}

// A plain sessionless tools/call carries the client's own _meta to the server: its info
// and capabilities, and any other member, objects as the client sent them, and not the
// gateway's client session's own.
func TestTheDirectAnswerForwardsTheClientsMeta(t *testing.T) {
	h := newHarness(t, harnessOptions{statelessUpstream: true})
	type seen struct {
		info *mcp.Implementation
		caps *mcp.ClientCapabilities
		meta map[string]any
	}
	calls := make(chan seen, 1)
	h.upstream.mcp.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if cr, ok := req.(*mcp.CallToolRequest); ok {
				select {
				case calls <- seen{info: cr.ClientInfo(), caps: cr.ClientCapabilities(), meta: cr.Params.Meta}:
				default:
				}
			}
			return next(ctx, method, req)
		}
	})
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}},"experimental":{"com.example/x":{"on":true}}},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"raw-agent","version":"7"},` +
		`"com.example/context":{"list":[1,"two",{"three":null}],"text":"<a&b>"},"com.example/n":3}`
	status, code := postSessionless(t, h, map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "echo", "MCP-Protocol-Version": sessionlessVersion},
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},`+meta+`}}`)
	if status != http.StatusOK || code != 0 {
		t.Fatalf("the call answered HTTP %d, JSON-RPC error %d", status, code)
	}
	var got seen
	select {
	case got = <-calls:
	default:
		t.Fatal("the server received no tools/call")
	}
	if got.info == nil || got.info.Name != "raw-agent" || got.info.Version != "7" {
		t.Errorf("the server saw client info %+v, want the client's raw-agent 7", got.info)
	}
	if got.caps == nil || got.caps.Elicitation == nil || got.caps.Elicitation.Form == nil {
		t.Errorf("the server saw client capabilities %+v, want the client's form elicitation", got.caps)
	}
	var want map[string]any
	if err := json.Unmarshal([]byte(`{"com.example/context":{"list":[1,"two",{"three":null}],"text":"<a&b>"},"com.example/n":3,`+
		`"experimental":{"com.example/x":{"on":true}}}`), &want); err != nil {
		t.Fatal(err)
	}
	capsMeta, _ := got.meta["io.modelcontextprotocol/clientCapabilities"].(map[string]any)
	gotOwn := map[string]any{"com.example/context": got.meta["com.example/context"], "com.example/n": got.meta["com.example/n"],
		"experimental": capsMeta["experimental"]}
	if fmt.Sprint(gotOwn) != fmt.Sprint(want) {
		t.Errorf("the server saw the client's own _meta members as %v, want %v", gotOwn, want)
	}
}

// A sessionless client that gives up on a call ends it at the server too: the gateway's
// request to the server ends, and the tool's handler sees its context end long before it
// would have answered by itself.
func TestAnAbandonedSessionlessCallEndsAtTheServer(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
	started, ended := make(chan struct{}, 1), make(chan struct{}, 1)
	mcp.AddTool(server, &mcp.Tool{Name: "wait", Description: "Answers after a minute."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			started <- struct{}{}
			select {
			case <-ctx.Done():
				ended <- struct{}{}
				return nil, nil, ctx.Err()
			case <-time.After(time.Minute):
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
			}
		})
	upstream := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true}))
	t.Cleanup(func() {
		upstream.CloseClientConnections()
		upstream.Close()
	})
	h := newHarness(t, harnessOptions{upstreamURL: upstream.URL, timeout: time.Minute})
	cs := h.connectSessionless()

	ctx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	answered := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "wait"})
		answered <- err
	}()
	select {
	case <-started:
	case err := <-answered:
		t.Fatalf("the call ended before the tool ran: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the tool did not start within 10s")
	}
	giveUp()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the tool still runs 5s after its client gave up on the call")
	}
	if err := <-answered; !errors.Is(err, context.Canceled) {
		t.Errorf("the abandoned call returned %v, want context.Canceled", err)
	}
}

// Sessionless calls from several callers share the gateway's one client of a server, and
// each goes out on its caller's handler: none waits for another's answer to be sent. The
// server here answers with JSON, so it sends no headers until the tool is done, and the
// tool answers only once two calls are inside it: calls sent one after the other would
// never meet.
func TestSessionlessCallsToOneServerAreSentSideBySide(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "meeting", Version: "1"}, nil)
	var inside sync.WaitGroup
	inside.Add(2)
	mcp.AddTool(server, &mcp.Tool{Name: "meet", Description: "Answers once two calls are inside."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			inside.Done()
			met := make(chan struct{})
			go func() { inside.Wait(); close(met) }()
			select {
			case <-met:
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "met"}}}, nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	upstream := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	t.Cleanup(func() {
		upstream.CloseClientConnections()
		upstream.Close()
	})
	h := newHarness(t, harnessOptions{upstreamURL: upstream.URL, timeout: 20 * time.Second})

	answers := make(chan error, 2)
	for range 2 {
		cs := h.connectSessionless()
		go func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "meet"})
			if err == nil && (res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "met") {
				err = fmt.Errorf("answered %+v", res)
			}
			answers <- err
		}()
	}
	for range 2 {
		select {
		case err := <-answers:
			if err != nil {
				t.Errorf("a call of two that must meet at the server: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("two calls that must meet at the server are still unanswered after a minute")
		}
	}
}

// The id of a sessionless call is the caller's, and the answer names it as sent and
// nothing else: an id whose string looks like the rest of a response stays one string,
// and an id spelt twice, or of a type JSON-RPC does not allow, is refused before the
// server hears of the call.
func TestASessionlessCallIsAnsweredUnderTheIDItWasSentAndNoOther(t *testing.T) {
	h := newHarness(t, harnessOptions{statelessUpstream: true})
	call := func(id string) answer {
		t.Helper()
		resp, err := postSessionlessBody(t.Context(), h.url(), callerToken, "tools/call", "echo",
			`{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},`+sessionlessMeta+`}}`)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return answer{status: resp.StatusCode, header: resp.Header, body: string(data)}
	}

	const forgery = `1","result":{"forged":true},"x":"`
	quoted, _ := json.Marshal(forgery)
	a := call(string(quoted))
	var members map[string]json.RawMessage
	if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &members) != nil {
		t.Fatalf("the call with a forged-looking id: %d %s; want 200 and one JSON response", a.status, a.body)
	}
	var id string
	if json.Unmarshal(members["id"], &id) != nil || id != forgery {
		t.Errorf("answered under id %s, want the string sent", members["id"])
	}
	if len(members) != 3 || !strings.Contains(string(members["result"]), `"text":"hello"`) || strings.Contains(a.body, `"forged":true}`) {
		t.Errorf("the answer has members %d, body %s; want jsonrpc, id and the echo's result alone", len(members), a.body)
	}
	if n := h.upstream.calls("tools/call"); n != 1 {
		t.Fatalf("the server received %d tools/call, want the one call", n)
	}

	for _, id := range []string{`1,"id":2`, `1,"ID":2`, `{"a":1}`, `[1]`, `true`, `null`} {
		if a := call(id); a.status == http.StatusOK && !strings.Contains(a.body, `"error"`) {
			t.Errorf("id %s: %d %s; want a refusal", id, a.status, a.body)
		}
	}
	if n := h.upstream.calls("tools/call"); n != 1 {
		t.Errorf("the server received %d tools/call after the refused ids, want still 1", n)
	}
}
