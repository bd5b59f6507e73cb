package gateway_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/bridge"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// npm server-everything, a second implementation of MCP that speaks only the session era
// (TypeScript SDK, 2025-11-25), through the gateway in each of its transports (stdio
// through the bridge, run with the command a server pod runs), for a client of either
// era: a sessionless client gets the server's elicitation as input_required, and its
// answer reaches the server.
func TestServerEverythingThroughTheGateway(t *testing.T) {
	cases := []struct {
		name     string
		url      func(t *testing.T) string
		protocol connector.Protocol
	}{
		{"streamableHttp", func(t *testing.T) string { return testenv.StartServerEverything(t, "streamableHttp") + "/mcp" }, connector.ProtocolStreamableHTTP},
		{"sse", func(t *testing.T) string { return testenv.StartServerEverything(t, "sse") + "/sse" }, connector.ProtocolSSE},
		{"stdio through the bridge", startEverythingBridge, connector.ProtocolStreamableHTTP},
	}
	for _, tc := range cases {
		for _, sessionless := range []bool{false, true} {
			era := sessionEra + " client"
			if sessionless {
				era = sessionlessVersion + " client"
			}
			t.Run(tc.name+"/"+era, func(t *testing.T) {
				serverEverythingThroughTheGateway(t, tc.url(t), tc.protocol, sessionless)
			})
		}
	}
}

func serverEverythingThroughTheGateway(t *testing.T, url string, protocol connector.Protocol, sessionless bool) {
	h := newHarness(t, harnessOptions{upstreamURL: url, protocol: protocol})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	elicited := make(chan string, 1)
	opts := &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicited <- req.Params.Message
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada", "check": true}}, nil
		},
	}
	var cs *mcp.ClientSession
	if sessionless {
		cs = connectSessionlessTo(t, h.url(), opts)
	} else {
		cs = h.connect(opts)
	}

	if got, err := callText(t, cs, "echo", map[string]any{"message": "through the gateway"}); err != nil || !strings.Contains(got, "through the gateway") {
		t.Errorf("echo = %q, %v", got, err)
	}
	resources, err := cs.ListResources(ctx, nil)
	if err != nil || len(resources.Resources) == 0 {
		t.Fatalf("resources/list: %v, %v", resources, err)
	}
	read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: resources.Resources[0].URI})
	if err != nil || len(read.Contents) == 0 {
		t.Errorf("resources/read %s: %v, %v", resources.Resources[0].URI, read, err)
	}
	prompt, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "simple-prompt"})
	if err != nil || len(prompt.Messages) == 0 {
		t.Errorf("prompts/get simple-prompt: %v, %v", prompt, err)
	}

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(tools.Tools, func(tool *mcp.Tool) bool { return tool.Name == "trigger-elicitation-request" }) {
		t.Fatalf("the server offers no elicitation tool: the client's capabilities did not reach it")
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "trigger-elicitation-request"})
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

// startEverythingBridge runs the bridge in front of server-everything's stdio mode and
// returns its MCP endpoint.
func startEverythingBridge(t *testing.T) string {
	entry, err := testenv.ServerEverything()
	if err != nil {
		t.Fatal(err)
	}
	return startBridge(t, "node", entry, "stdio")
}

// startBridge runs the bridge in front of a stdio server's command and returns its MCP
// endpoint.
func startBridge(t *testing.T, command ...string) string {
	b, err := bridge.New(bridge.Options{Command: command, MaxSessions: 4, GracePeriod: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- b.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("the bridge stopped with %v", err)
		}
	})
	return "http://" + ln.Addr().String() + "/mcp"
}
