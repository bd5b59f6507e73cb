package connector

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	mark3mcp "github.com/mark3labs/mcp-go/mcp"
	mark3server "github.com/mark3labs/mcp-go/server"
	"github.com/prometheus/client_golang/prometheus"
)

// newMark3Server returns a github.com/mark3labs/mcp-go server: a second, independent MCP
// implementation, with tools whose list can change at run time.
func newMark3Server(tools ...string) *mark3server.MCPServer {
	s := mark3server.NewMCPServer("mark3-server", "0.1.0", mark3server.WithToolCapabilities(true))
	for _, name := range tools {
		addMark3Tool(s, name)
	}
	return s
}

func addMark3Tool(s *mark3server.MCPServer, name string) {
	s.AddTool(mark3mcp.NewTool(name,
		mark3mcp.WithDescription("Echo from mcp-go ("+name+")"),
		mark3mcp.WithString("text", mark3mcp.Required()),
	), func(_ context.Context, req mark3mcp.CallToolRequest) (*mark3mcp.CallToolResult, error) {
		return mark3mcp.NewToolResultText(fmt.Sprint(req.GetArguments()["text"])), nil
	})
}

func TestMark3LabsServers(t *testing.T) {
	for _, tc := range []struct {
		name          string
		serve         func(t *testing.T, s *mark3server.MCPServer) string
		protocol      Protocol
		wantTransport Transport
	}{
		{"streamable HTTP", func(t *testing.T, s *mark3server.MCPServer) string {
			return startServer(t, mark3server.NewStreamableHTTPServer(s)).URL + "/mcp"
		}, ProtocolStreamableHTTP, TransportStreamableHTTP},
		{"streamable HTTP, auto", func(t *testing.T, s *mark3server.MCPServer) string {
			return startServer(t, mark3server.NewStreamableHTTPServer(s)).URL + "/mcp"
		}, ProtocolAuto, TransportStreamableHTTP},
		{"SSE", func(t *testing.T, s *mark3server.MCPServer) string {
			return startServer(t, mark3server.NewSSEServer(s)).URL + "/sse"
		}, ProtocolSSE, TransportSSE},
		{"SSE, auto", func(t *testing.T, s *mark3server.MCPServer) string {
			return startServer(t, mark3server.NewSSEServer(s)).URL + "/sse"
		}, ProtocolAuto, TransportSSE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := newMark3Server("alpha", "beta")
			reg := prometheus.NewRegistry()
			p := testPool(t, func(o *Options) { o.Registerer = reg })
			key := Key{"ns", "mark3"}
			cfg := fastConfig(tc.serve(t, server))
			cfg.Protocol = tc.protocol
			cfg.HealthCheck = HealthCheck{Interval: 20 * time.Millisecond, FailureThreshold: 1}
			p.Ensure(key, cfg)
			snap := waitReady(t, p, key)
			if snap.Transport != tc.wantTransport {
				t.Errorf("transport = %s, want %s", snap.Transport, tc.wantTransport)
			}
			if got := toolNames(snap); !slices.Equal(got, []string{"alpha", "beta"}) {
				t.Errorf("tools = %v", got)
			}
			if snap.ServerInfo.Name != "mark3-server" || snap.ProtocolVersion == "" {
				t.Errorf("server info %+v, protocol %q", snap.ServerInfo, snap.ProtocolVersion)
			}
			t.Logf("negotiated %s over %s", snap.ProtocolVersion, snap.Transport)

			addMark3Tool(server, "gamma")
			waitFor(t, p, key, "tool added at run time", func(s Snapshot) bool { return len(s.Tools) == 3 })
			server.DeleteTools("alpha")
			waitFor(t, p, key, "tool removed at run time", func(s Snapshot) bool {
				return slices.Equal(toolNames(s), []string{"beta", "gamma"})
			})
			last := waitFor(t, p, key, "three probes", func(Snapshot) bool { return histogramCount(t, reg) >= 3 })
			// Probes every 20ms with a threshold of one: any failed probe would have
			// rebuilt the session.
			if !last.ConnectedAt.Equal(snap.ConnectedAt) || last.ConsecutiveFailures != 0 {
				t.Errorf("probes failed against mcp-go: reconnected=%v, %v", !last.ConnectedAt.Equal(snap.ConnectedAt), last.LastError)
			}
		})
	}
}
