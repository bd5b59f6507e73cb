package toolsets_test

import (
	"fmt"
	"strings"
	"testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/toolsets"
)

func TestExposedURIsDecodeBackToTheirOrigin(t *testing.T) {
	for _, tc := range []struct{ prefix, server, uri, exposed string }{
		{"", "docs", "file:///notes.txt", "file:///notes.txt"},
		{"docs_", "docs", "file:///notes.txt", "switchboard+docs:file:///notes.txt"},
		{"d_", "docs", "ui://dashboard/app.html", "ui://switchboard+docs/dashboard/app.html"},
		{"d_", "docs.v2", "test://static/{id}", "switchboard+docs.v2:test://static/{id}"},
	} {
		got := toolsets.ExposedURI(tc.prefix, tc.server, tc.uri)
		if got != tc.exposed {
			t.Errorf("ExposedURI(%q, %q, %q) = %q, want %q", tc.prefix, tc.server, tc.uri, got, tc.exposed)
		}
		server, uri, err := toolsets.SplitURI(got)
		wantServer := tc.server
		if tc.prefix == "" {
			wantServer = ""
		}
		if err != nil || server != wantServer || uri != tc.uri {
			t.Errorf("SplitURI(%q) = %q, %q, %v; want %q, %q", got, server, uri, err, wantServer, tc.uri)
		}
	}
}

func TestAWrappedLookingURIThatDoesNotDecodeIsRefused(t *testing.T) {
	for _, exposed := range []string{
		"switchboard+:file:///x", "switchboard+docs", "switchboard+docs:", "switchboard+Docs:file:///x",
		"switchboard+do cs:file:///x", "ui://switchboard+", "ui://switchboard+/app", "switchboard+a/b:x",
	} {
		if server, uri, err := toolsets.SplitURI(exposed); err == nil {
			t.Errorf("SplitURI(%q) = %q, %q: want an error", exposed, server, uri)
		}
	}
	_, _, err := toolsets.SplitURI("switchboard+:https://h/p?token=SECRET")
	if err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("the error %v must name the URI without its query string", err)
	}
}

func TestExposeFeatures(t *testing.T) {
	spec := &mcpv1alpha1.MCPToolsetSpec{
		Resources: &mcpv1alpha1.ToolsetURIFilter{Deny: []string{"*secret*"}},
		Prompts:   &mcpv1alpha1.ToolsetNameFilter{Allow: []string{"gh_*", "review"}},
	}
	got := toolsets.ExposeFeatures(spec, []toolsets.FeatureOrigin{
		{Server: "github", Prefix: "gh_", Resources: []string{"repo://a", "repo://secret"}, Templates: []string{"repo://{name}"},
			Prompts: []string{"summarize", "review"}},
		{Server: "docs", Prefix: "", Resources: []string{"file:///a", "switchboard+github:repo://a", "ui://switchboard+x/y"},
			Prompts: []string{"review", "bad name"}},
		{Server: "wiki", Prefix: "", Resources: []string{"file:///a", "file:///b"}},
	})
	show := func(fs []toolsets.Feature) string {
		var parts []string
		for _, f := range fs {
			parts = append(parts, fmt.Sprintf("%s=%s/%s", f.Name, f.Server, f.Original))
		}
		return strings.Join(parts, " ")
	}
	for _, check := range []struct{ what, got, want string }{
		{"resources", show(got.Resources), "file:///b=wiki/file:///b switchboard+github:repo://a=github/repo://a"},
		{"templates", show(got.Templates), "switchboard+github:repo://{name}=github/repo://{name}"},
		{"prompts", show(got.Prompts), "gh_review=github/review gh_summarize=github/summarize review=docs/review"},
		{"hidden", show(got.Hidden), "bad name=docs/bad name switchboard+github:repo://a=docs/switchboard+github:repo://a ui://switchboard+x/y=docs/ui://switchboard+x/y"},
	} {
		if check.got != check.want {
			t.Errorf("%s: got %q, want %q", check.what, check.got, check.want)
		}
	}
	if len(got.Collisions) != 1 || show(got.Collisions[0]) != "file:///a=docs/file:///a file:///a=wiki/file:///a" {
		t.Errorf("collisions: %v", got.Collisions)
	}
}
