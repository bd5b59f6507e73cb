package controllers

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// cacheCatchUpRetry is how soon a reconcile deferred for a cache that has not yet shown
// this manager's last write to the server runs again.
const cacheCatchUpRetry = 100 * time.Millisecond

// The connector's events can bring a server back before the manager's cache has seen
// the status patch that announced them. A reconcile on that older copy would patch the
// same status, and announce the same transitions, again. As Cluster API does
// (util/controller/consistency.go), the reconciler remembers, per server, only the
// resourceVersion of its last write until the cache shows it, and defers a reconcile
// that reads an older copy. A settled server costs no record.

// cacheBehind reports whether obj, read from the cache, is older than this manager's last
// write to it; the reconcile is then deferred. It drops the record once the cache has
// caught up, or when the versions cannot be compared (an API server whose
// resourceVersions are not integers: the reconcile then goes ahead as it would without
// the record).
func (r *MCPServerReconciler) cacheBehind(key connector.Key, obj *mcpv1alpha1.MCPServer) bool {
	v, ok := r.written.Load(key)
	if !ok {
		return false
	}
	if cmp, err := resourceversion.CompareResourceVersion(obj.ResourceVersion, v.(string)); err == nil && cmp < 0 {
		return true
	}
	r.written.CompareAndDelete(key, v)
	return false
}

// recordWrite remembers that this manager's write left key at resourceVersion, unless the
// cache already shows it: the informer event that would drop the record may have come
// before it was stored.
func (r *MCPServerReconciler) recordWrite(ctx context.Context, key connector.Key, resourceVersion string) {
	r.written.Store(key, resourceVersion)
	var cached mcpv1alpha1.MCPServer
	// Only the resourceVersion is read: no copy of the cached object.
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, &cached, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
		r.written.CompareAndDelete(key, resourceVersion)
	case err == nil:
		r.forgetIfReached(key, cached.ResourceVersion)
	}
}

// forgetIfReached drops the record of this manager's last write to key when a copy at
// resourceVersion shows it. A newer record stored meanwhile stays.
func (r *MCPServerReconciler) forgetIfReached(key connector.Key, resourceVersion string) {
	v, ok := r.written.Load(key)
	if !ok {
		return
	}
	if cmp, err := resourceversion.CompareResourceVersion(resourceVersion, v.(string)); err != nil || cmp >= 0 {
		r.written.CompareAndDelete(key, v)
	}
}

// forgetWhenCaughtUp is the MCPServer event handler that drops the record of this
// manager's last write once the cache shows it, or no longer holds the server; it
// enqueues nothing. An informer updates its store before it calls its handlers, and
// resourceVersions are compared, so an event that runs late cannot drop a newer record.
func (r *MCPServerReconciler) forgetWhenCaughtUp() handler.EventHandler {
	keyOf := func(obj client.Object) connector.Key {
		return connector.Key{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	}
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.forgetIfReached(keyOf(e.ObjectNew), e.ObjectNew.GetResourceVersion())
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.written.Delete(keyOf(e.Object))
		},
	}
}
