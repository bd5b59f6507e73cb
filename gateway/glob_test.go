package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// slashUpstream starts a go-sdk server with the tools admin/delete_user and list_users
// and counts the calls of admin/delete_user that reach it.
func slashUpstream(t *testing.T) (url string, deletes *atomic.Int32) {
	t.Helper()
	deletes = new(atomic.Int32)
	srv := mcp.NewServer(&mcp.Implementation{Name: "admin", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "admin/delete_user", Description: "Deletes a user."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			deletes.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deleted"}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "list_users", Description: "Lists users."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "alice"}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	return hs.URL, deletes
}

// A deny glob's `*` matches any run of characters, `/` included: a tool named
// admin/delete_user is refused through /servers/ by every deny glob that covers it, is
// not listed, and the call never reaches the server; a glob that does not cover it
// leaves it callable.
func TestDenyGlobsMatchToolNamesWithSlashes(t *testing.T) {
	cases := []struct {
		deny   string
		denied bool
	}{
		{deny: "admin*", denied: true},
		{deny: "*", denied: true},
		{deny: "*delete*", denied: true},
		{deny: "admin?delete_user", denied: true},
		{deny: "*_user", denied: true},
		{deny: "admin", denied: false},
		{deny: "list_*", denied: false},
	}
	for _, tc := range cases {
		t.Run(tc.deny, func(t *testing.T) {
			url, deletes := slashUpstream(t)
			h := newHarness(t, harnessOptions{
				upstreamURL: url,
				server: func(obj *mcpv1alpha1.MCPServer) {
					obj.Spec.Tools = &mcpv1alpha1.ToolFilter{Deny: []string{tc.deny}}
				},
			})
			cs := h.connect(nil)

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			list, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatalf("listing tools: %v", err)
			}
			var names []string
			for _, tool := range list.Tools {
				names = append(names, tool.Name)
			}
			if listed := slices.Contains(names, "admin/delete_user"); listed == tc.denied {
				t.Errorf("tools/list with deny %q lists %q; want admin/delete_user listed: %t", tc.deny, names, !tc.denied)
			}

			text, err := callText(t, cs, "admin/delete_user", nil)
			switch {
			case tc.denied && err == nil:
				t.Errorf("tools/call admin/delete_user with deny %q answered %q; want a refusal", tc.deny, text)
			case tc.denied && !strings.Contains(err.Error(), "spec.tools.deny"):
				t.Errorf("tools/call admin/delete_user with deny %q failed with %q; want a refusal naming spec.tools.deny", tc.deny, err)
			case !tc.denied && err != nil:
				t.Errorf("tools/call admin/delete_user with deny %q: %v; want it called", tc.deny, err)
			}
			want := int32(0)
			if !tc.denied {
				want = 1
			}
			if n := deletes.Load(); n != want {
				t.Errorf("the server ran admin/delete_user %d times; want %d", n, want)
			}
		})
	}
}
