package connector

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestTransportsAndProtocolEras(t *testing.T) {
	legacyOnly := &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}}
	cases := []struct {
		name          string
		serve         func(t *testing.T) string
		protocol      Protocol
		wantTransport Transport
		wantVersion   string
	}{
		{
			name: "stateful streamable at 2025-11-25",
			serve: func(t *testing.T) string {
				return serveStreamable(t, newServer(3, legacyOnly), nil).URL
			},
			protocol: ProtocolStreamableHTTP, wantTransport: TransportStreamableHTTP, wantVersion: "2025-11-25",
		},
		{
			name: "stateless streamable at 2026-07-28",
			serve: func(t *testing.T) string {
				return serveStreamable(t, newServer(3, nil), &mcp.StreamableHTTPOptions{Stateless: true}).URL
			},
			protocol: ProtocolStreamableHTTP, wantTransport: TransportStreamableHTTP, wantVersion: "2026-07-28",
		},
		{
			name: "JSON response mode",
			serve: func(t *testing.T) string {
				return serveStreamable(t, newServer(3, legacyOnly), &mcp.StreamableHTTPOptions{JSONResponse: true}).URL
			},
			protocol: ProtocolStreamableHTTP, wantTransport: TransportStreamableHTTP, wantVersion: "2025-11-25",
		},
		{
			name: "auto on streamable",
			serve: func(t *testing.T) string {
				return serveStreamable(t, newServer(3, nil), nil).URL
			},
			protocol: ProtocolAuto, wantTransport: TransportStreamableHTTP,
		},
		{
			name: "legacy SSE",
			serve: func(t *testing.T) string {
				return serveSSE(t, newServer(3, legacyOnly)).URL
			},
			protocol: ProtocolSSE, wantTransport: TransportSSE, wantVersion: "2025-11-25",
		},
		{
			name: "auto falls back to legacy SSE",
			serve: func(t *testing.T) string {
				return serveSSE(t, newServer(3, legacyOnly)).URL
			},
			protocol: ProtocolAuto, wantTransport: TransportSSE, wantVersion: "2025-11-25",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := testPool(t)
			key := Key{Namespace: "ns", Name: "srv"}
			cfg := fastConfig(tc.serve(t))
			cfg.Protocol = tc.protocol
			p.Ensure(key, cfg)
			snap := waitReady(t, p, key)

			if snap.Transport != tc.wantTransport {
				t.Errorf("transport = %q, want %q", snap.Transport, tc.wantTransport)
			}
			if tc.wantVersion != "" && snap.ProtocolVersion != tc.wantVersion {
				t.Errorf("protocol version = %q, want %q", snap.ProtocolVersion, tc.wantVersion)
			}
			if snap.ProtocolVersion == "" {
				t.Error("protocol version is empty")
			}
			if got, want := toolNames(snap), []string{"tool-000", "tool-001", "tool-002"}; !slices.Equal(got, want) {
				t.Errorf("tools = %v, want %v", got, want)
			}
			if snap.ServerInfo != (ServerInfo{Name: "test-server", Title: "Test Server", Version: "1.2.3"}) {
				t.Errorf("server info = %+v", snap.ServerInfo)
			}
			if !snap.Capabilities.Tools {
				t.Error("tools capability not reported")
			}
			tool := snap.Tools[0]
			if tool.Title != "Title of tool-000" || !tool.ReadOnlyHint || !tool.IdempotentHint ||
				!strings.Contains(tool.Description, "Echoes") || tool.SchemaDigest == "" {
				t.Errorf("tool definition incomplete: %+v", tool)
			}
			if !strings.HasPrefix(snap.ToolsDigest, "sha256:") {
				t.Errorf("digest = %q", snap.ToolsDigest)
			}
			if snap.LastError != nil || snap.ConsecutiveFailures != 0 {
				t.Errorf("healthy session reports error %v, failures %d", snap.LastError, snap.ConsecutiveFailures)
			}
		})
	}
}

func TestDigestIsStableAcrossServersWithTheSameTools(t *testing.T) {
	p := testPool(t)
	a, b := Key{"ns", "a"}, Key{"ns", "b"}
	p.Ensure(a, fastConfig(serveStreamable(t, newServer(5, nil), nil).URL))
	p.Ensure(b, fastConfig(serveSSE(t, newServer(5, nil)).URL))
	sa, sb := waitReady(t, p, a), waitReady(t, p, b)
	if sa.ToolsDigest != sb.ToolsDigest {
		t.Errorf("same tools, different digests: %s vs %s", sa.ToolsDigest, sb.ToolsDigest)
	}
}

