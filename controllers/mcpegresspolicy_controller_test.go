package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/egress"
)

// isolatingPolicy selects servers labelled team=search and allows only a range that holds
// none of the test servers.
func isolatingPolicy(namespace string) *mcpv1alpha1.MCPEgressPolicy {
	return &mcpv1alpha1.MCPEgressPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "lockdown"},
		Spec: mcpv1alpha1.MCPEgressPolicySpec{
			ServerSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "search"}},
			Egress: []mcpv1alpha1.EgressRule{{
				To:    []mcpv1alpha1.EgressPeer{{IPBlock: &mcpv1alpha1.IPBlock{CIDR: "192.0.2.0/24"}}},
				Ports: []mcpv1alpha1.EgressPort{{Port: 443}},
			}},
		},
	}
}

func TestPolicyCreatedAfterConnectDropsSessionAndDeletionRestoresIt(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 1)

	obj := httpServer(ns, "searcher", srv.url())
	obj.Labels = map[string]string{"team": "search"}
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	bystander := httpServer(ns, "bystander", srv.url())
	g.Expect(k8sClient.Create(ctx, bystander)).To(Succeed())
	g.Eventually(func(g Gomega) {
		readyIs(g, obj, metav1.ConditionTrue, "")
		readyIs(g, bystander, metav1.ConditionTrue, "")
	}, eventually, poll).Should(Succeed())

	policy := isolatingPolicy(ns)
	g.Expect(k8sClient.Create(ctx, policy)).To(Succeed())
	created := time.Now()
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionFalse, mcpv1alpha1.ReasonEgressDenied)
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionEgressAllowed)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Message).To(ContainSubstring(ns + "/lockdown"))
		st, _ := condition(got, mcpv1alpha1.ConditionConnected)
		g.Expect(st).To(Equal(metav1.ConditionFalse), "the session must be dropped")
	}, 5*time.Second, 20*time.Millisecond).Should(Succeed())
	t.Logf("policy enforced on a live session after %v", time.Since(created).Round(time.Millisecond))
	g.Eventually(func() []string { return eventReasons(t, ns, "searcher") }, eventually, poll).Should(ContainElement("EgressDenied"))

	// The policy selects one server and reports it.
	g.Eventually(func(g Gomega) {
		got := &mcpv1alpha1.MCPEgressPolicy{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, mcpv1alpha1.ConditionAccepted)).To(BeTrue())
		g.Expect(got.Status.SelectedServers).To(BeEquivalentTo(1))
	}, eventually, poll).Should(Succeed())

	// A server the policy does not select is untouched.
	readyIs(g, bystander, metav1.ConditionTrue, "")

	// Deleting the policy lets the server connect again.
	g.Expect(k8sClient.Delete(ctx, policy)).To(Succeed())
	g.Eventually(func(g Gomega) { readyIs(g, obj, metav1.ConditionTrue, "") }, 5*time.Second, 20*time.Millisecond).Should(Succeed())
}

func TestPolicyAllowingLoopbackLetsServerConnect(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	// The production default: public addresses only, so loopback is denied...
	startOperator(t, ns, withEgressDefaults(egress.Defaults{Posture: egress.PosturePublic}))
	srv := newMCPServer(t, 1)
	obj := httpServer(ns, "local", srv.url())
	obj.Labels = map[string]string{"team": "search"}
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionFalse, mcpv1alpha1.ReasonEgressDenied)
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionEgressAllowed)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	}, eventually, poll).Should(Succeed())

	// ...until a policy allows it explicitly.
	policy := isolatingPolicy(ns)
	policy.Spec.Egress = []mcpv1alpha1.EgressRule{{
		To: []mcpv1alpha1.EgressPeer{{IPBlock: &mcpv1alpha1.IPBlock{CIDR: "127.0.0.0/8"}}},
	}}
	g.Expect(k8sClient.Create(ctx, policy)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionTrue, "")
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionEgressAllowed)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Message).To(ContainSubstring(ns + "/lockdown"))
	}, eventually, poll).Should(Succeed())
}

func TestInvalidPolicyIsReportedAndFailsClosed(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	policy := &mcpv1alpha1.MCPEgressPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken"},
		Spec: mcpv1alpha1.MCPEgressPolicySpec{
			// Admission does not check selector operators; the controller must.
			ServerSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "team", Operator: "Near", Values: []string{"search"},
			}}},
		},
	}
	g.Expect(k8sClient.Create(ctx, policy)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &mcpv1alpha1.MCPEgressPolicy{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionAccepted)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(mcpv1alpha1.ReasonInvalidPolicy))
		g.Expect(strings.ToLower(c.Message)).To(ContainSubstring("near"))
	}, eventually, poll).Should(Succeed())

	srv := newMCPServer(t, 1)
	obj := httpServer(ns, "guarded", srv.url())
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	g.Eventually(func(g Gomega) { readyIs(g, obj, metav1.ConditionFalse, mcpv1alpha1.ReasonEgressDenied) }, eventually, poll).Should(Succeed())
}
