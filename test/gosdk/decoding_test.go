// Package gosdk_test holds go-sdk, as Switchboard builds it (third_party/go-sdk), to
// what Switchboard relies on in its JSON decoding: what the patches in
// third_party/go-sdk-patches changed, and what they must not have changed. These tests
// are the patches' exit condition: a go-sdk release that passes them without the
// patches makes the copy unnecessary (third_party/README.md).
package gosdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const result = `{"content":[{"type":"text","text":"This is a simple text response for testing."}],"isError":false}`

// allocatedPerRun returns the bytes f allocates on average over n runs.
func allocatedPerRun(n int, f func()) uint64 {
	var before, after runtime.MemStats
	f() // what the first run sets up once (codec caches) is not a run's
	runtime.ReadMemStats(&before)
	for range n {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(n)
}

// Every message and result go-sdk reads goes through its internal JSON decoding, which
// as released allocated a 32 KiB read buffer for each value it decoded, a dozen times
// for one tools/call through the gateway: most of the gateway's cost of a call went to
// allocating and collecting them.
func TestGoSDKDecodesWithoutAReadBufferPerValue(t *testing.T) {
	msg := []byte(`{"jsonrpc":"2.0","id":7,"result":` + result + `}`)
	perMessage := allocatedPerRun(200, func() {
		if _, err := jsonrpc.DecodeMessage(msg); err != nil {
			t.Fatal(err)
		}
	})
	perResult := allocatedPerRun(200, func() {
		var res mcp.CallToolResult
		if err := json.Unmarshal([]byte(result), &res); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("allocated per decoding: %d bytes for a response message, %d for a tools/call result", perMessage, perResult)
	const limit = 8 << 10 // a quarter of the buffer; the decodings take about 1 KiB
	if perMessage > limit || perResult > limit {
		t.Errorf("go-sdk allocates %d bytes to decode a %d-byte message and %d for its result: is third_party/go-sdk-patches/0001 applied?",
			perMessage, len(msg), perResult)
	}
}

func TestGoSDKDecodingIsAsReleased(t *testing.T) {
	t.Run("member names match exactly, not in any case", func(t *testing.T) {
		var res mcp.CallToolResult
		if err := json.Unmarshal([]byte(`{"content":[],"IsError":true}`), &res); err != nil {
			t.Fatal(err)
		}
		if res.IsError {
			t.Error(`"IsError" was read as isError`)
		}
	})
	t.Run("nesting deeper than 1000 is refused", func(t *testing.T) {
		deep := `{"jsonrpc":"2.0","id":1,"result":{"content":[],"structuredContent":{"a":` +
			strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}}}`
		if _, err := jsonrpc.DecodeMessage([]byte(deep)); err == nil {
			t.Error("a message nested 1003 levels deep was decoded")
		}
	})
	t.Run("a message's fields are read", func(t *testing.T) {
		msg, err := jsonrpc.DecodeMessage([]byte(`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"echo"}}`))
		if err != nil {
			t.Fatal(err)
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok || req.Method != "tools/call" || req.ID.Raw() != "a" || string(req.Params) != `{"name":"echo"}` {
			t.Errorf("decoded %#v", msg)
		}
	})
	t.Run("nothing to decode is an error", func(t *testing.T) {
		var res mcp.CallToolResult
		if err := res.UnmarshalJSON([]byte(" \n")); err == nil {
			t.Error("white space alone decoded as a result")
		}
	})
}

// go-sdk asks a request's _meta for its protocol version (SEP-2575) in the client, for
// the Mcp-Protocol-Version header, and twice in the server. The patch reads that one
// member rather than all of _meta into a map, which go-sdk's JSON decoder makes with
// room for 64 members; it must still find it. A stateless server refuses a request whose
// _meta gives a protocol version when the header is missing, which it can only do having
// found the version.
func TestGoSDKFindsTheProtocolVersionInMeta(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "gosdk-test", Version: "v0"}, nil)
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true})
	post := func(meta string) *httptest.ResponseRecorder {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":` + meta + `}}`
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec
	}
	// The key as go-sdk sends it, and spelled with escapes, which is the same key to any
	// reader: go-sdk as released found both (it read _meta into a map).
	for _, key := range []string{`io.modelcontextprotocol/protocolVersion`, `io.modelcontextprotocol\/protocol\u0056ersion`} {
		versioned := post(`{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",` +
			`"` + key + `":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`)
		if versioned.Code != http.StatusBadRequest || !strings.Contains(versioned.Body.String(), "header is required") {
			t.Errorf("a request whose _meta names protocol version 2026-07-28 under %s, without the header: %d %s",
				key, versioned.Code, versioned.Body)
		}
	}
	// No version, or the key in another case, which is another key (as released, too).
	for _, meta := range []string{`{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`,
		`{"IO.MODELCONTEXTPROTOCOL/PROTOCOLVERSION":"2026-07-28"}`} {
		if plain := post(meta); strings.Contains(plain.Body.String(), "header is required") {
			t.Errorf("a request whose _meta is %s was refused for the header: %d %s", meta, plain.Code, plain.Body)
		}
	}
}

