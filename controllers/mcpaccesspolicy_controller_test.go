package controllers_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// getAccessPolicy reads the policy's current state.
func getAccessPolicy(g Gomega, p *mcpv1alpha1.MCPAccessPolicy) *mcpv1alpha1.MCPAccessPolicy {
	out := &mcpv1alpha1.MCPAccessPolicy{}
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(p), out)).To(Succeed())
	return out
}

// accessPolicyTargets lists status.targets as "Kind/name".
func accessPolicyTargets(p *mcpv1alpha1.MCPAccessPolicy) []string {
	out := []string{}
	for _, t := range p.Status.Targets {
		out = append(out, string(t.Kind)+"/"+t.Name)
	}
	return out
}

func TestAccessPolicyReportsTheTargetsItSelects(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)

	// Nothing listens there: the policy's status does not depend on the servers' health.
	const url = "http://127.0.0.1:9/mcp"
	github := httpServer(ns, "github", url)
	github.Labels = map[string]string{"team": "search"}
	web := httpServer(ns, "web", url)
	g.Expect(k8sClient.Create(ctx, github)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, web)).To(Succeed())
	toolset := &mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "assistant", Labels: map[string]string{"team": "search"}},
		Spec:       mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "github"}}},
	}
	g.Expect(k8sClient.Create(ctx, toolset)).To(Succeed())

	rules := []mcpv1alpha1.AccessPolicyRule{{
		Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: "oidc:finance"}},
		Tools:    []string{"get_*"},
		Action:   mcpv1alpha1.AccessPolicyAllow,
		When:     `has(arguments.repo) && arguments.repo.startsWith("acme/")`,
	}}
	bySelector := &mcpv1alpha1.MCPAccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-selector"},
		Spec: mcpv1alpha1.MCPAccessPolicySpec{
			TargetSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "search"}},
			Rules:          rules,
		},
	}
	byRefs := &mcpv1alpha1.MCPAccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-refs"},
		Spec: mcpv1alpha1.MCPAccessPolicySpec{
			TargetRefs: []mcpv1alpha1.AccessPolicyTargetRef{
				{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: "web"},
				{Kind: mcpv1alpha1.AccessPolicyTargetMCPToolset, Name: "assistant"},
				{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: "not-yet"},
			},
			Enforcement: mcpv1alpha1.AccessPolicyAudit,
			Rules:       rules,
		},
	}
	g.Expect(k8sClient.Create(ctx, bySelector)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, byRefs)).To(Succeed())

	g.Eventually(func(g Gomega) {
		got := getAccessPolicy(g, bySelector)
		g.Expect(accessPolicyTargets(got)).To(Equal([]string{"MCPServer/github", "MCPToolset/assistant"}))
		g.Expect(got.Status.TargetCount).To(BeEquivalentTo(2))
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Message).To(Equal("Enforcing 1 rules on 2 targets"))
		g.Expect(string(testutil.KStatus(t, got))).To(Equal("Current"))
	}, eventually, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := getAccessPolicy(g, byRefs)
		g.Expect(accessPolicyTargets(got)).To(Equal([]string{"MCPServer/web", "MCPToolset/assistant"}))
		g.Expect(meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady).Message).To(Equal("Auditing 1 rules on 2 targets"))
	}, eventually, poll).Should(Succeed())

	// The status follows the servers: a label removed, a named server created, a toolset
	// deleted.
	unlabel := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":null}}`))
	g.Expect(k8sClient.Patch(ctx, github, unlabel)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, httpServer(ns, "not-yet", url))).To(Succeed())
	g.Expect(k8sClient.Delete(ctx, toolset)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(accessPolicyTargets(getAccessPolicy(g, bySelector))).To(BeEmpty())
		g.Expect(accessPolicyTargets(getAccessPolicy(g, byRefs))).To(Equal([]string{"MCPServer/not-yet", "MCPServer/web"}))
	}, eventually, poll).Should(Succeed())
}

func TestAccessPolicyWithABadExpressionIsNotReady(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)

	p := &mcpv1alpha1.MCPAccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "typo"},
		Spec: mcpv1alpha1.MCPAccessPolicySpec{
			TargetRefs: []mcpv1alpha1.AccessPolicyTargetRef{{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: "github"}},
			Rules: []mcpv1alpha1.AccessPolicyRule{
				{
					Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectUser, Name: "alice"}},
					Tools:    []string{"*"},
					Action:   mcpv1alpha1.AccessPolicyAllow,
				},
				{
					Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectServiceAccount, Namespace: "agents", Name: "triage"}},
					Tools:    []string{"get_*"},
					Action:   mcpv1alpha1.AccessPolicyAllow,
					When:     `caller.usrname == "alice"`,
				},
			},
		},
	}
	g.Expect(k8sClient.Create(ctx, p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := getAccessPolicy(g, p)
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(mcpv1alpha1.ReasonInvalidExpression))
		g.Expect(c.Message).To(ContainSubstring("spec.rules[1].when does not compile"))
		g.Expect(c.Message).To(ContainSubstring("undefined field 'usrname'"))
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, mcpv1alpha1.ConditionStalled)).To(BeTrue())
		g.Expect(string(testutil.KStatus(t, got))).To(Equal("Failed"))
	}, eventually, poll).Should(Succeed())

	// Fixing the expression makes it Ready, and Stalled goes away.
	g.Eventually(func() error {
		cur := &mcpv1alpha1.MCPAccessPolicy{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
			return err
		}
		cur.Spec.Rules[1].When = `caller.username == "alice"`
		return k8sClient.Update(ctx, cur)
	}, eventually, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := getAccessPolicy(g, p)
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, mcpv1alpha1.ConditionReady)).To(BeTrue())
		g.Expect(meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionStalled)).To(BeNil())
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(string(testutil.KStatus(t, got))).To(Equal("Current"))
	}, eventually, poll).Should(Succeed())
}
