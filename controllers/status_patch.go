package controllers

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// staleStatusRetry is how soon a reconcile whose status patch met a newer object runs
// again: the write that made its copy stale is already on the API server, so the cache
// shows it within moments.
const staleStatusRetry = 200 * time.Millisecond

// patchStatus writes obj's status as a merge patch from before that carries before's
// resourceVersion, and reports stale when the API server holds a newer object.
//
// Reconcilers read from the manager's cache, which may not show their previous write
// yet. A merge patch is only the difference between two copies, so one computed from a
// stale copy leaves in place whatever the two agree on: a count that went back to zero
// is omitted from both, and the count the earlier write set would stay. With the
// resourceVersion in the patch the API server refuses it instead, and the caller runs
// the reconcile again on a fresher copy. A deleted object is not an error.
func patchStatus(ctx context.Context, c client.Client, obj, before client.Object) (stale bool, err error) {
	err = c.Status().Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsConflict(err):
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, err
}
