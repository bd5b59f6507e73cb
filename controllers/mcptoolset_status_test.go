package controllers

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

func toolsetCond(ts *mcpv1alpha1.MCPToolset, condType string) string {
	c := meta.FindStatusCondition(ts.Status.Conditions, condType)
	if c == nil {
		return absent
	}
	return string(c.Status) + "/" + c.Reason
}

func toolsetMessage(ts *mcpv1alpha1.MCPToolset, condType string) string {
	if c := meta.FindStatusCondition(ts.Status.Conditions, condType); c != nil {
		return c.Message
	}
	return ""
}

// fixtureServer is an MCPServer of namespace team-a; ready says whether its status is
// Ready for its generation, and it publishes the tools named.
func fixtureServer(name string, labels map[string]string, ready bool, tools ...string) mcpv1alpha1.MCPServer {
	s := mcpv1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Labels: labels, Generation: 2}}
	st := metav1.ConditionTrue
	reason := mcpv1alpha1.ReasonSucceeded
	if !ready {
		st, reason = metav1.ConditionFalse, mcpv1alpha1.ReasonConnectionRefused
	}
	s.Status.Conditions = []metav1.Condition{{Type: mcpv1alpha1.ConditionReady, Status: st, Reason: reason, ObservedGeneration: 2}}
	for _, t := range tools {
		s.Status.Tools = append(s.Status.Tools, mcpv1alpha1.ToolInfo{Name: t})
	}
	s.Status.ToolsDigest = "sha256:" + name + strings.Join(tools, ",")
	return s
}

// withFeatures returns s listing the resources, resource templates (those with a
// '{') and prompts named.
func withFeatures(s mcpv1alpha1.MCPServer, resources []string, prompts ...string) mcpv1alpha1.MCPServer {
	s.Status.Resources, s.Status.Prompts = nil, nil
	for _, r := range resources {
		if strings.Contains(r, "{") {
			s.Status.Resources = append(s.Status.Resources, mcpv1alpha1.ResourceInfo{URITemplate: r})
		} else {
			s.Status.Resources = append(s.Status.Resources, mcpv1alpha1.ResourceInfo{URI: r})
		}
	}
	for _, p := range prompts {
		s.Status.Prompts = append(s.Status.Prompts, mcpv1alpha1.PromptInfo{Name: p})
	}
	return s
}

func toolsetOf(spec mcpv1alpha1.MCPToolsetSpec) *mcpv1alpha1.MCPToolset {
	return &mcpv1alpha1.MCPToolset{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "support-agent", Generation: 3}, Spec: spec}
}

// exposed renders status.tools as "name=server/tool" entries.
func exposed(ts *mcpv1alpha1.MCPToolset) string {
	parts := make([]string, len(ts.Status.Tools))
	for i, t := range ts.Status.Tools {
		parts[i] = t.Name + "=" + t.Server + "/" + t.Tool
	}
	return strings.Join(parts, " ")
}

