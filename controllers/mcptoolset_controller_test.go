package controllers_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// awaitToolset waits until cond holds of ts as the API server has it.
func awaitToolset(t testing.TB, ts *mcpv1alpha1.MCPToolset, what string, cond func(*mcpv1alpha1.MCPToolset) error) {
	t.Helper()
	testutil.Eventually(t, eventually, what, func() error {
		got := &mcpv1alpha1.MCPToolset{}
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(ts), got); err != nil {
			return err
		}
		return cond(got)
	})
}

// updateToolset changes ts's spec, retrying on conflicts.
func updateToolset(t testing.TB, ts *mcpv1alpha1.MCPToolset, mutate func(*mcpv1alpha1.MCPToolset)) {
	t.Helper()
	testutil.Eventually(t, eventually, "the toolset "+ts.Name+" updated", func() error {
		cur := &mcpv1alpha1.MCPToolset{}
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(ts), cur); err != nil {
			return err
		}
		mutate(cur)
		return k8sClient.Update(context.Background(), cur)
	})
}

// exposedTools renders a toolset's status.tools as "name=server/tool" entries.
func exposedTools(ts *mcpv1alpha1.MCPToolset) string {
	parts := make([]string, len(ts.Status.Tools))
	for i, t := range ts.Status.Tools {
		parts[i] = t.Name + "=" + t.Server + "/" + t.Tool
	}
	return strings.Join(parts, " ")
}

func toolsetCondition(ts *mcpv1alpha1.MCPToolset, condType string) string {
	c := meta.FindStatusCondition(ts.Status.Conditions, condType)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason + ": " + c.Message
}

