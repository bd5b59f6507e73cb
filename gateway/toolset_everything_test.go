package gateway_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// npm server-everything twice behind one toolset: over Streamable HTTP, and in stdio
// mode through the bridge. One client of either era calls both and answers an
// elicitation (a sessionless client as input_required).
func TestServerEverythingThroughAToolset(t *testing.T) {
	for _, version := range []string{sessionEra, sessionlessVersion} {
		t.Run(version+" client", func(t *testing.T) { serverEverythingThroughAToolset(t, version) })
	}
}

func serverEverythingThroughAToolset(t *testing.T, version string) {
	pool, err := connector.NewPool(connector.Options{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	gw, err := gateway.New(gateway.Options{Pool: pool, NewToolIndex: catalogToolIndex})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	origins := map[string]string{
		"http":  testenv.StartServerEverything(t, "streamableHttp") + "/mcp",
		"stdio": startEverythingBridge(t),
	}
	ensureReadyOrigins(t, pool, gw, origins)
	gw.UpdateToolset(&mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "everything", Generation: 1},
		Spec: mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{
			{Name: "http", Prefix: ptr.To("h_")}, {Name: "stdio", Prefix: ptr.To("s_")}}},
	})
	front := httptest.NewServer(gw.Handler())
	t.Cleanup(front.Close)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	elicited := make(chan string, 2)
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicited <- req.Params.Message
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada", "check": true}}, nil
		},
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: front.URL + gatewaypath.Toolset(namespace, "everything"), MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("the client settled on %s, want %s", got, version)
	}

	names := toolNames(t, cs)
	for _, want := range []string{"h_echo", "s_echo", "h_trigger-elicitation-request"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Fatalf("tools %v lack %s", names, want)
		}
	}
	for _, tool := range []string{"h_echo", "s_echo"} {
		if got, err := callText(t, cs, tool, map[string]any{"message": "through the toolset"}); err != nil || !strings.Contains(got, "through the toolset") {
			t.Errorf("%s = %q, %v", tool, got, err)
		}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "h_trigger-elicitation-request"})
	if err != nil {
		t.Fatalf("elicitation round trip: %v", err)
	}
	select {
	case <-elicited:
	default:
		t.Error("the server's elicitation request never reached the client")
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if !strings.Contains(text.String(), "Ada") {
		t.Errorf("the tool's result does not carry the client's answer: %q", text.String())
	}
}

// ensureReadyOrigins has the pool connect to each origin (name -> Streamable HTTP URL)
// and the gateway know it as a Ready MCPServer of the test namespace.
func ensureReadyOrigins(t *testing.T, pool *connector.Pool, gw *gateway.Gateway, origins map[string]string) {
	t.Helper()
	for name, url := range origins {
		key := connector.Key{Namespace: namespace, Name: name}
		pool.Ensure(key, connector.Config{URL: url, Protocol: connector.ProtocolStreamableHTTP, Timeout: 20 * time.Second,
			HealthCheck: connector.HealthCheck{Interval: time.Hour}, Egress: loopbackRules(t)})
		testutil.Eventually(t, 30*time.Second, "the pool's session with "+name, func() error {
			if snap, _ := pool.Snapshot(key); snap.State != connector.StateReady {
				return fmt.Errorf("state %s", snap.State)
			}
			return nil
		})
		gw.Update(readyServer(key))
	}
}