func TestToolsetStatus(t *testing.T) {
	support := map[string]string{"team": "support"}
	github := fixtureServer("github", nil, true, "search_issues", "search_code", "delete_repo")
	tickets := fixtureServer("tickets", support, true, "create", "close")
	cases := []struct {
		name    string
		spec    mcpv1alpha1.MCPToolsetSpec
		servers []mcpv1alpha1.MCPServer

		tools                       string
		ready, serversReady, unique string
		reconciling, stalled        string
		kstatus                     status.Status
		readyServers                string
		messageHas                  map[string][]string
		serverToolCounts            map[string]int32
		resourceCount, promptCount  int32
	}{
		{
			name:    "default prefix is the server's name",
			spec:    mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "github"}}},
			servers: []mcpv1alpha1.MCPServer{github, tickets},
			tools:   "github_delete_repo=github/delete_repo github_search_code=github/search_code github_search_issues=github/search_issues",
			ready:   "True/Succeeded", serversReady: "True/Succeeded", unique: "True/Succeeded",
			kstatus: status.CurrentStatus, readyServers: "1/1",
			serverToolCounts: map[string]int32{"github": 3},
		},
		{
			name: "the issue's example: prefix, selector, allow, deny, rename",
			spec: mcpv1alpha1.MCPToolsetSpec{
				Servers: []mcpv1alpha1.ToolsetServer{{Name: "github", Prefix: ptr.To("gh_")}, {Selector: &metav1.LabelSelector{MatchLabels: support}}},
				Tools: &mcpv1alpha1.ToolsetTools{
					Allow:     []string{"gh_search_*", "tickets_*", "gh_delete_*"},
					Deny:      []string{"*_delete*", "tickets_close"},
					Overrides: []mcpv1alpha1.ToolOverride{{Name: "gh_search_issues", Rename: "search_issues", Description: "Search GitHub issues of the acme org."}},
				},
			},
			servers: []mcpv1alpha1.MCPServer{github, tickets, fixtureServer("other", map[string]string{"team": "sales"}, true, "x")},
			tools:   "gh_search_code=github/search_code search_issues=github/search_issues tickets_create=tickets/create",
			ready:   "True/Succeeded", serversReady: "True/Succeeded", unique: "True/Succeeded",
			kstatus: status.CurrentStatus, readyServers: "2/2",
			serverToolCounts: map[string]int32{"github": 2, "tickets": 1},
		},
		{
			name:    "empty prefix exposes the tools under their own names",
			spec:    mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "tickets", Prefix: ptr.To("")}}},
			servers: []mcpv1alpha1.MCPServer{tickets},
			tools:   "close=tickets/close create=tickets/create",
			ready:   "True/Succeeded", serversReady: "True/Succeeded", unique: "True/Succeeded",
			kstatus: status.CurrentStatus, readyServers: "1/1",
		},
		{
			name: "a collision serves neither tool and names both origins",
			spec: mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{
				{Name: "github", Prefix: ptr.To("")}, {Name: "gitlab", Prefix: ptr.To("")}}},
			servers: []mcpv1alpha1.MCPServer{github, fixtureServer("gitlab", nil, true, "search_issues", "merge")},
			tools:   "delete_repo=github/delete_repo merge=gitlab/merge search_code=github/search_code",
			ready:   "True/Succeeded", serversReady: "True/Succeeded", unique: "False/NameCollision",
			kstatus: status.CurrentStatus, readyServers: "2/2",
			messageHas: map[string][]string{mcpv1alpha1.ConditionNamesUnique: {`"search_issues" from github/search_issues and gitlab/search_issues`}},
		},
		{
			name: "a rename onto another tool's name is a collision too",
			spec: mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "github"}},
				Tools: &mcpv1alpha1.ToolsetTools{Overrides: []mcpv1alpha1.ToolOverride{{Name: "github_search_code", Rename: "github_search_issues"}}}},
			servers: []mcpv1alpha1.MCPServer{github},
			tools:   "github_delete_repo=github/delete_repo",
			ready:   "True/Succeeded", serversReady: "True/Succeeded", unique: "False/NameCollision",
			kstatus: status.CurrentStatus, readyServers: "1/1",
			messageHas: map[string][]string{mcpv1alpha1.ConditionNamesUnique: {"github/search_code and github/search_issues"}},
		},
		{
			name:    "an invalid exposed name is not served",
			spec:    mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "odd"}}},
			servers: []mcpv1alpha1.MCPServer{fixtureServer("odd", nil, true, "repo/list", "ok", strings.Repeat("x", 64))},
			tools:   "odd_ok=odd/ok",
			ready:   "True/Succeeded", serversReady: "True/Succeeded", unique: "False/InvalidToolName",
			kstatus: status.CurrentStatus, readyServers: "1/1",
			messageHas: map[string][]string{mcpv1alpha1.ConditionNamesUnique: {`"odd_repo/list" from odd/repo/list`, "^[A-Za-z0-9_.-]{1,64}$"}},
		},
		{
			name:    "ready while one of two servers is Ready; ServersReady names the other",
			spec:    mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "github"}, {Name: "tickets"}}},
			servers: []mcpv1alpha1.MCPServer{github, fixtureServer("tickets", support, false, "create")},
			tools:   "github_delete_repo=github/delete_repo github_search_code=github/search_code github_search_issues=github/search_issues",
			ready:   "True/Succeeded", serversReady: "False/ServersNotReady", unique: "True/Succeeded",
			kstatus: status.CurrentStatus, readyServers: "1/2",
			messageHas:       map[string][]string{mcpv1alpha1.ConditionServersReady: {"tickets (ConnectionRefused)"}},
			serverToolCounts: map[string]int32{"github": 3, "tickets": 0},
		},
		{
			name:    "a named server that does not exist",
			spec:    mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "missing"}}},
			servers: []mcpv1alpha1.MCPServer{github},
			ready:   "False/ServersNotReady", serversReady: "False/ServersNotReady", unique: "True/Succeeded",
			reconciling: "True/ServersNotReady", kstatus: status.InProgressStatus, readyServers: "0/1",
			messageHas: map[string][]string{mcpv1alpha1.ConditionReady: {"missing (not found)"}},
		},
		{
			name:    "a selector that matches nothing",
			spec:    mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "none"}}}}},
			servers: []mcpv1alpha1.MCPServer{github},
			ready:   "False/NoServers", serversReady: "False/NoServers", unique: "True/Succeeded",
			reconciling: "True/NoServers", kstatus: status.InProgressStatus, readyServers: "0/0",
		},
		{
			name: "an invalid selector is Stalled",
			spec: mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Selector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}}}},
			servers: []mcpv1alpha1.MCPServer{github},
			ready:   "False/InvalidSpec", serversReady: "False/NoServers", unique: "True/Succeeded",
			stalled: "True/InvalidSpec", kstatus: status.FailedStatus, readyServers: "0/0",
			messageHas: map[string][]string{mcpv1alpha1.ConditionReady: {"spec.servers[0].selector"}},
		},
		{
			name:    "servers of another namespace are never selected",
			spec:    mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Selector: &metav1.LabelSelector{}}}},
			servers: func() []mcpv1alpha1.MCPServer { s := github; s.Namespace = "team-b"; return []mcpv1alpha1.MCPServer{s} }(),
			ready:   "False/NoServers", serversReady: "False/NoServers", unique: "True/Succeeded",
			reconciling: "True/NoServers", kstatus: status.InProgressStatus, readyServers: "0/0",
		},
		{
			name: "a server two entries select gets the first entry's prefix",
			spec: mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{
				{Name: "tickets", Prefix: ptr.To("t_")}, {Selector: &metav1.LabelSelector{MatchLabels: support}}}},
			servers: []mcpv1alpha1.MCPServer{tickets},
			tools:   "t_close=tickets/close t_create=tickets/create",
			ready:   "True/Succeeded", serversReady: "True/Succeeded", unique: "True/Succeeded",
			kstatus: status.CurrentStatus, readyServers: "1/1",
		},
		{
			name: "resources are wrapped per server, ui:// ones keep their scheme, prompts get the prefix",
			spec: mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "docs"}, {Name: "wiki"}}},
			servers: []mcpv1alpha1.MCPServer{
				withFeatures(fixtureServer("docs", nil, true), []string{"file:///a", "ui://app/main", "file:///{path}"}, "summarize"),
				withFeatures(fixtureServer("wiki", nil, true), []string{"file:///a"}, "summarize"),
			},
			ready: "True/Succeeded", serversReady: "True/Succeeded", unique: "True/Succeeded",
			kstatus: status.CurrentStatus, readyServers: "2/2",
			resourceCount: 4, promptCount: 2,
			messageHas: map[string][]string{mcpv1alpha1.ConditionReady: {"Serving 0 tools, 4 resources and 2 prompts of 2 of 2 selected servers"}},
		},
		{
			name: "a resource and a prompt two servers without prefix share are not served, and both origins are named",
			spec: mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "docs", Prefix: ptr.To("")}, {Name: "wiki", Prefix: ptr.To("")}}},
			servers: []mcpv1alpha1.MCPServer{
				withFeatures(fixtureServer("docs", nil, true), []string{"file:///a", "file:///b", "file:///{path}"}, "summarize", "outline"),
				withFeatures(fixtureServer("wiki", nil, true), []string{"file:///a", "file:///{path}"}, "summarize"),
			},
			ready: "True/Succeeded", serversReady: "True/Succeeded", unique: "False/NameCollision",
			kstatus: status.CurrentStatus, readyServers: "2/2",
			resourceCount: 1, promptCount: 1,
			messageHas: map[string][]string{mcpv1alpha1.ConditionNamesUnique: {
				`resource "file:///a" from docs and wiki`,
				`resource template "file:///{path}" from docs and wiki`,
				`prompt "summarize" from docs/summarize and wiki/summarize`,
			}},
		},
		{
			name: "tools, resources and prompts colliding at once are all named, each kind bounded",
			spec: mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "docs", Prefix: ptr.To("")}, {Name: "wiki", Prefix: ptr.To("")}}},
			servers: func() []mcpv1alpha1.MCPServer {
				var tools, resources, prompts []string
				for i := range 20 {
					tools = append(tools, fmt.Sprintf("tool_%02d", i))
					resources = append(resources, fmt.Sprintf("file:///%02d", i))
					prompts = append(prompts, fmt.Sprintf("prompt_%02d", i))
				}
				return []mcpv1alpha1.MCPServer{
					withFeatures(fixtureServer("docs", nil, true, tools...), resources, prompts...),
					withFeatures(fixtureServer("wiki", nil, true, tools...), resources, prompts...),
				}
			}(),
			ready: "True/Succeeded", serversReady: "True/Succeeded", unique: "False/NameCollision",
			kstatus: status.CurrentStatus, readyServers: "2/2",
			messageHas: map[string][]string{mcpv1alpha1.ConditionNamesUnique: {
				`tool "tool_00" from docs/tool_00 and wiki/tool_00`, "and 17 more tools",
				`resource "file:///00" from docs and wiki`, "and 17 more resources",
				`prompt "prompt_00" from docs/prompt_00 and wiki/prompt_00`, "and 17 more prompts",
			}},
		},
		{
			name: "spec.resources deny and spec.prompts allow see the exposed URIs and names",
			spec: mcpv1alpha1.MCPToolsetSpec{
				Servers:   []mcpv1alpha1.ToolsetServer{{Name: "docs"}, {Name: "wiki", Prefix: ptr.To("w_")}},
				Resources: &mcpv1alpha1.ToolsetURIFilter{Deny: []string{"switchboard+wiki:*", "ui://switchboard+docs/secret/*"}},
				Prompts:   &mcpv1alpha1.ToolsetNameFilter{Allow: []string{"docs_*"}},
			},
			servers: []mcpv1alpha1.MCPServer{
				withFeatures(fixtureServer("docs", nil, true), []string{"file:///a", "ui://secret/app", "ui://public/app"}, "summarize", "outline"),
				withFeatures(fixtureServer("wiki", nil, true), []string{"file:///a", "wiki://{page}"}, "summarize"),
			},
			ready: "True/Succeeded", serversReady: "True/Succeeded", unique: "True/Succeeded",
			kstatus: status.CurrentStatus, readyServers: "2/2",
			resourceCount: 2, promptCount: 2,
		},
		{
			name: "a server that is not Ready adds no resources or prompts",
			spec: mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "docs", Prefix: ptr.To("")}, {Name: "wiki", Prefix: ptr.To("")}}},
			servers: []mcpv1alpha1.MCPServer{
				withFeatures(fixtureServer("docs", nil, true), []string{"file:///a"}, "summarize"),
				withFeatures(fixtureServer("wiki", nil, false), []string{"file:///a"}, "summarize"),
			},
			ready: "True/Succeeded", serversReady: "False/ServersNotReady", unique: "True/Succeeded",
			kstatus: status.CurrentStatus, readyServers: "1/2",
			resourceCount: 1, promptCount: 1,
		},
		{
			name: "a wrapped-looking URI of a server without prefix and an invalid prompt name are not served",
			spec: mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "docs", Prefix: ptr.To("")}}},
			servers: []mcpv1alpha1.MCPServer{
				withFeatures(fixtureServer("docs", nil, true), []string{"switchboard+wiki:file:///a", "file:///b"}, "bad name", "good"),
			},
			ready: "True/Succeeded", serversReady: "True/Succeeded", unique: "False/InvalidToolName",
			kstatus: status.CurrentStatus, readyServers: "1/1",
			resourceCount: 1, promptCount: 1,
			messageHas: map[string][]string{mcpv1alpha1.ConditionNamesUnique: {
				`prompt "bad name" from docs/bad name`, `resource "switchboard+wiki:file:///a" from docs`,
			}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := toolsetOf(tc.spec)
			computeToolsetStatus(ts, observeToolset(ts, tc.servers))
			if got := exposed(ts); got != tc.tools {
				t.Errorf("tools:\n got %s\nwant %s", got, tc.tools)
			}
			if got := int(ts.Status.ToolCount); got != len(ts.Status.Tools) || ts.Status.ToolsTruncated {
				t.Errorf("toolCount %d, truncated %v, for %d tools listed", got, ts.Status.ToolsTruncated, len(ts.Status.Tools))
			}
			for condType, want := range map[string]string{
				mcpv1alpha1.ConditionReady: tc.ready, mcpv1alpha1.ConditionServersReady: tc.serversReady,
				mcpv1alpha1.ConditionNamesUnique: tc.unique, mcpv1alpha1.ConditionReconciling: tc.reconciling,
				mcpv1alpha1.ConditionStalled: tc.stalled,
			} {
				if got := toolsetCond(ts, condType); got != want {
					t.Errorf("%s = %q, want %q (%s)", condType, got, want, toolsetMessage(ts, condType))
				}
			}
			for condType, fragments := range tc.messageHas {
				for _, f := range fragments {
					if msg := toolsetMessage(ts, condType); !strings.Contains(msg, f) {
						t.Errorf("%s message %q does not contain %q", condType, msg, f)
					}
				}
			}
			if got := testutil.KStatus(t, ts); got != tc.kstatus {
				t.Errorf("kstatus %s, want %s", got, tc.kstatus)
			}
			if ts.Status.ResourceCount != tc.resourceCount || ts.Status.PromptCount != tc.promptCount {
				t.Errorf("resourceCount %d, promptCount %d; want %d, %d", ts.Status.ResourceCount, ts.Status.PromptCount, tc.resourceCount, tc.promptCount)
			}
			if ts.Status.ReadyServers != tc.readyServers {
				t.Errorf("readyServers %q, want %q", ts.Status.ReadyServers, tc.readyServers)
			}
			if ts.Status.GatewayPath != "/mcp/namespaces/team-a/toolsets/support-agent" || ts.Status.ObservedGeneration != 3 {
				t.Errorf("gatewayPath %q, observedGeneration %d", ts.Status.GatewayPath, ts.Status.ObservedGeneration)
			}
			for name, want := range tc.serverToolCounts {
				found := false
				for _, s := range ts.Status.Servers {
					if s.Name == name {
						found = true
						if s.ToolCount != want {
							t.Errorf("server %s toolCount %d, want %d", name, s.ToolCount, want)
						}
					}
				}
				if !found {
					t.Errorf("server %s missing from status.servers %+v", name, ts.Status.Servers)
				}
			}
		})
	}
}

