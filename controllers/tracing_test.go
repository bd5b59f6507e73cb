package controllers_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// TestReconcilesAndConnectsCarryTheServersKey applies an MCPServer with tracing on and
// finds its reconciles and its session's connect as spans that name the same server, so
// that a slow Ready can be read from them.
func TestReconcilesAndConnectsCarryTheServersKey(t *testing.T) {
	exp := testutil.RecordSpans(t)

	g := NewWithT(t)
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 1)
	obj := httpServer(ns, "traced", srv.url())
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())
	g.Eventually(func(g Gomega) { readyIs(g, obj, metav1.ConditionTrue, "") }, eventually, poll).Should(Succeed())

	names := func() map[string]bool {
		seen := map[string]bool{}
		for _, s := range exp.GetSpans() {
			key := map[string]string{}
			for _, kv := range s.Attributes {
				key[string(kv.Key)] = kv.Value.String()
			}
			if key["switchboard.namespace"] == ns && key["switchboard.server"] == "traced" {
				seen[s.Name] = true
			}
		}
		return seen
	}
	g.Eventually(names, eventually, poll).Should(And(HaveKey("reconcile MCPServer"), HaveKey("connect"), HaveKey("discover")))
}
