package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// newCredentialEchoingUpstream is a server that puts the Authorization header it was
// sent into a tool description, a call result, a tool error, a JSON-RPC error, a progress
// notification and an elicitation request.
func newCredentialEchoingUpstream(t testing.TB) *httptest.Server {
	getServer := func(r *http.Request) *mcp.Server {
		auth := r.Header.Get("Authorization")
		s := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
		schema := json.RawMessage(`{"type":"object"}`)
		s.AddTool(&mcp.Tool{Name: "whoami", Description: "Called with " + auth, InputSchema: schema},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				if tok := req.Params.GetProgressToken(); tok != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "working with " + auth})
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Called with " + auth}}}, nil
			})
		s.AddTool(&mcp.Tool{Name: "refuse", Description: "Refuses.", InputSchema: schema},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "refused " + auth}}}, nil
			})
		s.AddTool(&mcp.Tool{Name: "crash", Description: "Crashes.", InputSchema: schema},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return nil, fmt.Errorf("upstream rejected %s", auth)
			})
		s.AddTool(&mcp.Tool{Name: "ask", Description: "Asks.", InputSchema: schema},
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
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(getServer, nil))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// newEchoingToolset serves a toolset over one server, echo, that the pool reaches at
// url with upstreamSecret as its Authorization header, and returns the toolset's
// endpoint.
func newEchoingToolset(t *testing.T, url string) string {
	pool, err := connector.NewPool(connector.Options{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	key := connector.Key{Namespace: namespace, Name: "echo"}
	pool.Ensure(key, connector.Config{
		URL: url, Protocol: connector.ProtocolStreamableHTTP,
		Headers: []connector.Header{{Name: "Authorization", Value: upstreamSecret}},
		Timeout: 5 * time.Second, HealthCheck: connector.HealthCheck{Interval: time.Hour},
		Egress: loopbackRules(t),
	})
	testutil.Eventually(t, 10*time.Second, "the pool's session with echo", func() error {
		if snap, _ := pool.Snapshot(key); snap.State != connector.StateReady {
			return fmt.Errorf("state %s", snap.State)
		}
		return nil
	})
	gw, err := gateway.New(gateway.Options{Pool: pool, NewToolIndex: catalogToolIndex, Audit: (&logLines{}).logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	gw.Update(readyServer(key))
	gw.UpdateToolset(&mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "echoing", Generation: 1},
		Spec:       mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "echo"}}},
	})
	front := httptest.NewServer(gw.Handler())
	t.Cleanup(front.Close)
	return front.URL + gatewaypath.Toolset(namespace, "echoing")
}

// An upstream that echoes its credential hands it to no agent: whatever the gateway
// relays from it (tool descriptions, results, tool and JSON-RPC errors, notifications,
// the server's own requests) reaches the agent with the credential redacted, through a
// server's endpoint and through a toolset.
func TestAgentsNeverSeeTheUpstreamsEchoedCredential(t *testing.T) {
	secretPart := strings.TrimPrefix(upstreamSecret, "Bearer ")
	tests := []struct {
		name     string
		endpoint func(t *testing.T, upstreamURL string) string
	}{
		{name: "server endpoint", endpoint: func(t *testing.T, upstreamURL string) string {
			return newHarness(t, harnessOptions{upstreamURL: upstreamURL}).url()
		}},
		{name: "toolset", endpoint: newEchoingToolset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			endpoint := tt.endpoint(t, newCredentialEchoingUpstream(t).URL)
			var mu sync.Mutex
			var seen []string
			saw := func(what, text string) {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, what+": "+text)
			}
			client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					saw("elicitation", req.Params.Message)
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}, nil
				},
				ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
					saw("progress", req.Params.Message)
				},
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
				Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{token: callerToken}}, MaxRetries: -1,
			}, sessionEraClient)
			if err != nil {
				t.Fatalf("connecting through the gateway: %v", err)
			}
			t.Cleanup(func() { _ = cs.Close() })

			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			names := map[string]string{} // the upstream's tool name -> the one the agent calls
			for _, tool := range tools.Tools {
				saw("tool "+tool.Name, tool.Title+" "+tool.Description)
				for _, name := range []string{"whoami", "refuse", "crash", "ask"} {
					if strings.HasSuffix(tool.Name, name) {
						names[name] = tool.Name
					}
				}
			}
			if len(names) != 4 {
				t.Fatalf("the agent sees tools %v, want whoami, refuse, crash and ask", names)
			}
			for _, name := range []string{"whoami", "refuse", "crash", "ask"} {
				params := &mcp.CallToolParams{Name: names[name], Arguments: map[string]any{}}
				params.SetProgressToken("p-" + name)
				res, err := cs.CallTool(ctx, params)
				if err != nil {
					saw(name+" error", err.Error())
					continue
				}
				for _, c := range res.Content {
					if text, ok := c.(*mcp.TextContent); ok {
						saw(fmt.Sprintf("%s result (isError %v)", name, res.IsError), text.Text)
					}
				}
			}

			mu.Lock()
			defer mu.Unlock()
			all := strings.Join(seen, "\n")
			if strings.Contains(all, secretPart) {
				t.Errorf("the agent saw the upstream's credential:\n%s", all)
			}
			// The upstream did echo it, and what it said around it arrived.
			for _, want := range []string{"Called with [redacted]", "refused [redacted]", "upstream rejected [redacted]", "Confirm [redacted]"} {
				if !strings.Contains(all, want) {
					t.Errorf("the agent never saw %q; it saw:\n%s", want, all)
				}
			}
		})
	}
}
