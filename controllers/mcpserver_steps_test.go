package controllers_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/controllers"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// TestAFailingEarlyStepLandsInStatus: a step that fails before anything about the
// server is observed (here the list of its egress policies) is recorded in status, Ready
// Unknown with the reason ReconcileFailed and the error as its message, and kstatus reads
// the server as in progress rather than done; once the step succeeds, the server goes
// Ready.
func TestAFailingEarlyStepLandsInStatus(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	failing := &atomic.Bool{}
	failing.Store(true)
	startOperator(t, ns, func(r *controllers.MCPServerReconciler, _ ctrl.Manager) {
		r.Client = &failingPolicyList{Client: r.Client, failing: failing}
	})
	srv := newMCPServer(t, 2)
	obj := httpServer(ns, "early-failure", srv.url())
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())

	got := awaitReady(t, obj, metav1.ConditionUnknown, "ReconcileFailed")
	ready := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady)
	g.Expect(ready.Message).To(ContainSubstring("listing egress policies"))
	g.Expect(ready.Message).To(ContainSubstring("injected by the test"))
	g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, mcpv1alpha1.ConditionReconciling)).To(BeTrue(), "a failure that heals by itself is Reconciling")
	g.Expect(testutil.KStatus(t, got)).To(Equal(status.InProgressStatus))

	failing.Store(false)
	awaitReady(t, obj, metav1.ConditionTrue, "")
}

// failingPolicyList fails every list of MCPEgressPolicies while failing is set.
type failingPolicyList struct {
	client.Client
	failing *atomic.Bool
}

func (c *failingPolicyList) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*mcpv1alpha1.MCPEgressPolicyList); ok && c.failing.Load() {
		return errors.New("the API server is unavailable (injected by the test)")
	}
	return c.Client.List(ctx, list, opts...)
}
