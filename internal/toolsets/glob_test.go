package toolsets_test

import (
	"slices"
	"testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/toolsets"
)

// A toolset's globs match across '/': a tool whose prefixed name has a slash, renamed to
// a valid exposed name, is exposed or hidden as its globs say.
func TestExposeAppliesGlobsAcrossSlashes(t *testing.T) {
	override := []mcpv1alpha1.ToolOverride{{Name: "gh_admin/delete_user", Rename: "delete_user"}}
	origins := []toolsets.Origin{{Server: "github", Prefix: "gh_", Tools: []string{"admin/delete_user", "list"}}}
	cases := []struct {
		name        string
		allow, deny []string
		want        []string
	}{
		{name: "no globs", want: []string{"delete_user", "gh_list"}},
		{name: "deny admin*", deny: []string{"gh_admin*"}, want: []string{"gh_list"}},
		{name: "deny *delete*", deny: []string{"*delete*"}, want: []string{"gh_list"}},
		{name: "deny ? for the slash", deny: []string{"gh_admin?delete_user"}, want: []string{"gh_list"}},
		{name: "allow admin*", allow: []string{"gh_admin*"}, want: []string{"delete_user"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := &mcpv1alpha1.MCPToolsetSpec{Tools: &mcpv1alpha1.ToolsetTools{Allow: tc.allow, Deny: tc.deny, Overrides: override}}
			var got []string
			for _, tool := range toolsets.Expose(spec, origins).Tools {
				got = append(got, tool.Name)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("exposed %q; want %q", got, tc.want)
			}
		})
	}
}
