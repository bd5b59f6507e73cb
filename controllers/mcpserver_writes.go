package controllers

import (
	"context"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// ownWrites is what this manager's writes in one reconcile left on an object: the
// resourceVersions they replaced, and the status and finalizers of the last one.
type ownWrites struct {
	replaced        []string
	resourceVersion string
	status          *mcpv1alpha1.MCPServerStatus
	finalizers      []string
}

// add records a write whose result is obj.
func (w *ownWrites) add(obj *mcpv1alpha1.MCPServer) {
	if w.resourceVersion != "" {
		w.replaced = append(w.replaced, w.resourceVersion)
	}
	w.resourceVersion = obj.ResourceVersion
	w.status = obj.Status.DeepCopy()
	w.finalizers = slices.Clone(obj.Finalizers)
}

// reachedBy reports whether a cached copy at resourceVersion shows these writes, or
// what someone wrote after them: it is at the version they left (a write that changed
// nothing leaves the one it replaced), or at none of the versions they replaced.
// resourceVersions are opaque, so only equality is compared.
func (w *ownWrites) reachedBy(resourceVersion string) bool {
	return resourceVersion == w.resourceVersion || !slices.Contains(w.replaced, resourceVersion)
}

// lastWrites returns the record of this manager's last writes to key, or nil. Reconcile
// loads it before it reads the object: forgetCaughtUp drops it only once the cache has
// reached those writes, so either the reconcile holds the record or the object it reads
// afterwards shows them.
func (r *MCPServerReconciler) lastWrites(key connector.Key) *ownWrites {
	if v, ok := r.written.Load(key); ok {
		return v.(*ownWrites)
	}
	return nil
}

// catchUp brings a cached object that this manager's own last writes (last, loaded
// before obj was read) have already replaced up to what they wrote, and returns the
// record this reconcile's writes add to. The connector's events can bring a server back
// before the cache has seen the status patch that announced them; without this, that
// reconcile would patch the same status, and the finalizer, again.
func (r *MCPServerReconciler) catchUp(key connector.Key, last *ownWrites, obj *mcpv1alpha1.MCPServer) *ownWrites {
	if last == nil || last.reachedBy(obj.ResourceVersion) {
		if last != nil {
			r.written.CompareAndDelete(key, last) // the cache has caught up, or someone else wrote since
		}
		return &ownWrites{replaced: []string{obj.ResourceVersion}}
	}
	obj.ResourceVersion = last.resourceVersion
	obj.Status = *last.status.DeepCopy()
	obj.Finalizers = slices.Clone(last.finalizers)
	// The cache may still be at any of the versions replaced so far.
	return &ownWrites{replaced: append(slices.Clone(last.replaced), last.resourceVersion)}
}

// forgetCaughtUp drops the record of this manager's last writes to key once the cache
// has reached them, and both records once the cache no longer holds the server, so that
// a settled server costs no copy of its status. It reads the cache as it is now, not the
// object of the event that called it: a handler can run behind its informer's store,
// on a version older than one a reconcile has read since. It needs r.Client to read
// that same store, which an informer updates before it calls its handlers: a record
// stored after one check gets another on the next event. A record stored during the
// check is newer than what was compared, and stays.
func (r *MCPServerReconciler) forgetCaughtUp(ctx context.Context, key connector.Key) {
	// Loaded before the cache is read, as in Reconcile.
	written := r.lastWrites(key)
	announced, _ := r.announced.Load(key)
	if written == nil && announced == nil {
		return
	}
	var cached mcpv1alpha1.MCPServer
	// Only the resourceVersion is read: no copy of the cached object.
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, &cached, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
		if written != nil {
			r.written.CompareAndDelete(key, written)
		}
		if announced != nil {
			r.announced.CompareAndDelete(key, announced)
		}
	case err == nil && written != nil && written.reachedBy(cached.ResourceVersion):
		r.written.CompareAndDelete(key, written)
	}
}

// forgetWhenCaughtUp is the MCPServer event handler that calls forgetCaughtUp on every
// update and deletion; it enqueues nothing.
func (r *MCPServerReconciler) forgetWhenCaughtUp() handler.EventHandler {
	forget := func(ctx context.Context, obj client.Object) {
		r.forgetCaughtUp(ctx, connector.Key{Namespace: obj.GetNamespace(), Name: obj.GetName()})
	}
	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			forget(ctx, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			forget(ctx, e.Object)
		},
	}
}
