package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// echoingToken is the credential of the echoing server below: characters JSON escapes
// (a quote, a slash some encoders escape) and one outside ASCII, so that a scrubber that
// only looks at the raw bytes of a message misses it.
const echoingToken = `up"stream/secret-é-4f1d`

// escapeEvery writes s as the inside of a JSON string with every character escaped as
// \uXXXX: what a server may send, and what decodes to s.
func escapeEvery(s string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	return b.String()
}

// newCredentialEchoServer is a server that puts the Authorization header it was sent
// into everything it can: tool descriptions, a result, a tool error, a JSON-RPC error,
// a progress notification and an elicitation request; and, sent raw, a result and a
// JSON-RPC error holding the credential escaped character by character.
func newCredentialEchoServer() http.Handler {
	getServer := func(r *http.Request) *mcp.Server {
		auth := r.Header.Get("Authorization")
		s := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
		s.AddTool(&mcp.Tool{Name: "whoami", Description: "Called with " + auth, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				if tok := req.Params.GetProgressToken(); tok != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "working with " + auth})
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Called with " + auth}}}, nil
			})
		s.AddTool(&mcp.Tool{Name: "refuse", Description: "Refuses.", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "refused " + auth}}}, nil
			})
		s.AddTool(&mcp.Tool{Name: "crash", Description: "Crashes.", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return nil, fmt.Errorf("upstream rejected %s", auth)
			})
		s.AddTool(&mcp.Tool{Name: "ask", Description: "Asks.", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Confirm " + auth,
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}}})
				if err != nil {
					return nil, err
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Action}}}, nil
			})
		return s
	}
	escaped := escapeEvery("Bearer " + echoingToken)
	h := http.Handler(mcp.NewStreamableHTTPHandler(getServer, nil))
	h = intercept(h, "resources/read", func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		writeResult(w, id, `{"contents":[{"uri":"test://token","text":"token: `+escaped+`"}]}`)
	})
	return intercept(h, "prompts/get", func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"denied for %s","data":{"%s":["%s",1]}}}`,
			id, escaped, escaped, escaped)
	})
}

// leakedStrings returns the strings of msg, as a client decodes it from the wire,
// that carry the token, keys included.
func leakedStrings(t *testing.T, msg jsonrpc.Message, token string) []string {
	t.Helper()
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		t.Fatalf("the message does not encode: %v", err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("the message is not JSON: %v: %s", err, data)
	}
	var leaks []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			if strings.Contains(v, token) {
				leaks = append(leaks, v)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				walk(k)
				walk(e)
			}
		}
	}
	walk(v)
	if strings.Contains(string(data), token) {
		leaks = append(leaks, string(data))
	}
	return leaks
}

// Everything an Upstream reads from its server (list results, call results, tool and
// JSON-RPC errors, notifications, the server's own requests) reaches the gateway's
// client without the credential the server was sent, in whatever JSON spelling the
// server echoes it.
func TestUpstreamScrubsTheServersCredentialFromWhatItRelays(t *testing.T) {
	srv := startServer(t, newCredentialEchoServer())
	p := testPool(t)
	key := Key{Namespace: "ns", Name: "echoing"}
	cfg := fastConfig(srv.URL)
	cfg.Headers = []Header{{Name: "Authorization", Value: "Bearer " + echoingToken}}
	p.Ensure(key, cfg)
	waitReady(t, p, key)
	u, err := p.OpenUpstream(t.Context(), key, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	// A client that can answer elicitations, as the gateway's clients are.
	init := &jsonrpc.Request{ID: mustID(t, float64(1)), Method: "initialize",
		Params: json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"agent","version":"1"}}`)}
	if err := u.Write(t.Context(), init); err != nil {
		t.Fatal(err)
	}
	if resp := readResponse(t, u); resp.Error != nil {
		t.Fatalf("initialize: %v", resp.Error)
	}
	if err := u.Write(t.Context(), &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		method string
		params string
		// answer answers a request of the server's own during the call.
		answer bool
		// want is said by the answer (or its error) around the redacted credential.
		want string
	}{
		{name: "tool descriptions", method: "tools/list", params: `{}`, want: "Called with [redacted]"},
		{name: "tool result and progress notification", method: "tools/call",
			params: `{"name":"whoami","arguments":{},"_meta":{"progressToken":"p1"}}`, want: "Called with [redacted]"},
		{name: "tool error", method: "tools/call", params: `{"name":"refuse","arguments":{}}`, want: "refused [redacted]"},
		{name: "JSON-RPC error of a tool", method: "tools/call", params: `{"name":"crash","arguments":{}}`, want: "upstream rejected [redacted]"},
		{name: "elicitation request", method: "tools/call", params: `{"name":"ask","arguments":{}}`, answer: true, want: "Confirm [redacted]"},
		{name: "escaped in a result", method: "resources/read", params: `{"uri":"test://token"}`, want: "token: [redacted]"},
		{name: "escaped in a JSON-RPC error", method: "prompts/get", params: `{"name":"x"}`, want: "denied for [redacted]"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := mustID(t, float64(100+i))
			if err := u.Write(t.Context(), &jsonrpc.Request{ID: id, Method: tt.method, Params: json.RawMessage(tt.params)}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
			defer cancel()
			var seen []string
			for {
				msg, err := u.Read(ctx)
				if err != nil {
					t.Fatalf("reading the answer: %v", err)
				}
				for _, token := range []string{echoingToken, "stream/secret"} {
					if leaks := leakedStrings(t, msg, token); len(leaks) > 0 {
						t.Errorf("the Upstream relayed the credential: %q", leaks)
					}
				}
				data, _ := jsonrpc.EncodeMessage(msg)
				var decoded any
				_ = json.Unmarshal(data, &decoded)
				seen = append(seen, fmt.Sprint(decoded))
				if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() && tt.answer {
					resp := &jsonrpc.Response{ID: req.ID, Result: json.RawMessage(`{"action":"accept","content":{}}`)}
					if err := u.Write(t.Context(), resp); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if resp, ok := msg.(*jsonrpc.Response); ok && resp.ID == id {
					break
				}
			}
			if all := strings.Join(seen, "\n"); !strings.Contains(all, tt.want) {
				t.Errorf("the messages say\n%s\nwant %q in them", all, tt.want)
			}
			if tt.name == "tool result and progress notification" && len(seen) < 2 {
				t.Errorf("no progress notification came before the result: %q", seen)
			}
		})
	}
}

