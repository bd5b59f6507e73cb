package controllers_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/controllers"
)

// staleReader serves one object as the manager's cache would before it saw the latest
// write: an older copy.
type staleReader struct {
	client.Client
	key   types.NamespacedName
	stale *mcpv1alpha1.MCPToolset
}

func (c staleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if ts, ok := obj.(*mcpv1alpha1.MCPToolset); ok && key == c.key {
		c.stale.DeepCopyInto(ts)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// TestAToolsetReconciledFromAStaleCopyDoesNotKeepAnOldCount: a reconcile that reads a
// copy from before its previous status write (the cache lags) must not leave that
// write's count behind. A count back at zero is omitted from both copies, so a merge
// patch between them would not carry it and the old figure would stay until something
// else changed.
func TestAToolsetReconciledFromAStaleCopyDoesNotKeepAnOldCount(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	ts := &mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lagging"},
		Spec:       mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "absent"}}},
	}
	if err := k8sClient.Create(ctx, ts); err != nil {
		t.Fatal(err)
	}
	stale := ts.DeepCopy()
	// The earlier reconcile's write, which the stale copy does not show.
	written := ts.DeepCopy()
	written.Status.PromptCount = 3
	if err := k8sClient.Status().Update(ctx, written); err != nil {
		t.Fatal(err)
	}

	key := client.ObjectKeyFromObject(ts)
	lagging := &controllers.MCPToolsetReconciler{Client: staleReader{Client: k8sClient, key: key, stale: stale}}
	res, err := lagging.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	if err != nil {
		t.Fatalf("reconcile from the stale copy: %v", err)
	}
	var got mcpv1alpha1.MCPToolset
	if err := k8sClient.Get(ctx, key, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.PromptCount != 0 && res.RequeueAfter == 0 {
		t.Fatalf("the reconcile left promptCount %d from the write its copy did not show, and asked for no second run", got.Status.PromptCount)
	}

	// The run it asked for reads a copy that shows the write.
	fresh := &controllers.MCPToolsetReconciler{Client: k8sClient}
	if _, err := fresh.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if err := k8sClient.Get(ctx, key, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.PromptCount != 0 {
		t.Fatalf("promptCount %d; the toolset's absent server offers no prompt", got.Status.PromptCount)
	}
}
