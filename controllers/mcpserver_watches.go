package controllers

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpservers,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpservers/status,verbs=patch
// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpservers/finalizers,verbs=update
// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpidentityproviders,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler, its Secret index and watches, the
// connector's change events as a channel source, and the handler that forgets this
// manager's records of its own writes once the cache has them.
func (r *MCPServerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &mcpv1alpha1.MCPServer{}, secretRefsIndex,
		func(obj client.Object) []string { return referencedSecrets(obj.(*mcpv1alpha1.MCPServer)) },
	); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &mcpv1alpha1.MCPServer{}, identityProviderIndex,
		func(obj client.Object) []string {
			if name := identityProviderOf(obj.(*mcpv1alpha1.MCPServer)); name != "" {
				return []string{name}
			}
			return nil
		},
	); err != nil {
		return err
	}

	changes := make(chan event.TypedGenericEvent[connector.Key])
	if err := mgr.Add(everyReplica(func(ctx context.Context) {
		forwardPoolEvents(ctx, r.Pool.Events(), changes)
	})); err != nil {
		return err
	}

	forServers := []predicate.Predicate{
		predicate.GenerationChangedPredicate{},
		predicate.LabelChangedPredicate{}, // labels select egress policies
		deletionStarted{},
	}
	options := controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.Shards != nil {
		if err := metrics.Registry.Register(r.ownedServersMetric()); err != nil {
			return fmt.Errorf("registering switchboard_shard_owned_servers: %w", err)
		}
		// Every replica reconciles the servers it owns, elected or not.
		options.NeedLeaderElection = ptr.To(false)
		// A standby server follows the bridge endpoint its owner publishes.
		forServers = append(forServers, endpointChanged{})
		owners := make(chan event.TypedGenericEvent[connector.Key])
		if err := mgr.Add(everyReplica(func(ctx context.Context) {
			r.forwardOwnershipChanges(ctx, owners)
		})); err != nil {
			return err
		}
		b = b.WatchesRawSource(source.Channel(owners, enqueueKey()))
	}
	if r.Stdio != nil {
		// The runtime watches what it runs.
		b = r.Stdio.Watch(b)
	}
	return b.
		For(&mcpv1alpha1.MCPServer{}, builder.WithPredicates(predicate.Or(forServers...))).
		// Secret metadata only: the cache never holds Secret data, and a changed
		// resourceVersion is all it takes to know a Secret rotated.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.serversForSecret), builder.OnlyMetadata).
		// A policy created, changed or deleted re-evaluates every server it could select.
		Watches(&mcpv1alpha1.MCPEgressPolicy{}, handler.EnqueueRequestsFromMapFunc(r.serversInNamespace),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// An identity provider created, changed or deleted re-evaluates the servers
		// that name it: where their callers' tokens may go is the provider's to say.
		Watches(&mcpv1alpha1.MCPIdentityProvider{}, handler.EnqueueRequestsFromMapFunc(r.serversForProvider),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(changes, enqueueKey())).
		// The cache catching up with this manager's own writes retires the records kept
		// against a cache that lags behind them. It runs wherever this controller
		// writes: on the leader, or on every replica with sharding.
		Watches(&mcpv1alpha1.MCPServer{}, r.forgetWhenCaughtUp()).
		WithOptions(options).
		Complete(r)
}

// everyReplica is a Runnable that runs on every replica, elected or not (a plain
// RunnableFunc runs on the leader only): the controllers it feeds may run anywhere.
type everyReplica func(context.Context)

func (f everyReplica) Start(ctx context.Context) error {
	f(ctx)
	return nil
}

func (everyReplica) NeedLeaderElection() bool { return false }

// enqueueKey maps a server's key to its reconcile request.
func enqueueKey() handler.TypedEventHandler[connector.Key, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, key connector.Key) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: key.Namespace, Name: key.Name}}}
	})
}

