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

// TestDeferUntilTheCacheShowsOwnWrites checks that a reconcile reading a cached copy
// older than this manager's last write is deferred, and that a copy at that write or
// past it (someone else wrote since) goes ahead and drops the record.
func TestDeferUntilTheCacheShowsOwnWrites(t *testing.T) {
	key := connector.Key{Namespace: "ns", Name: "srv"}
	at := func(rv string) *mcpv1alpha1.MCPServer {
		return &mcpv1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "srv", ResourceVersion: rv}}
	}
	r := &MCPServerReconciler{}
	r.written.Store(key, "12")
	for _, rv := range []string{"10", "11", "9"} {
		if !r.cacheBehind(key, at(rv)) {
			t.Errorf("cache at %s, behind our write at 12: the reconcile went ahead", rv)
		}
	}
	for _, rv := range []string{"12", "13", "100"} {
		r.written.Store(key, "12")
		if r.cacheBehind(key, at(rv)) {
			t.Errorf("cache at %s: the reconcile was deferred", rv)
		}
		if _, held := r.written.Load(key); held {
			t.Errorf("cache at %s: the record outlives a cache that reached our write", rv)
		}
	}
	if r.cacheBehind(connector.Key{Namespace: "ns", Name: "other"}, at("1")) {
		t.Errorf("a server this manager never wrote was deferred")
	}
}

// TestForgetCaughtUpWrites checks that the record of this manager's last write stays
// while the cache is behind it, and goes once the cache has reached it, moved past it,
// or lost the server; and that a newer record stored meanwhile stays.
func TestForgetCaughtUpWrites(t *testing.T) {
	key := connector.Key{Namespace: "ns", Name: "srv"}
	cache := &cachedServer{}
	r := &MCPServerReconciler{Client: cache}
	at := func(rv string) {
		cache.obj = &mcpv1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "srv", ResourceVersion: rv}}
	}
	held := func() bool { _, ok := r.written.Load(key); return ok }

	for _, rv := range []string{"10", "11"} {
		at(rv)
		r.recordWrite(context.Background(), key, "12")
		if !held() {
			t.Fatalf("cache at %s, behind our write: the record was dropped", rv)
		}
	}
	for _, rv := range []string{"12", "13"} {
		at(rv)
		r.recordWrite(context.Background(), key, "12")
		if held() {
			t.Errorf("cache at %s: the record outlives a cache that reached our write", rv)
		}
	}
	cache.obj = nil
	r.recordWrite(context.Background(), key, "12")
	if held() {
		t.Errorf("server gone from the cache: the record is held")
	}

	// An informer event for an older version, handled late, drops nothing newer.
	r.written.Store(key, "13")
	r.forgetIfReached(key, "12")
	if !held() {
		t.Errorf("an event older than our write dropped its record")
	}
	r.forgetIfReached(key, "13")
	if held() {
		t.Errorf("the event of our write left its record")
	}
}

// cachedServer is a cache holding one MCPServer, or none.
type cachedServer struct {
	client.Client
	obj *mcpv1alpha1.MCPServer
}

func (c *cachedServer) Get(_ context.Context, key client.ObjectKey, out client.Object, _ ...client.GetOption) error {
	if c.obj == nil || key.Name != c.obj.Name || key.Namespace != c.obj.Namespace {
		return apierrors.NewNotFound(schema.GroupResource{Group: "mcp.switchboard.dev", Resource: "mcpservers"}, key.Name)
	}
	*out.(*mcpv1alpha1.MCPServer) = *c.obj
	return nil
}
