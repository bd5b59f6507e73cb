package catalog_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// createToolset creates a toolset over server and writes the status its reconciler would.
func createToolset(tb testing.TB, ns, name, server string) {
	tb.Helper()
	ctx := context.Background()
	ts := &mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       mcpv1alpha1.MCPToolsetSpec{Description: "Tools for " + name, Servers: []mcpv1alpha1.ToolsetServer{{Name: server}}},
	}
	if err := k8sClient.Create(ctx, ts); err != nil {
		tb.Fatal(err)
	}
	ts.Status = mcpv1alpha1.MCPToolsetStatus{
		ObservedGeneration: ts.Generation,
		Conditions: []metav1.Condition{{Type: mcpv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: mcpv1alpha1.ReasonSucceeded,
			ObservedGeneration: ts.Generation, LastTransitionTime: metav1.Now()}},
		Servers:     []mcpv1alpha1.ToolsetServerStatus{{Name: server, Ready: true, ToolCount: 2}},
		ToolCount:   2,
		GatewayPath: "/mcp/namespaces/" + ns + "/toolsets/" + name,
	}
	if err := k8sClient.Status().Update(ctx, ts); err != nil {
		tb.Fatal(err)
	}
}

func TestToolsetsAreListedPerNamespaceOverRESTAndMCP(t *testing.T) {
	c := startCatalog(t, catalog.AuthTokenReview)
	mine, theirs := newNamespace(t), newNamespace(t)
	for _, ns := range []string{mine, theirs} {
		createServer(t, ns, serverSpec{name: "github"})
		createToolset(t, ns, "support-agent", "github")
	}
	token := newCaller(t, mine, "agent", true)

	var list catalog.ToolsetList
	testutil.Eventually(t, 20*time.Second, "the toolset to be listed", func() error {
		list = catalog.ToolsetList{}
		c.getJSON(t, token, "/api/v1/toolsets", &list)
		if len(list.Items) != 1 || list.Items[0].ToolCount != 2 {
			return fmt.Errorf("listed %+v", list.Items)
		}
		return nil
	})
	got := list.Items[0]
	want := catalog.ToolsetSummary{Namespace: mine, Name: "support-agent", Description: "Tools for support-agent", Discovery: "Direct",
		Ready: true, Servers: []string{"github"}, ToolCount: 2, GatewayPath: "/mcp/namespaces/" + mine + "/toolsets/support-agent"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("listed %+v\nwant %+v", got, want)
	}
	// Another namespace's toolset is not shown, and asking for it is refused.
	c.expectError(t, token, "/api/v1/toolsets?namespace="+theirs, 403)

	var viaMCP catalog.ToolsetList
	callTool(t, mcpSession(t, c, token), "list_toolsets", map[string]any{}, &viaMCP)
	if len(viaMCP.Items) != 1 || viaMCP.Items[0].GatewayPath != want.GatewayPath {
		t.Errorf("list_toolsets = %+v", viaMCP.Items)
	}
}

func TestToolsetsListTheirResourcesAndPrompts(t *testing.T) {
	c := startCatalog(t, catalog.AuthTokenReview)
	ns := newNamespace(t)
	ctx := context.Background()
	docs := createServer(t, ns, serverSpec{name: "docs",
		resources: []mcpv1alpha1.ResourceInfo{
			{URI: "file:///a", Name: "a"}, {URI: "ui://app/main", Name: "app"}, {URITemplate: "file:///{path}", Name: "files"},
		},
		prompts: []mcpv1alpha1.PromptInfo{{Name: "summarize", Description: "Summarizes a page"}, {Name: "internal"}},
	})
	createServer(t, ns, serverSpec{name: "wiki",
		resources: []mcpv1alpha1.ResourceInfo{{URI: "wiki://home", Name: "home"}},
		prompts:   []mcpv1alpha1.PromptInfo{{Name: "outline", Description: "Outlines a page"}},
	})
	createServer(t, ns, serverSpec{name: "down", notReady: true,
		resources: []mcpv1alpha1.ResourceInfo{{URI: "down://x", Name: "x"}},
	})
	ts := &mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader"},
		Spec: mcpv1alpha1.MCPToolsetSpec{
			Servers: []mcpv1alpha1.ToolsetServer{{Name: "docs"}, {Name: "wiki", Prefix: ptr.To("")}, {Name: "down"}},
			Prompts: &mcpv1alpha1.ToolsetNameFilter{Deny: []string{"*internal*"}},
		},
	}
	if err := k8sClient.Create(ctx, ts); err != nil {
		t.Fatal(err)
	}
	token := newCaller(t, ns, "agent", true)

	want := catalog.ToolsetSummary{Namespace: ns, Name: "reader", Discovery: "Direct",
		GatewayPath: "/mcp/namespaces/" + ns + "/toolsets/reader",
		Resources: []catalog.ToolsetResource{
			{URI: "switchboard+docs:file:///a", Name: "a", Server: "docs"},
			{URI: "ui://switchboard+docs/app/main", Name: "app", Server: "docs"},
			{URI: "wiki://home", Name: "home", Server: "wiki"},
		},
		ResourceTemplates: []catalog.ToolsetResourceTemplate{{URITemplate: "switchboard+docs:file:///{path}", Name: "files", Server: "docs"}},
		ResourceCount:     4,
		Prompts: []catalog.ToolsetPrompt{
			{Name: "docs_summarize", Description: "Summarizes a page", Server: "docs"},
			{Name: "outline", Description: "Outlines a page", Server: "wiki"},
		},
		PromptCount: 2,
	}
	awaitToolsetListing(t, c, token, want)

	var viaMCP catalog.ToolsetList
	callTool(t, mcpSession(t, c, token), "list_toolsets", map[string]any{"namespace": ns}, &viaMCP)
	if len(viaMCP.Items) != 1 || !reflect.DeepEqual(viaMCP.Items[0], want) {
		t.Errorf("list_toolsets = %+v\nwant %+v", viaMCP.Items, want)
	}

	// A prompt added to an origin's status is listed without any change to the toolset.
	docs.Status.Prompts = append(docs.Status.Prompts, mcpv1alpha1.PromptInfo{Name: "translate"})
	if err := k8sClient.Status().Update(ctx, docs); err != nil {
		t.Fatal(err)
	}
	want.Prompts = append(want.Prompts[:1], catalog.ToolsetPrompt{Name: "docs_translate", Server: "docs"}, want.Prompts[1])
	want.PromptCount = 3
	awaitToolsetListing(t, c, token, want)
}

// awaitToolsetListing waits until GET /api/v1/toolsets lists want alone.
func awaitToolsetListing(t *testing.T, c *running, token string, want catalog.ToolsetSummary) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, "the toolset listed with its resources and prompts", func() error {
		var list catalog.ToolsetList
		c.getJSON(t, token, "/api/v1/toolsets?namespace="+want.Namespace, &list)
		if len(list.Items) != 1 || !reflect.DeepEqual(list.Items[0], want) {
			return fmt.Errorf("listed %+v\nwant %+v", list.Items, want)
		}
		return nil
	})
}