// CacheByObject limits the manager's cache of the kinds the stdio pod runtime owns or
// watches to the objects the operator created, so it never holds every Deployment,
// Service, NetworkPolicy, ReplicaSet or Pod of the cluster (the ReplicaSets and Pods of
// a server's Deployment carry its pod template's labels, ManagedByLabel among them).
// Pass it as cache.Options.ByObject.
func CacheByObject() map[client.Object]cache.ByObject {
	ours := labels.SelectorFromSet(labels.Set{ManagedByLabel: ManagedByValue})
	return map[client.Object]cache.ByObject{
		&appsv1.Deployment{}:          {Label: ours},
		&corev1.Service{}:             {Label: ours},
		&networkingv1.NetworkPolicy{}: {Label: ours},
		&appsv1.ReplicaSet{}:          {Label: ours},
		&corev1.Pod{}:                 {Label: ours},
	}
}

// forwardPoolEvents feeds the connector's change events into the controller's channel
// source until ctx ends.
func forwardPoolEvents(ctx context.Context, in <-chan connector.Event, out chan<- event.TypedGenericEvent[connector.Key]) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-in:
			if !ok {
				return
			}
			select {
			case out <- event.TypedGenericEvent[connector.Key]{Object: e.Key}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// serversForSecret returns the servers in the Secret's namespace that reference it and,
// for a Secret in the cluster resource namespace, the servers whose identity provider's
// tokenExchange.clientSecret it is.
func (r *MCPServerReconciler) serversForSecret(ctx context.Context, secret client.Object) []reconcile.Request {
	var servers mcpv1alpha1.MCPServerList
	if err := r.Client.List(ctx, &servers, client.InNamespace(secret.GetNamespace()),
		client.MatchingFields{secretRefsIndex: secret.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing servers that reference a Secret", "secret", secret.GetName())
		return nil
	}
	requests := requestsFor(servers.Items)
	if r.ClusterResourceNamespace == "" || secret.GetNamespace() != r.ClusterResourceNamespace {
		return requests
	}
	var providers mcpv1alpha1.MCPIdentityProviderList
	if err := r.Client.List(ctx, &providers); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing identity providers", "secret", secret.GetName())
		return requests
	}
	for i := range providers.Items {
		if tx := providers.Items[i].Spec.TokenExchange; tx != nil && tx.ClientSecret != nil && tx.ClientSecret.SecretKeyRef.Name == secret.GetName() {
			requests = append(requests, r.serversForProvider(ctx, &providers.Items[i])...)
		}
	}
	return requests
}

// serversForProvider returns the servers whose per-caller or perUser mode names the
// identity provider.
func (r *MCPServerReconciler) serversForProvider(ctx context.Context, provider client.Object) []reconcile.Request {
	var servers mcpv1alpha1.MCPServerList
	if err := r.Client.List(ctx, &servers, client.MatchingFields{identityProviderIndex: provider.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing servers that name an identity provider", "provider", provider.GetName())
		return nil
	}
	return requestsFor(servers.Items)
}

// serversInNamespace returns every server in the object's namespace.
func (r *MCPServerReconciler) serversInNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	var servers mcpv1alpha1.MCPServerList
	if err := r.Client.List(ctx, &servers, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing servers", "namespace", obj.GetNamespace())
		return nil
	}
	return requestsFor(servers.Items)
}

// requestsFor returns one reconcile request per server.
func requestsFor(servers []mcpv1alpha1.MCPServer) []reconcile.Request {
	requests := make([]reconcile.Request, len(servers))
	for i := range servers {
		requests[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&servers[i])}
	}
	return requests
}

// deletionStarted passes the update that sets an object's deletionTimestamp, so the
// finalizer runs at once whether or not the API server bumped the generation.
type deletionStarted struct {
	predicate.Funcs
}

// Update reports whether the update started the object's deletion.
func (deletionStarted) Update(e event.UpdateEvent) bool {
	return e.ObjectOld != nil && e.ObjectNew != nil &&
		e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
}