func TestToolsetStatusIsBoundedAndStable(t *testing.T) {
	var tools []string
	for i := range 300 {
		tools = append(tools, fmt.Sprintf("tool_%03d", i))
	}
	servers := []mcpv1alpha1.MCPServer{fixtureServer("big", nil, true, tools...)}
	ts := toolsetOf(mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "big"}}})
	computeToolsetStatus(ts, observeToolset(ts, servers))
	if len(ts.Status.Tools) != 256 || ts.Status.ToolCount != 300 || !ts.Status.ToolsTruncated {
		t.Fatalf("listed %d tools, toolCount %d, truncated %v; want 256, 300, true", len(ts.Status.Tools), ts.Status.ToolCount, ts.Status.ToolsTruncated)
	}
	first := ts.Status.DeepCopy()

	// Computing again from the same observation changes nothing: no status write.
	computeToolsetStatus(ts, observeToolset(ts, servers))
	if ts.Status.ToolsDigest != first.ToolsDigest || !meta.IsStatusConditionTrue(ts.Status.Conditions, mcpv1alpha1.ConditionReady) {
		t.Fatalf("status changed on a recompute")
	}

	// An origin's tools changing (same names, new definitions) changes the digest.
	servers[0].Status.ToolsDigest = "sha256:other"
	computeToolsetStatus(ts, observeToolset(ts, servers))
	if ts.Status.ToolsDigest == first.ToolsDigest {
		t.Errorf("toolsDigest did not change when the origin's tools digest did")
	}
	// A description override changes it too.
	before := ts.Status.ToolsDigest
	ts.Spec.Tools = &mcpv1alpha1.ToolsetTools{Overrides: []mcpv1alpha1.ToolOverride{{Name: "big_tool_000", Description: "new"}}}
	computeToolsetStatus(ts, observeToolset(ts, servers))
	if ts.Status.ToolsDigest == before {
		t.Errorf("toolsDigest did not change with a description override")
	}
}
