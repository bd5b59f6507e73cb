package gateway_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

func TestToolCallsReachTheServerWithItsCredentialsAndNeverTheCallers(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cs := h.connect(nil)
	got, err := callText(t, cs, "echo", map[string]any{"text": "hello"})
	if err != nil || got != "hello" {
		t.Fatalf("echo through the gateway = %q, %v; want hello", got, err)
	}
	auth := h.upstream.seenHeaders("Authorization")
	if len(auth) == 0 || slices.ContainsFunc(auth, func(v string) bool { return v != upstreamSecret }) {
		t.Errorf("upstream saw Authorization %q; want only the MCPServer's configured header", auth)
	}
	for _, name := range []string{"Authorization", "Cookie"} {
		for _, v := range h.upstream.seenHeaders(name) {
			if strings.Contains(v, callerToken) {
				t.Errorf("the caller's token reached the upstream in %s", name)
			}
		}
	}
	if lines := h.audit.matching("Tool call", `"tool"="echo"`, `"outcome"="ok"`); len(lines) != 1 {
		t.Errorf("audit lines for the echo call = %q; want one with outcome ok\nall:\n%s", lines, h.audit.all())
	}
	if strings.Contains(h.audit.all(), "hello") {
		t.Errorf("the audit log quotes the call's arguments or result:\n%s", h.audit.all())
	}
}

func TestToolFiltersHideAndRefuseTools(t *testing.T) {
	h := newHarness(t, harnessOptions{server: func(obj *mcpv1alpha1.MCPServer) {
		obj.Spec.Tools = &mcpv1alpha1.ToolFilter{Deny: []string{"delete_*"}}
	}})
	cs := h.connect(nil)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if want := []string{"echo", "search_notes"}; !slices.Equal(names, want) {
		t.Errorf("tools/list through the gateway = %v; want %v", names, want)
	}
	_, err = callText(t, cs, "delete_all", nil)
	if err == nil || !strings.Contains(err.Error(), `spec.tools.deny glob "delete_*"`) {
		t.Errorf("calling a denied tool: err = %v; want a refusal naming the deny glob", err)
	}
	if lines := h.audit.matching("Tool call", `"tool"="delete_all"`, `"outcome"="denied"`); len(lines) != 1 {
		t.Errorf("audit lines for the denied call = %q; want one with outcome denied", lines)
	}
	if got, err := callText(t, cs, "search_notes", nil); err != nil || got != "found" {
		t.Errorf("an allowed tool after a refusal = %q, %v; want found", got, err)
	}
}

var _ = mcp.NewClient
