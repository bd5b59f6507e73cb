package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// TestCatchUpWithOwnWrites checks that a reconcile reading a cached copy older than this
// manager's own status and finalizer patches sees what they wrote, so it does not patch
// the same again, and that a copy someone else changed since is taken as it is.
func TestCatchUpWithOwnWrites(t *testing.T) {
	r := &MCPServerReconciler{}
	key := connector.Key{Namespace: "ns", Name: "srv"}
	cached := &mcpv1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "srv", ResourceVersion: "10"}}

	writes := &ownWrites{replaced: []string{"10"}}
	afterStatus := cached.DeepCopy()
	afterStatus.ResourceVersion = "11"
	afterStatus.Status.ToolCount = 3
	writes.add(afterStatus)
	afterFinalizer := afterStatus.DeepCopy()
	afterFinalizer.ResourceVersion = "12"
	afterFinalizer.Finalizers = []string{mcpServerFinalizer}
	writes.add(afterFinalizer)
	r.written.Store(key, writes)

	for _, rv := range []string{"10", "11"} {
		stale := cached.DeepCopy()
		stale.ResourceVersion = rv
		next := r.catchUp(key, stale)
		if stale.ResourceVersion != "12" || stale.Status.ToolCount != 3 || len(stale.Finalizers) != 1 {
			t.Errorf("cache at %s: got resourceVersion %s, status %+v, finalizers %v", rv, stale.ResourceVersion, stale.Status, stale.Finalizers)
		}
		if len(next.replaced) != 3 {
			t.Errorf("the next writes forget versions the cache may still be at: %v", next.replaced)
		}
	}

	moved := cached.DeepCopy()
	moved.ResourceVersion = "13"
	r.catchUp(key, moved)
	if moved.Status.ToolCount != 0 || len(moved.Finalizers) != 0 {
		t.Errorf("a copy newer than our writes was changed: %+v", moved)
	}
	if _, ok := r.written.Load(key); ok {
		t.Errorf("the record of our writes outlives a cache that moved past them")
	}
}
