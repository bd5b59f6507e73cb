package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// maxAuditLine is more than an audit line of the gateway can be when every field a caller
// or upstream chooses is clipped (1 KiB each at most), and far less than the names below.
const maxAuditLine = 8 << 10

// A caller who names a denied tool with megabytes gets an audit line and spans of
// bounded size, in both eras: the reason quotes the name clipped, and says so.
func TestAHugeDeniedToolNameKeepsAuditAndSpansBounded(t *testing.T) {
	exp := testutil.RecordSpans(t)
	h := newHarness(t, harnessOptions{server: func(obj *mcpv1alpha1.MCPServer) {
		obj.Spec.Tools = &mcpv1alpha1.ToolFilter{Deny: []string{"delete_*"}}
	}})
	for _, era := range []struct {
		version string
		size    int // a sessionless client sends the name in the Mcp-Name header too, which HTTP bounds to 1 MiB
	}{{sessionEra, 4<<20 - 4<<10}, {sessionlessVersion, 900 << 10}} {
		t.Run(era.version, func(t *testing.T) {
			exp.Reset()
			before := len(h.audit.matching(`"Tool call"`))
			name := "delete_" + strings.Repeat("x", era.size)
			cs := h.connect(nil)
			if era.version == sessionlessVersion {
				cs = h.connectSessionless()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}}); err == nil && !res.IsError {
				t.Fatal("a denied tool was called")
			}
			lines := h.audit.matching(`"Tool call"`, `"outcome"="denied"`)
			if len(lines) != before+1 {
				t.Fatalf("audit lines of the denied call: %d, want one more than %d", len(lines), before)
			}
			line := lines[len(lines)-1]
			if len(line) > maxAuditLine {
				t.Errorf("the audit line of a call with a %d-byte tool name has %d bytes; want at most %d", len(name), len(line), maxAuditLine)
			}
			if !strings.Contains(line, "clipped") {
				t.Errorf("the audit line does not say the name was clipped: %.300s", line)
			}
			spans := exp.GetSpans()
			if len(spans) == 0 {
				t.Fatal("no spans recorded")
			}
			for _, s := range spans {
				if len(s.Name) > 1<<10 || len(s.Status.Description) > 1<<10 {
					t.Errorf("span %.80q has a name of %d bytes and a status of %d", s.Name, len(s.Name), len(s.Status.Description))
				}
				for _, kv := range s.Attributes {
					if v := kv.Value.String(); len(v) > 1<<10 {
						t.Errorf("span %.80q: attribute %s has %d bytes; want at most 1 KiB", s.Name, kv.Key, len(v))
					}
				}
			}
		})
	}
}
