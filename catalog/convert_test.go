package catalog

import (
	"testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

func TestNewServerEntryKeepsTheFirstOfDuplicateTools(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	e := newServerEntry(testServer("a", "s", "",
		mcpv1alpha1.ToolInfo{Name: "b", Description: "first", ReadOnlyHint: &yes, DestructiveHint: &no},
		mcpv1alpha1.ToolInfo{Name: ""},
		mcpv1alpha1.ToolInfo{Name: "a"},
		mcpv1alpha1.ToolInfo{Name: "b", Description: "second"},
	))
	tools := e.detail.Tools
	if len(tools) != 2 || tools[0].Name != "a" || tools[1].Name != "b" || tools[1].Description != "first" {
		t.Fatalf("tools = %+v, want a and the first b", tools)
	}
	if b := tools[1]; b.ReadOnlyHint == nil || !*b.ReadOnlyHint || b.DestructiveHint == nil || *b.DestructiveHint || b.OpenWorldHint != nil {
		t.Fatalf("hints of b = %v %v %v, want true, false and unset", b.ReadOnlyHint, b.DestructiveHint, b.OpenWorldHint)
	}
	if len(e.tools) != 2 || e.tools[1].tool != &tools[1] {
		t.Fatalf("tool entries do not point at the detail's tools")
	}
}