// TestToolsetStatusFollowsRealServers runs two go-sdk servers as MCPServers and a
// toolset over both: status lists the exposed tools with their origins after prefix,
// allow, deny and rename, and follows a tool added on an origin and an origin going down.
func TestToolsetStatusFollowsRealServers(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)

	github := newMCPServer(t, 0)
	for _, name := range []string{"search_issues", "search_code", "delete_repo"} {
		github.addTool(name)
	}
	tickets := newMCPServer(t, 0)
	for _, name := range []string{"create", "close_ticket"} {
		tickets.addTool(name)
	}
	g.Expect(k8sClient.Create(ctx, httpServer(ns, "github", github.url()))).To(Succeed())
	ticketsObj := httpServer(ns, "tickets", tickets.url())
	ticketsObj.Labels = map[string]string{"team": "support"}
	g.Expect(k8sClient.Create(ctx, ticketsObj)).To(Succeed())

	ts := &mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "support-agent"},
		Spec: mcpv1alpha1.MCPToolsetSpec{
			Servers: []mcpv1alpha1.ToolsetServer{
				{Name: "github", Prefix: ptr.To("gh_")},
				{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "support"}}},
			},
			Tools: &mcpv1alpha1.ToolsetTools{
				Allow: []string{"gh_*", "tickets_*"},
				Deny:  []string{"*_delete*", "*close*"},
				Overrides: []mcpv1alpha1.ToolOverride{
					{Name: "gh_search_issues", Rename: "search_issues", Description: "Search GitHub issues of the acme org."},
				},
			},
		},
	}
	g.Expect(k8sClient.Create(ctx, ts)).To(Succeed())

	var digest string
	awaitToolset(t, ts, "the toolset Ready with its three tools", func(got *mcpv1alpha1.MCPToolset) error {
		if tools := exposedTools(got); tools != "gh_search_code=github/search_code search_issues=github/search_issues tickets_create=tickets/create" {
			return fmt.Errorf("tools %q", tools)
		}
		for _, c := range []string{mcpv1alpha1.ConditionReady, mcpv1alpha1.ConditionServersReady, mcpv1alpha1.ConditionNamesUnique} {
			if got := toolsetCondition(got, c); !strings.HasPrefix(got, "True/") {
				return fmt.Errorf("%s is %q", c, got)
			}
		}
		if got.Status.ToolCount != 3 || !strings.HasPrefix(got.Status.ToolsDigest, "sha256:") ||
			got.Status.GatewayPath != "/mcp/namespaces/"+ns+"/toolsets/support-agent" || got.Status.ReadyServers != "2/2" ||
			!reflect.DeepEqual(got.Status.Servers, []mcpv1alpha1.ToolsetServerStatus{
				{Name: "github", Ready: true, ToolCount: 2}, {Name: "tickets", Ready: true, ToolCount: 1}}) ||
			got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("status %+v at generation %d", got.Status, got.Generation)
		}
		digest = got.Status.ToolsDigest
		return kstatusIs(t, got, status.CurrentStatus)
	})

	// A tool added on an origin reaches the toolset's status through the server's
	// list_changed, with no change to either object's spec.
	github.addTool("search_prs")
	awaitToolset(t, ts, "the added tool in the toolset, with a new digest", func(got *mcpv1alpha1.MCPToolset) error {
		if tools := exposedTools(got); !strings.Contains(tools, "gh_search_prs=github/search_prs") || got.Status.ToolsDigest == digest {
			return fmt.Errorf("tools %q, digest %s (was %s)", tools, got.Status.ToolsDigest, digest)
		}
		return nil
	})

	// A label change drops a server the selector chose.
	testutil.Eventually(t, eventually, "the tickets server relabelled", func() error {
		cur := &mcpv1alpha1.MCPServer{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(ticketsObj), cur); err != nil {
			return err
		}
		cur.Labels = map[string]string{"team": "sales"}
		return k8sClient.Update(ctx, cur)
	})
	awaitToolset(t, ts, "the relabelled server dropped", func(got *mcpv1alpha1.MCPToolset) error {
		if tools := exposedTools(got); strings.Contains(tools, "tickets_") || got.Status.ReadyServers != "1/1" {
			return fmt.Errorf("tools %q, readyServers %s", tools, got.Status.ReadyServers)
		}
		return nil
	})

	// An origin going down leaves the toolset Ready with the other servers' tools, and
	// ServersReady names it; with no Ready server left the toolset is not Ready.
	updateToolset(t, ts, func(cur *mcpv1alpha1.MCPToolset) {
		cur.Spec.Servers = append(cur.Spec.Servers, mcpv1alpha1.ToolsetServer{Name: "tickets"})
	})
	awaitToolset(t, ts, "both servers Ready", func(got *mcpv1alpha1.MCPToolset) error {
		if got.Status.ReadyServers != "2/2" {
			return fmt.Errorf("readyServers %s", got.Status.ReadyServers)
		}
		return nil
	})
	tickets.stop()
	awaitToolset(t, ts, "Ready with ServersReady naming the server that went down", func(got *mcpv1alpha1.MCPToolset) error {
		ready, servers := toolsetCondition(got, mcpv1alpha1.ConditionReady), toolsetCondition(got, mcpv1alpha1.ConditionServersReady)
		if !strings.HasPrefix(ready, "True/") || !strings.HasPrefix(servers, "False/ServersNotReady") || !strings.Contains(servers, "tickets (") {
			return fmt.Errorf("Ready is %q, ServersReady %q", ready, servers)
		}
		if tools := exposedTools(got); strings.Contains(tools, "tickets_") {
			return fmt.Errorf("tools %q", tools)
		}
		return nil
	})
	github.stop()
	awaitToolset(t, ts, "not Ready with no Ready server", func(got *mcpv1alpha1.MCPToolset) error {
		ready, reconciling := toolsetCondition(got, mcpv1alpha1.ConditionReady), toolsetCondition(got, mcpv1alpha1.ConditionReconciling)
		if !strings.HasPrefix(ready, "False/ServersNotReady") || !strings.HasPrefix(reconciling, "True/") || len(got.Status.Tools) != 0 {
			return fmt.Errorf("Ready is %q, Reconciling %q, tools %q", ready, reconciling, exposedTools(got))
		}
		return nil
	})
}

