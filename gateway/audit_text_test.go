package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Audit lines say what happened in the gateway's words: an origin's error is named by
// its JSON-RPC code, never quoted, since its text is the server's to choose.
func TestToolsetAuditLinesNeverQuoteTheUpstream(t *testing.T) {
	h := newToolsetHarness(t, nil)
	h.notes.mcp.AddTool(&mcp.Tool{Name: "crash", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, errors.New("UPSTREAM-CHOSEN-WORDS")
		})
	cs, err := h.connect(callerToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	toolNames(t, cs)
	if _, err := callText(t, cs, "notes_crash", nil); err == nil {
		t.Fatal("notes_crash succeeded; want the origin's error")
	}
	if strings.Contains(h.audit.all(), "UPSTREAM-CHOSEN-WORDS") {
		t.Errorf("an audit line quotes the origin:\n%s", h.audit.all())
	}
	if lines := h.audit.matching("Tool call", `"serverTool"="crash"`, "JSON-RPC error"); len(lines) != 1 {
		t.Errorf("audit lines of the failed call: %q; want one naming the JSON-RPC error", lines)
	}
}
