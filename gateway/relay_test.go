package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// Requests the server sends the client during a call, their answers, and notifications
// travel through the gateway in both directions.
func TestServerRequestsAndNotificationsTravelBothWays(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	mcp.AddTool(h.upstream.mcp, &mcp.Tool{Name: "confirm"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		for i := range 3 {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: req.Params.GetProgressToken(), Progress: float64(i + 1), Total: 3,
			}); err != nil {
				return nil, nil, err
			}
		}
		answer, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
			Message: "Proceed?",
			RequestedSchema: &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{
				"ok": {Type: "boolean"},
			}},
		})
		if err != nil {
			return nil, nil, fmt.Errorf("elicitation: %w", err)
		}
		// Sampling is deprecated (SEP-2577) but servers still send it, and the gateway
		// relays what they send.
		sample, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{ //nolint:staticcheck // see above
			MaxTokens: 10, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}, //nolint:staticcheck // see above
		})
		if err != nil {
			return nil, nil, fmt.Errorf("sampling: %w", err)
		}
		text := fmt.Sprintf("%s %v %s", answer.Action, answer.Content["ok"], sample.Content.(*mcp.TextContent).Text)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
	})

	progress := make(chan float64, 10)
	changed := make(chan struct{}, 10)
	cs := h.connect(&mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) { //nolint:staticcheck // sampling is deprecated, still relayed
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test", Content: &mcp.TextContent{Text: "sampled"}}, nil //nolint:staticcheck // sampling is deprecated, still relayed
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			progress <- req.Params.Progress
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})

	params := &mcp.CallToolParams{Name: "confirm"}
	params.SetProgressToken("p1")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != "accept true sampled" {
		t.Errorf("result = %q; want the elicitation and sampling answers relayed", got)
	}
	if len(progress) != 3 {
		t.Errorf("%d progress notifications reached the client; want 3", len(progress))
	}

	// A tool added on the server is news for every session: list_changed reaches the
	// client through the gateway.
	mcp.AddTool(h.upstream.mcp, &mcp.Tool{Name: "added_later"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Error("no notifications/tools/list_changed reached the client")
	}
}

func TestIdleSessionsAreReapedAndEndTheUpstreamSession(t *testing.T) {
	h := newHarness(t, harnessOptions{gateway: func(o *gateway.Options) { o.IdleTimeout = 200 * time.Millisecond }})
	cs := h.connect(nil)
	if _, err := callText(t, cs, "echo", map[string]any{"text": "x"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the idle session to be reaped", func() error {
		if n := h.gw.Sessions(); n != 0 {
			return fmt.Errorf("%d sessions open", n)
		}
		return nil
	})
	testutil.Eventually(t, 5*time.Second, "the upstream session to be deleted", func() error {
		for _, m := range h.upstream.methods() {
			if m == "DELETE" {
				return nil
			}
		}
		return fmt.Errorf("upstream saw %v", h.upstream.methods())
	})
}
