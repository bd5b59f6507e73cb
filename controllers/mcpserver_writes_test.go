package controllers

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
		next := r.catchUp(key, r.lastWrites(key), stale)
		if stale.ResourceVersion != "12" || stale.Status.ToolCount != 3 || len(stale.Finalizers) != 1 {
			t.Errorf("cache at %s: got resourceVersion %s, status %+v, finalizers %v", rv, stale.ResourceVersion, stale.Status, stale.Finalizers)
		}
		if len(next.replaced) != 3 {
			t.Errorf("the next writes forget versions the cache may still be at: %v", next.replaced)
		}
	}

	moved := cached.DeepCopy()
	moved.ResourceVersion = "13"
	r.catchUp(key, r.lastWrites(key), moved)
	if moved.Status.ToolCount != 0 || len(moved.Finalizers) != 0 {
		t.Errorf("a copy newer than our writes was changed: %+v", moved)
	}
	if _, ok := r.written.Load(key); ok {
		t.Errorf("the record of our writes outlives a cache that moved past them")
	}
}

// TestForgetCaughtUpWrites checks that the record of this manager's writes stays while
// the cache is at a version they replaced, and goes once the cache has reached them,
// moved past them, or lost the server (which also drops a kept announcement); and that
// a record stored while the cache was being read stays.
func TestForgetCaughtUpWrites(t *testing.T) {
	key := connector.Key{Namespace: "ns", Name: "srv"}
	cache := &cachedServer{}
	r := &MCPServerReconciler{Client: cache}
	record := func() {
		r.written.Store(key, &ownWrites{replaced: []string{"10", "11"}, resourceVersion: "12", status: &mcpv1alpha1.MCPServerStatus{}})
	}
	at := func(rv string) {
		cache.obj = &mcpv1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "srv", ResourceVersion: rv}}
	}
	held := func() (bool, bool) {
		_, written := r.written.Load(key)
		_, announced := r.announced.Load(key)
		return written, announced
	}

	record()
	for _, rv := range []string{"10", "11"} {
		at(rv)
		r.forgetCaughtUp(context.Background(), key)
		if written, _ := held(); !written {
			t.Fatalf("cache at %s, behind our writes: the record was dropped", rv)
		}
	}
	for _, rv := range []string{"12", "13"} {
		record()
		at(rv)
		r.forgetCaughtUp(context.Background(), key)
		if written, _ := held(); written {
			t.Errorf("cache at %s: the record outlives a cache that reached our writes", rv)
		}
	}

	record()
	r.announced.Store(key, &mcpv1alpha1.MCPServerStatus{})
	cache.obj = nil
	r.forgetCaughtUp(context.Background(), key)
	if written, announced := held(); written || announced {
		t.Errorf("server gone from the cache: records held (written %v, announced %v)", written, announced)
	}

	// A reconcile stores newer writes while the cache is read: those are not the ones
	// the cache was compared with.
	record()
	at("12")
	var newer *ownWrites
	cache.onGet = func() {
		newer = &ownWrites{replaced: []string{"10", "11", "12"}, resourceVersion: "13", status: &mcpv1alpha1.MCPServerStatus{}}
		r.written.Store(key, newer)
	}
	r.forgetCaughtUp(context.Background(), key)
	if v, ok := r.written.Load(key); !ok || v.(*ownWrites) != newer {
		t.Errorf("a record stored while the cache was read was dropped")
	}
}

// cachedServer is a cache holding one MCPServer, or none.
type cachedServer struct {
	client.Client
	obj   *mcpv1alpha1.MCPServer
	onGet func()
}

func (c *cachedServer) Get(_ context.Context, key client.ObjectKey, out client.Object, _ ...client.GetOption) error {
	if c.onGet != nil {
		c.onGet()
	}
	if c.obj == nil || key.Name != c.obj.Name || key.Namespace != c.obj.Namespace {
		return apierrors.NewNotFound(schema.GroupResource{Group: "mcp.switchboard.dev", Resource: "mcpservers"}, key.Name)
	}
	*out.(*mcpv1alpha1.MCPServer) = *c.obj
	return nil
}
