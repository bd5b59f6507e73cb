package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

func getToolset(g Gomega, ts *mcpv1alpha1.MCPToolset) *mcpv1alpha1.MCPToolset {
	out := &mcpv1alpha1.MCPToolset{}
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(ts), out)).To(Succeed())
	return out
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

	g.Eventually(func(g Gomega) {
		got := getToolset(g, ts)
		g.Expect(exposedTools(got)).To(Equal("gh_search_code=github/search_code search_issues=github/search_issues tickets_create=tickets/create"))
		g.Expect(toolsetCondition(got, mcpv1alpha1.ConditionReady)).To(HavePrefix("True/"))
		g.Expect(toolsetCondition(got, mcpv1alpha1.ConditionServersReady)).To(HavePrefix("True/"))
		g.Expect(toolsetCondition(got, mcpv1alpha1.ConditionNamesUnique)).To(HavePrefix("True/"))
		g.Expect(got.Status.ToolCount).To(BeEquivalentTo(3))
		g.Expect(got.Status.ToolsDigest).To(HavePrefix("sha256:"))
		g.Expect(got.Status.GatewayPath).To(Equal("/mcp/namespaces/" + ns + "/toolsets/support-agent"))
		g.Expect(got.Status.ReadyServers).To(Equal("2/2"))
		g.Expect(got.Status.Servers).To(Equal([]mcpv1alpha1.ToolsetServerStatus{
			{Name: "github", Ready: true, ToolCount: 2}, {Name: "tickets", Ready: true, ToolCount: 1}}))
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(testutil.KStatus(t, got)).To(Equal(status.CurrentStatus))
	}, eventually, poll).Should(Succeed())
	digest := getToolset(g, ts).Status.ToolsDigest

	// A tool added on an origin reaches the toolset's status through the server's
	// list_changed, with no change to either object's spec.
	github.addTool("search_prs")
	g.Eventually(func(g Gomega) {
		got := getToolset(g, ts)
		g.Expect(exposedTools(got)).To(ContainSubstring("gh_search_prs=github/search_prs"))
		g.Expect(got.Status.ToolsDigest).NotTo(Equal(digest))
	}, eventually, poll).Should(Succeed())

	// A label change drops a server the selector chose.
	g.Eventually(func() error {
		cur := &mcpv1alpha1.MCPServer{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(ticketsObj), cur); err != nil {
			return err
		}
		cur.Labels = map[string]string{"team": "sales"}
		return k8sClient.Update(ctx, cur)
	}, eventually, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := getToolset(g, ts)
		g.Expect(exposedTools(got)).NotTo(ContainSubstring("tickets_"))
		g.Expect(got.Status.ReadyServers).To(Equal("1/1"))
	}, eventually, poll).Should(Succeed())

	// An origin going down leaves the toolset Ready with the other servers' tools, and
	// ServersReady names it; with no Ready server left the toolset is not Ready.
	g.Eventually(func() error {
		cur := &mcpv1alpha1.MCPToolset{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(ts), cur); err != nil {
			return err
		}
		cur.Spec.Servers = append(cur.Spec.Servers, mcpv1alpha1.ToolsetServer{Name: "tickets"})
		return k8sClient.Update(ctx, cur)
	}, eventually, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(getToolset(g, ts).Status.ReadyServers).To(Equal("2/2"))
	}, eventually, poll).Should(Succeed())
	tickets.stop()
	g.Eventually(func(g Gomega) {
		got := getToolset(g, ts)
		g.Expect(toolsetCondition(got, mcpv1alpha1.ConditionReady)).To(HavePrefix("True/"))
		g.Expect(toolsetCondition(got, mcpv1alpha1.ConditionServersReady)).To(And(HavePrefix("False/ServersNotReady"), ContainSubstring("tickets (")))
		g.Expect(exposedTools(got)).NotTo(ContainSubstring("tickets_"))
	}, eventually, poll).Should(Succeed())
	github.stop()
	g.Eventually(func(g Gomega) {
		got := getToolset(g, ts)
		g.Expect(toolsetCondition(got, mcpv1alpha1.ConditionReady)).To(HavePrefix("False/ServersNotReady"))
		g.Expect(toolsetCondition(got, mcpv1alpha1.ConditionReconciling)).To(HavePrefix("True/"))
		g.Expect(got.Status.Tools).To(BeEmpty())
	}, eventually, poll).Should(Succeed())
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
	g.Eventually(func(g Gomega) {
		got := getToolset(g, ts)
		g.Expect(exposedTools(got)).To(Equal("only_a=alpha/only_a"))
		g.Expect(toolsetCondition(got, mcpv1alpha1.ConditionNamesUnique)).To(And(
			HavePrefix("False/NameCollision"), ContainSubstring(`"search" from alpha/search and beta/search`)))
		g.Expect(toolsetCondition(got, mcpv1alpha1.ConditionReady)).To(HavePrefix("True/"))
	}, eventually, poll).Should(Succeed())

	// A prefix on one of them resolves it: both tools are then exposed.
	g.Eventually(func() error {
		cur := &mcpv1alpha1.MCPToolset{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(ts), cur); err != nil {
			return err
		}
		cur.Spec.Servers[1].Prefix = ptr.To("b_")
		return k8sClient.Update(ctx, cur)
	}, eventually, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := getToolset(g, ts)
		g.Expect(exposedTools(got)).To(Equal("b_search=beta/search only_a=alpha/only_a search=alpha/search"))
		g.Expect(toolsetCondition(got, mcpv1alpha1.ConditionNamesUnique)).To(HavePrefix("True/"))
	}, eventually, poll).Should(Succeed())
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
