package catalog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
