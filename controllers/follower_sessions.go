package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// FollowerSessionReconciler gives the connector pool of a replica that is not the leader
// the config of every MCPServer the leader's MCPServerReconciler holds, as a standby
// server (connector.Pool.Standby), so that every replica's gateway can open upstream
// sessions (the catalogue Service spreads agents over all replicas) without each replica
// probing every server. It writes nothing: status, Events, finalizers and stdio
// workloads stay the leader's. Once its replica is elected, it stands aside and the
// MCPServerReconciler, which then starts, takes the servers over. With sharding
// (MCPServerReconciler.Shards) it is not used: the MCPServerReconciler stands by for
// the servers other replicas own itself.
type FollowerSessionReconciler struct {
	// Servers is the MCPServerReconciler of this replica, whose config building, Secret
	// reading, pool and egress defaults it shares.
	Servers *MCPServerReconciler
	// Elected is closed once this replica leads (mgr.Elected()).
	Elected <-chan struct{}
}

// Reconcile holds the server's config while this replica follows.
func (r *FollowerSessionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	select {
	case <-r.Elected:
		return ctrl.Result{}, nil
	default:
	}
	key := connector.Key{Namespace: req.Namespace, Name: req.Name}
	obj := &mcpv1alpha1.MCPServer{}
	if err := r.Servers.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.Servers.Pool.Remove(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.Servers.standBy(ctx, obj, key)
}

// SetupWithManager registers the reconciler on every replica, with the MCPServerReconciler's
// Secret and policy watches; it must come after the MCPServerReconciler's setup, which
// registers the Secret index.
func (r *FollowerSessionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("follower-sessions").
		For(&mcpv1alpha1.MCPServer{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.LabelChangedPredicate{},
			endpointChanged{},
		))).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.Servers.serversForSecret), builder.OnlyMetadata).
		Watches(&mcpv1alpha1.MCPEgressPolicy{}, handler.EnqueueRequestsFromMapFunc(r.Servers.serversInNamespace),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&mcpv1alpha1.MCPIdentityProvider{}, handler.EnqueueRequestsFromMapFunc(r.Servers.serversForProvider),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.Servers.MaxConcurrentReconciles,
			NeedLeaderElection:      ptr.To(false),
		}).
		Complete(r)
}

// endpointChanged passes updates that move a stdio server's published bridge endpoint.
type endpointChanged struct {
	predicate.Funcs
}

func (endpointChanged) Update(e event.UpdateEvent) bool {
	before, ok1 := e.ObjectOld.(*mcpv1alpha1.MCPServer)
	after, ok2 := e.ObjectNew.(*mcpv1alpha1.MCPServer)
	return ok1 && ok2 && (before.Status.Endpoint != after.Status.Endpoint || before.Status.Transport != after.Status.Transport)
}