// A server answer that carries no secret is relayed byte for byte.
func TestUpstreamRelaysCleanAnswersUnchanged(t *testing.T) {
	const result = `{"content":[{"type":"text","text":"line\none \"quoted\" \u00e9 <b>"}],"structuredContent":{"n":12345678,"k\u0042":[true,null,1.5e3]}}`
	srv := startServer(t, intercept(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newServer(1, nil) }, nil),
		"tools/call", func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) { writeResult(w, id, result) }))
	p := testPool(t)
	key := Key{Namespace: "ns", Name: "clean"}
	cfg := fastConfig(srv.URL)
	cfg.Headers = []Header{{Name: "Authorization", Value: "Bearer " + echoingToken}}
	p.Ensure(key, cfg)
	waitReady(t, p, key)
	u := openUpstream(t, p, key)
	id := mustID(t, float64(2))
	if err := u.Write(t.Context(), &jsonrpc.Request{ID: id, Method: "tools/call", Params: json.RawMessage(`{"name":"tool-000"}`)}); err != nil {
		t.Fatal(err)
	}
	resp, err := nextResponse(t.Context(), u, id)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Result) != result {
		t.Errorf("result = %s\nwant %s", resp.Result, result)
	}
	if resp.Error != nil {
		t.Errorf("tools/call failed: %v", resp.Error)
	}
}
