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
// a session for every MCPServer, built from the same config the leader's
// MCPServerReconciler builds, so that every replica's gateway can open upstream sessions
// (the catalogue Service spreads agents over all replicas). It writes nothing: status,
// Events, finalizers and stdio workloads stay the leader's. Once its replica is elected,
// it stands aside and the MCPServerReconciler, which then starts, takes the sessions over
// unchanged (the same config keeps the same session).
//
// A stdio server is reached at the bridge endpoint the leader published in status: the
// follower runs no workload of its own.
type FollowerSessionReconciler struct {
	// Servers is the MCPServerReconciler of this replica, whose config building, Secret
	// reading, pool and egress defaults it shares.
	Servers *MCPServerReconciler
	// Elected is closed once this replica leads (mgr.Elected()).
	Elected <-chan struct{}
}

// Reconcile holds a session for the server while this replica follows.
func (r *FollowerSessionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	select {
	case <-r.Elected:
		return ctrl.Result{}, nil
	default:
	}
	key := connector.Key{Namespace: req.Namespace, Name: req.Name}
	pool := r.Servers.Pool
	obj := &mcpv1alpha1.MCPServer{}
	if err := r.Servers.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			pool.Remove(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !obj.DeletionTimestamp.IsZero() || obj.Spec.Suspend {
		pool.Remove(key)
		return ctrl.Result{}, nil
	}
	cfg, ok, err := r.config(ctx, obj)
	if err != nil || !ok {
		pool.Remove(key)
		return ctrl.Result{}, err
	}
	pool.Ensure(key, cfg)
	return ctrl.Result{}, nil
}

// config is the connector config the leader holds for obj, and false when it holds none
// (a Secret is missing, the stdio bridge has no published endpoint yet).
func (r *FollowerSessionReconciler) config(ctx context.Context, obj *mcpv1alpha1.MCPServer) (connector.Config, bool, error) {
	rules, err := egressRules(ctx, r.Servers.Client, r.Servers.EgressDefaults, obj)
	if err != nil {
		return connector.Config{}, false, err
	}
	if obj.Spec.Stdio != nil {
		if obj.Status.Transport != mcpv1alpha1.TransportStdio || obj.Status.Endpoint == "" {
			return connector.Config{}, false, nil
		}
		cfg := r.Servers.connectionConfig(obj, obj.Status.Endpoint, connector.ProtocolStreamableHTTP)
		cfg.Egress = bridgeEgress.ForServer(obj.Namespace, obj.Labels)
		return cfg, true, nil
	}
	var obs observation
	cfg, err := r.Servers.reconcileSecrets(ctx, obj, &obs)
	if err != nil || obs.missingSecret != nil || obs.invalidSpec != "" {
		return connector.Config{}, false, err
	}
	cfg.Egress = rules
	return cfg, true, nil
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