// TestToolsetCollisionServesNeither exposes two servers' tools without prefixes: the
// shared name is reported with both origins and neither tool is exposed.
func TestToolsetCollisionServesNeither(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)

	a, b := newMCPServer(t, 0), newMCPServer(t, 0)
	a.addTool("search")
	a.addTool("only_a")
	b.addTool("search")
	g.Expect(k8sClient.Create(ctx, httpServer(ns, "alpha", a.url()))).To(Succeed())
	g.Expect(k8sClient.Create(ctx, httpServer(ns, "beta", b.url()))).To(Succeed())
	ts := &mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "flat"},
		Spec: mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{
			{Name: "alpha", Prefix: ptr.To("")}, {Name: "beta", Prefix: ptr.To("")}}},
	}
	g.Expect(k8sClient.Create(ctx, ts)).To(Succeed())
	awaitToolset(t, ts, "the collision reported, neither tool exposed", func(got *mcpv1alpha1.MCPToolset) error {
		unique, ready := toolsetCondition(got, mcpv1alpha1.ConditionNamesUnique), toolsetCondition(got, mcpv1alpha1.ConditionReady)
		if tools := exposedTools(got); tools != "only_a=alpha/only_a" {
			return fmt.Errorf("tools %q", tools)
		}
		if !strings.HasPrefix(unique, "False/NameCollision") || !strings.Contains(unique, `"search" from alpha/search and beta/search`) || !strings.HasPrefix(ready, "True/") {
			return fmt.Errorf("NamesUnique is %q, Ready %q", unique, ready)
		}
		return nil
	})

	// A prefix on one of them resolves it: both tools are then exposed.
	updateToolset(t, ts, func(cur *mcpv1alpha1.MCPToolset) { cur.Spec.Servers[1].Prefix = ptr.To("b_") })
	awaitToolset(t, ts, "both tools exposed", func(got *mcpv1alpha1.MCPToolset) error {
		tools, unique := exposedTools(got), toolsetCondition(got, mcpv1alpha1.ConditionNamesUnique)
		if tools != "b_search=beta/search only_a=alpha/only_a search=alpha/search" || !strings.HasPrefix(unique, "True/") {
			return fmt.Errorf("tools %q, NamesUnique %q", tools, unique)
		}
		return nil
	})
}

// TestToolsetResourcesAndPromptsFollowRealServers runs two go-sdk servers that offer
// the same resource and prompt: their MCPServers list them (the URI without its query
// string), the toolset without prefixes reports both collisions naming both origins, and
// a resource added on an origin reaches the toolset's resourceCount.
func TestToolsetResourcesAndPromptsFollowRealServers(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)

	docs, wiki := newMCPServer(t, 0), newMCPServer(t, 0)
	for _, s := range []*mcpServer{docs, wiki} {
		s.server.AddResource(&mcp.Resource{URI: "file:///a?token=s3cret-4242", Name: "a", MIMEType: "text/plain"}, nil)
		s.server.AddPrompt(&mcp.Prompt{Name: "summarize", Description: "Summarizes"},
			func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{}, nil
			})
	}
	docs.server.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "file:///{path}", Name: "files"}, nil)
	docsObj := httpServer(ns, "docs", docs.url())
	g.Expect(k8sClient.Create(ctx, docsObj)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, httpServer(ns, "wiki", wiki.url()))).To(Succeed())

	testutil.Eventually(t, eventually, "the docs server listing its resources and prompt", func() error {
		got, err := readyIs(docsObj, metav1.ConditionTrue, "")
		if err != nil {
			return err
		}
		st := got.Status
		want := []mcpv1alpha1.ResourceInfo{{URI: "file:///a", Name: "a", MIMEType: "text/plain"}, {URITemplate: "file:///{path}", Name: "files"}}
		if !reflect.DeepEqual(st.Resources, want) || len(st.Prompts) != 1 || st.Prompts[0].Name != "summarize" || st.ResourceCount != 2 {
			return fmt.Errorf("resources %+v, prompts %+v, resourceCount %d", st.Resources, st.Prompts, st.ResourceCount)
		}
		if strings.Contains(fmt.Sprintf("%+v", st), "s3cret-4242") {
			return fmt.Errorf("status carries a resource URI's query string: %+v", st)
		}
		return nil
	})

	ts := &mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "flat"},
		Spec: mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{
			{Name: "docs", Prefix: ptr.To("")}, {Name: "wiki", Prefix: ptr.To("")}}},
	}
	g.Expect(k8sClient.Create(ctx, ts)).To(Succeed())
	awaitToolset(t, ts, "the resource and prompt collisions reported", func(got *mcpv1alpha1.MCPToolset) error {
		unique := toolsetCondition(got, mcpv1alpha1.ConditionNamesUnique)
		if !strings.HasPrefix(unique, "False/NameCollision") || !strings.Contains(unique, `resource "file:///a" from docs and wiki`) ||
			!strings.Contains(unique, `prompt "summarize" from docs/summarize and wiki/summarize`) {
			return fmt.Errorf("NamesUnique is %q", unique)
		}
		if got.Status.ResourceCount != 1 || got.Status.PromptCount != 0 {
			return fmt.Errorf("resourceCount %d, promptCount %d; want the template alone", got.Status.ResourceCount, got.Status.PromptCount)
		}
		return nil
	})

	// A resource added on an origin reaches the toolset through the server's
	// resources/list_changed, its MCPServer's status and the toolset's watch.
	wiki.server.AddResource(&mcp.Resource{URI: "file:///b", Name: "b"}, nil)
	awaitToolset(t, ts, "the added resource counted", func(got *mcpv1alpha1.MCPToolset) error {
		if got.Status.ResourceCount != 2 {
			return fmt.Errorf("resourceCount %d", got.Status.ResourceCount)
		}
		return nil
	})
}

