package gateway_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
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

func TestPinnedDigestMismatchRefusesEveryToolCall(t *testing.T) {
	const pinned = "sha256:" + "0000000000000000000000000000000000000000000000000000000000000000"
	h := newHarness(t, harnessOptions{server: func(obj *mcpv1alpha1.MCPServer) {
		obj.Spec.Tools = &mcpv1alpha1.ToolFilter{PinnedDigest: pinned}
		obj.Status.ToolsDigest = "sha256:" + strings.Repeat("1", 64)
	}})
	cs := h.connect(nil)
	_, err := callText(t, cs, "echo", map[string]any{"text": "x"})
	if err == nil || !strings.Contains(err.Error(), "pinnedDigest") {
		t.Fatalf("a call while the tools differ from the pin: err = %v; want a refusal naming spec.tools.pinnedDigest", err)
	}

	// Re-pinned to what the server publishes: calls go through again, in the same session.
	snap, _ := h.pool.Snapshot(h.key)
	obj := readyServer(h.key)
	obj.Spec.Tools = &mcpv1alpha1.ToolFilter{PinnedDigest: snap.ToolsDigest}
	obj.Status.ToolsDigest = snap.ToolsDigest
	h.gw.Update(obj)
	if got, err := callText(t, cs, "echo", map[string]any{"text": "x"}); err != nil || got != "x" {
		t.Errorf("a call once the digest matches = %q, %v; want x", got, err)
	}
}

func TestAnEgressPolicyThatNowDeniesTheServerEndsItsGatewaySessions(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cs := h.connect(nil)
	if _, err := callText(t, cs, "echo", map[string]any{"text": "before"}); err != nil {
		t.Fatal(err)
	}
	before := h.upstream.calls("tools/call")

	h.pool.Ensure(h.key, h.config(denyAllRules(t)))
	testutil.Eventually(t, 5*time.Second, "the gateway session to end", func() error {
		if n := h.gw.Sessions(); n != 0 {
			return fmt.Errorf("%d sessions open", n)
		}
		return nil
	})
	if _, err := callText(t, cs, "echo", map[string]any{"text": "after"}); err == nil {
		t.Error("a call after the policy denied the server succeeded")
	}
	if got := h.upstream.calls("tools/call"); got != before {
		t.Errorf("the upstream received %d tool calls after the policy denied it", got-before)
	}
	if lines := h.audit.matching("Session ended", "EgressDenied"); len(lines) == 0 {
		t.Errorf("no audit line says the session ended for EgressDenied:\n%s", h.audit.all())
	}
}

func TestARotatedSecretEndsSessionsAndTheNextSessionUsesTheNewValue(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cs := h.connect(nil)
	if _, err := callText(t, cs, "echo", map[string]any{"text": "x"}); err != nil {
		t.Fatal(err)
	}
	cfg := h.config(loopbackRules(t))
	cfg.Headers = []connector.Header{{Name: "Authorization", Value: "Bearer rotated-secret"}}
	h.pool.Ensure(h.key, cfg)
	testutil.Eventually(t, 5*time.Second, "the old gateway session to end", func() error {
		if n := h.gw.Sessions(); n != 0 {
			return fmt.Errorf("%d sessions open", n)
		}
		return nil
	})
	cs = h.connect(nil)
	if _, err := callText(t, cs, "echo", map[string]any{"text": "y"}); err != nil {
		t.Fatal(err)
	}
	auth := h.upstream.seenHeaders("Authorization")
	if last := auth[len(auth)-1]; last != "Bearer rotated-secret" {
		t.Errorf("the upstream's last Authorization = %q; want the rotated value", last)
	}
}

// A tool that reports failure in its result is audited as tool-error, apart from calls
// the gateway refused or the server could not answer.
func TestAToolsOwnFailureIsAuditedAsToolError(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	mcp.AddTool(h.upstream.mcp, &mcp.Tool{Name: "fail"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no such note"}}}, nil, nil
	})
	cs := h.connect(nil)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "fail"})
	if err != nil || !res.IsError {
		t.Fatalf("calling fail: %v, %v; want a tool error result", res, err)
	}
	if lines := h.audit.matching("Tool call", `"tool"="fail"`, `"outcome"="tool-error"`); len(lines) != 1 {
		t.Errorf("audit lines for the failing tool = %q; want one with outcome tool-error", lines)
	}
}