func TestPaginationCollectsAllPages(t *testing.T) {
	server := newServer(25, &mcp.ServerOptions{PageSize: 4})
	server.AddPrompt(&mcp.Prompt{Name: "greet", Description: "Says hello"}, func(_ context.Context, _ *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{}, nil
	})
	for i := range 9 {
		server.AddResource(&mcp.Resource{URI: fmt.Sprintf("test://r/%d", i), Name: fmt.Sprintf("r%d", i)}, nil)
	}
	server.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://t/{id}", Name: "t"}, nil)

	for _, stateless := range []bool{false, true} {
		t.Run(fmt.Sprintf("stateless=%v", stateless), func(t *testing.T) {
			p := testPool(t)
			key := Key{"ns", "paged"}
			p.Ensure(key, fastConfig(serveStreamable(t, server, &mcp.StreamableHTTPOptions{Stateless: stateless}).URL))
			snap := waitReady(t, p, key)
			if len(snap.Tools) != 25 {
				t.Errorf("got %d tools, want 25", len(snap.Tools))
			}
			if len(snap.Resources) != 9 || len(snap.ResourceTemplates) != 1 || len(snap.Prompts) != 1 {
				t.Errorf("got %d resources, %d templates, %d prompts; want 9, 1, 1",
					len(snap.Resources), len(snap.ResourceTemplates), len(snap.Prompts))
			}
		})
	}
}

func TestCompletionsAndResourceSubscriptionsAreReported(t *testing.T) {
	withResource := func(opts *mcp.ServerOptions) *mcp.Server {
		s := newServer(1, opts)
		s.AddResource(&mcp.Resource{URI: "test://r", Name: "r"}, nil)
		return s
	}
	full := withResource(&mcp.ServerOptions{
		CompletionHandler: func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{}, nil
		},
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	p := testPool(t)
	fullKey, plainKey := Key{"ns", "full"}, Key{"ns", "plain"}
	p.Ensure(fullKey, fastConfig(serveStreamable(t, full, nil).URL))
	p.Ensure(plainKey, fastConfig(serveStreamable(t, withResource(nil), nil).URL))
	if c := waitReady(t, p, fullKey).Capabilities; !c.Completions || !c.ResourcesSubscribe || !c.Resources {
		t.Errorf("a server with completion and subscriptions reports %+v", c)
	}
	if c := waitReady(t, p, plainKey).Capabilities; c.Completions || c.ResourcesSubscribe || !c.Resources {
		t.Errorf("a server without completion or subscriptions reports %+v", c)
	}
}

func TestToolsAddedAndRemovedAtRunTime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(t *testing.T, s *mcp.Server) string
	}{
		{"stateful", func(t *testing.T, s *mcp.Server) string { return serveStreamable(t, s, nil).URL }},
		{"sse", func(t *testing.T, s *mcp.Server) string { return serveSSE(t, s).URL }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := newServer(2, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
			p := testPool(t)
			key := Key{"ns", "live"}
			p.Ensure(key, fastConfig(tc.serve(t, server)))
			before := waitReady(t, p, key)
			drainEvents(p)

			addTool(server, "tool-new")
			nextEvent(t, p, key)
			added := waitFor(t, p, key, "new tool", func(s Snapshot) bool { return len(s.Tools) == 3 })
			if added.ToolsDigest == before.ToolsDigest {
				t.Error("digest did not change when a tool was added")
			}

			server.RemoveTools("tool-new")
			removed := waitFor(t, p, key, "tool removed", func(s Snapshot) bool { return len(s.Tools) == 2 })
			if removed.ToolsDigest != before.ToolsDigest {
				t.Errorf("digest after removal = %s, want the original %s", removed.ToolsDigest, before.ToolsDigest)
			}
		})
	}
}

func TestHeadersReachOnlyTheConfiguredOrigin(t *testing.T) {
	var log headerLog
	server := newServer(1, nil)
	ts := startServer(t, log.wrap(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)))

	p := testPool(t)
	key := Key{"ns", "auth"}
	cfg := fastConfig(ts.URL)
	cfg.Headers = []Header{{Name: "Authorization", Value: "Bearer s3cret-token"}, {Name: "X-Tenant", Value: "acme"}}
	p.Ensure(key, cfg)
	waitReady(t, p, key)

	auth := log.values("Authorization")
	if len(auth) == 0 || len(auth) != log.count() {
		t.Fatalf("Authorization on %d of %d requests", len(auth), log.count())
	}
	for _, v := range auth {
		if v != "Bearer s3cret-token" {
			t.Errorf("Authorization = %q", v)
		}
	}
	if got := log.values("X-Tenant"); len(got) == 0 || got[0] != "acme" {
		t.Errorf("X-Tenant = %v", got)
	}
}

func TestAutoRemembersTheDetectedTransport(t *testing.T) {
	var streamableAttempts atomic.Int64
	sse := mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return newServer(1, nil) }, nil)
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Legacy message POSTs carry the session in the query; a bare POST is Auto
		// trying Streamable HTTP.
		if r.Method == http.MethodPost && r.URL.RawQuery == "" {
			streamableAttempts.Add(1)
		}
		sse.ServeHTTP(w, r)
	}))
	p := testPool(t)
	key := Key{"ns", "auto-sse"}
	p.Ensure(key, fastConfig(ts.URL))
	first := waitReady(t, p, key)
	if first.Transport != TransportSSE {
		t.Fatalf("transport = %s, want SSE", first.Transport)
	}
	attempts := streamableAttempts.Load()

	// Cutting the event stream ends the session; the reconnect goes straight to SSE.
	ts.CloseClientConnections()
	waitFor(t, p, key, "reconnected", func(s Snapshot) bool {
		return s.State == StateReady && s.ConnectedAt.After(first.ConnectedAt)
	})
	if got := streamableAttempts.Load(); got != attempts {
		t.Errorf("reconnect probed Streamable HTTP again: %d attempts, want %d", got, attempts)
	}
}
