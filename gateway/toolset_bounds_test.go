package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// pageForever makes u answer every tools/list of a toolset's session (never the
// operator's) with a page of 50 tools and the same next cursor, for as long as it is
// asked: an origin that would have a toolset list it without end.
func pageForever(u *upstreamServer) {
	u.mcp.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			ss, _ := req.GetSession().(*mcp.ServerSession)
			toolset := ss != nil && ss.InitializeParams() != nil && ss.InitializeParams().ClientInfo != nil &&
				ss.InitializeParams().ClientInfo.Name == "switchboard-toolset"
			if method != "tools/list" || !toolset {
				return next(ctx, method, req)
			}
			page := &mcp.ListToolsResult{NextCursor: "again"}
			for i := range 50 {
				page.Tools = append(page.Tools, &mcp.Tool{Name: fmt.Sprintf("tool_%d", i), Description: strings.Repeat("x", 1024),
					InputSchema: map[string]any{"type": "object"}})
			}
			return page, nil
		}
	})
}

// A toolset lists an origin within the connector's discovery bounds: a repeated cursor
// ends the list at once, and the origin's tools are left out rather than followed.
func TestAToolsetListsAnOriginWithinTheDiscoveryBounds(t *testing.T) {
	h := newToolsetHarness(t, nil)
	pageForever(h.notes)
	cs, err := h.connect(callerToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := toolNames(t, cs)
	for _, name := range names {
		if strings.HasPrefix(name, "notes_") {
			t.Fatalf("the toolset exposes %s of an origin whose list never ended", name)
		}
	}
	if !strings.Contains(strings.Join(names, " "), "t_create_ticket") {
		t.Errorf("the other origin's tools are missing: %v", names)
	}
	// The operator's session listed once; the toolset's session at most twice before it
	// saw the cursor again.
	if n := h.notes.calls("tools/list"); n > 3 {
		t.Errorf("the origin was asked for %d pages of tools; want the list to end at the repeated cursor", n)
	}
}
