package controllers_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// TestReconcilesAndConnectsCarryTheServersKey applies an MCPServer with tracing on and
// finds its reconciles and its session's connect as spans that name the same server, so
// that a slow Ready can be read from them.
func TestReconcilesAndConnectsCarryTheServersKey(t *testing.T) {
	exp := testutil.RecordSpans(t)

	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 1)
	obj := httpServer(ns, "traced", srv.url())
	if err := k8sClient.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	awaitReady(t, obj, metav1.ConditionTrue, "")

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
	testutil.Eventually(t, eventually, "spans of the reconcile, the connect and the discovery", func() error {
		seen := names()
		for _, want := range []string{"reconcile MCPServer", "connect", "discover"} {
			if !seen[want] {
				return fmt.Errorf("no span %q among %v", want, seen)
			}
		}
		return nil
	})
}
