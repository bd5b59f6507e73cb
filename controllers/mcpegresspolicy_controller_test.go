package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/egress"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
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
	awaitReady(t, obj, metav1.ConditionTrue, "")
	awaitReady(t, bystander, metav1.ConditionTrue, "")

	policy := isolatingPolicy(ns)
	g.Expect(k8sClient.Create(ctx, policy)).To(Succeed())
	created := time.Now()
	testutil.Eventually(t, 5*time.Second, "EgressDenied naming the policy, the session dropped", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, mcpv1alpha1.ReasonEgressDenied)
		if err != nil {
			return err
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionEgressAllowed, metav1.ConditionFalse, "", ns+"/lockdown"); err != nil {
			return err
		}
		return conditionIs(got, mcpv1alpha1.ConditionConnected, metav1.ConditionFalse, "")
	})
	t.Logf("policy enforced on a live session after %v", time.Since(created).Round(time.Millisecond))
	awaitEvent(t, ns, "searcher", "EgressDenied")

	// The policy selects one server and reports it.
	testutil.Eventually(t, eventually, "the policy Accepted, selecting one server", func() error {
		got := &mcpv1alpha1.MCPEgressPolicy{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(policy), got); err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation || !meta.IsStatusConditionTrue(got.Status.Conditions, mcpv1alpha1.ConditionAccepted) || got.Status.SelectedServers != 1 {
			return fmt.Errorf("generation %d, status %+v", got.Generation, got.Status)
		}
		return nil
	})

	// A server the policy does not select is untouched.
	if _, err := readyIs(bystander, metav1.ConditionTrue, ""); err != nil {
		t.Errorf("the server the policy does not select: %v", err)
	}

	// Deleting the policy lets the server connect again.
	g.Expect(k8sClient.Delete(ctx, policy)).To(Succeed())
	testutil.Eventually(t, 5*time.Second, "Ready again once the policy is deleted", func() error {
		_, err := readyIs(obj, metav1.ConditionTrue, "")
		return err
	})
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
	testutil.Eventually(t, eventually, "loopback denied by the default posture", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, mcpv1alpha1.ReasonEgressDenied)
		if err != nil {
			return err
		}
		return conditionIs(got, mcpv1alpha1.ConditionEgressAllowed, metav1.ConditionFalse, "")
	})

	// ...until a policy allows it explicitly.
	policy := isolatingPolicy(ns)
	policy.Spec.Egress = []mcpv1alpha1.EgressRule{{
		To: []mcpv1alpha1.EgressPeer{{IPBlock: &mcpv1alpha1.IPBlock{CIDR: "127.0.0.0/8"}}},
	}}
	g.Expect(k8sClient.Create(ctx, policy)).To(Succeed())
	testutil.Eventually(t, eventually, "Ready, egress allowed by the policy", func() error {
		got, err := readyIs(obj, metav1.ConditionTrue, "")
		if err != nil {
			return err
		}
		return conditionIs(got, mcpv1alpha1.ConditionEgressAllowed, metav1.ConditionTrue, "", ns+"/lockdown")
	})
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
	testutil.Eventually(t, eventually, "the policy not Accepted, naming the operator", func() error {
		got := &mcpv1alpha1.MCPEgressPolicy{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(policy), got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionAccepted)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != mcpv1alpha1.ReasonInvalidPolicy || !strings.Contains(strings.ToLower(c.Message), "near") {
			return fmt.Errorf("Accepted is %+v", c)
		}
		return nil
	})

	srv := newMCPServer(t, 1)
	obj := httpServer(ns, "guarded", srv.url())
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	awaitReady(t, obj, metav1.ConditionFalse, mcpv1alpha1.ReasonEgressDenied)
}