// BenchmarkToolsetStatusAfterToolChange measures how long a toolset's status takes to
// list a tool added on an origin server: from the server's tools/list_changed through
// the connector's rediscovery, the MCPServer's status, to the toolset's status. It
// reports the median and the worst of b.N changes, and, for comparison, the part the
// MCPServer's own status takes.
//
//	go test -run '^$' -bench ToolsetStatusAfterToolChange -benchtime 20x ./controllers/
func BenchmarkToolsetStatusAfterToolChange(b *testing.B) {
	ctx := context.Background()
	ns := newNamespace(b)
	startOperator(b, ns)
	srv := newMCPServer(b, 3)
	server := httpServer(ns, "origin", srv.url())
	if err := k8sClient.Create(ctx, server); err != nil {
		b.Fatal(err)
	}
	ts := &mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench"},
		Spec:       mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "origin"}}},
	}
	if err := k8sClient.Create(ctx, ts); err != nil {
		b.Fatal(err)
	}
	has := func(name string) (serverHas, toolsetHas bool) {
		var s mcpv1alpha1.MCPServer
		var t mcpv1alpha1.MCPToolset
		if k8sClient.Get(ctx, client.ObjectKeyFromObject(server), &s) == nil {
			serverHas = slices.ContainsFunc(s.Status.Tools, func(x mcpv1alpha1.ToolInfo) bool { return x.Name == name })
		}
		if k8sClient.Get(ctx, client.ObjectKeyFromObject(ts), &t) == nil {
			toolsetHas = slices.ContainsFunc(t.Status.Tools, func(x mcpv1alpha1.ToolsetTool) bool { return x.Name == "origin_"+name })
		}
		return
	}
	testutil.Eventually(b, eventually, "the toolset to list the origin's tools", func() error {
		if _, ok := has("tool_0002"); !ok {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	var toServer, toToolset []time.Duration
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("added_%04d", i)
		start := time.Now()
		srv.addTool(name)
		var serverAt time.Duration
		testutil.Eventually(b, eventually, "the toolset to list "+name, func() error {
			s, t := has(name)
			if s && serverAt == 0 {
				serverAt = time.Since(start)
			}
			if !t {
				return fmt.Errorf("server has it: %v", s)
			}
			return nil
		})
		if serverAt == 0 {
			serverAt = time.Since(start)
		}
		toToolset = append(toToolset, time.Since(start))
		toServer = append(toServer, serverAt)
	}
	b.StopTimer()
	slices.Sort(toToolset)
	slices.Sort(toServer)
	b.ReportMetric(float64(toToolset[len(toToolset)/2].Milliseconds()), "ms-toolset-p50")
	b.ReportMetric(float64(toToolset[len(toToolset)-1].Milliseconds()), "ms-toolset-max")
	b.ReportMetric(float64(toServer[len(toServer)/2].Milliseconds()), "ms-server-p50")
}