// go-sdk reads a request's params with their _meta into a map; its JSON decoder makes a
// map it has to create with room for 64 members. The patch hands it one of go-sdk's own,
// so a call that carries a trace context in _meta costs the server a few members, not
// kilobytes; _meta reads as before, and is nil when absent.
func TestGoSDKReadsMetaIntoASmallMap(t *testing.T) {
	var seen mcp.Meta
	server := mcp.NewServer(&mcp.Implementation{Name: "gosdk-test", Version: "v0"}, nil)
	server.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			seen = req.Params.Meta
			return &mcp.CallToolResult{}, nil
		})
	clientTransport, serverTransport := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := server.Connect(ctx, serverTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	// A session of 2025-11-25, whose calls carry no _meta of their own (a 2026-07-28
	// call always has one, with the client's capabilities).
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "gosdk-test", Version: "v0"}, nil).Connect(ctx, clientTransport,
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	call := func(meta mcp.Meta) {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Meta: meta}); err != nil {
			t.Fatal(err)
		}
	}
	call(mcp.Meta{"traceparent": traceparent})
	if seen["traceparent"] != traceparent || len(seen) != 1 {
		t.Errorf("the server read _meta as %v", seen)
	}
	call(nil)
	if seen != nil {
		t.Errorf("the server read an absent _meta as %#v, want nil", seen)
	}
	plain := allocatedPerRun(100, func() { call(nil) })
	traced := allocatedPerRun(100, func() { call(mcp.Meta{"traceparent": traceparent}) })
	t.Logf("allocated per call: %d bytes without _meta, %d with a traceparent in it", plain, traced)
	// The client's encoding of the map and the server's reading of three strings take
	// about 1.5 KiB; a 64-member map alone is over 4 KiB.
	if traced > plain+3<<10 {
		t.Errorf("a traceparent in _meta costs a call %d bytes more: does go-sdk make a 64-member map for it again?", traced-plain)
	}
}

// A client of the sessionless era names every tools/call, prompts/get and resources/read
// in an Mcp-Name header, read from the params it has just encoded. As released, go-sdk
// decoded the whole params to read that name, a tool call's arguments into a map of
// every member: a relay paid for a second decoding of each call it sent. The patch
// reads the name alone; the header must still say it.
func TestGoSDKNamesACallWithoutDecodingItsArguments(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "gosdk-test", Version: "v0"}, nil)
	server.AddPrompt(&mcp.Prompt{Name: "greet"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{}, nil
	})
	server.AddResource(&mcp.Resource{Name: "readme", URI: "file:///readme"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "file:///readme", Text: "hi"}}}, nil
	})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true})
	// tools/call is answered here, from the request's id alone, so that nothing the
	// server does with the arguments counts against the client.
	var mu sync.Mutex
	var names []string
	front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name := r.Header.Get("Mcp-Name"); name != "" {
			mu.Lock()
			names = append(names, name)
			mu.Unlock()
		}
		if r.Header.Get("Mcp-Method") != "tools/call" {
			sdk.ServeHTTP(w, r)
			return
		}
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":` + result + `}`))
	})
	httpServer := httptest.NewServer(front)
	defer httpServer.Close()
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "gosdk-test", Version: "v0"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: httpServer.URL, DisableStandaloneSSE: true},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///readme"}); err != nil {
		t.Fatal(err)
	}
	call := func(arguments json.RawMessage) func() {
		return func() {
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: arguments}); err != nil {
				t.Fatal(err)
			}
		}
	}
	call(json.RawMessage(`{}`))()
	mu.Lock()
	if want := []string{"greet", "file:///readme", "echo"}; !slices.Equal(names, want) {
		t.Errorf("Mcp-Name headers %q, want %q", names, want)
	}
	mu.Unlock()

	members := make([]string, 1000)
	for i := range members {
		members[i] = fmt.Sprintf(`"member%d":%d`, i, i)
	}
	wide := json.RawMessage("{" + strings.Join(members, ",") + "}")
	empty := testing.AllocsPerRun(50, call(json.RawMessage(`{}`)))
	full := testing.AllocsPerRun(50, call(wide))
	t.Logf("allocations per call: %.0f with empty arguments, %.0f with 1,000 members", empty, full)
	// Decoded, 1,000 members are a key and a value each, 2,000 allocations at least;
	// encoded and sent as they are, a few buffers.
	if full-empty > 200 {
		t.Errorf("a call whose arguments have 1,000 members costs the client %.0f allocations more than one without: is third_party/go-sdk-patches/0005 applied?", full-empty)
	}
}
