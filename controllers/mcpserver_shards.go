package controllers

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/internal/sharding"
)

// standBy is the reconcile of a server another replica owns: this replica writes nothing
// for it (no status, Event, finalizer or workload) and holds only the config its gateway
// needs to open upstream sessions, which connect while they are used (Pool.Standby).
// What this replica wrote before is forgotten, so that taking the server back starts
// from what the cache shows the owner wrote.
func (r *MCPServerReconciler) standBy(ctx context.Context, obj *mcpv1alpha1.MCPServer, key connector.Key) error {
	r.written.Delete(key)
	if !obj.DeletionTimestamp.IsZero() || obj.Spec.Suspend {
		r.Pool.Remove(key)
		return nil
	}
	cfg, ok, err := r.gatewayConfig(ctx, obj)
	if err != nil || !ok {
		r.Pool.Remove(key)
		return err
	}
	r.Pool.Standby(key, cfg)
	return nil
}

// gatewayConfig is the connector config the owner of obj holds for it, and false when it
// holds none (a Secret is missing, the stdio bridge has no published endpoint yet). A
// stdio server is reached at the bridge endpoint its owner published in status: only the
// owner runs the workload.
func (r *MCPServerReconciler) gatewayConfig(ctx context.Context, obj *mcpv1alpha1.MCPServer) (connector.Config, bool, error) {
	rules, err := egressRules(ctx, r.Client, r.EgressDefaults, obj)
	if err != nil {
		return connector.Config{}, false, err
	}
	if obj.Spec.Stdio != nil {
		if obj.Status.Transport != mcpv1alpha1.TransportStdio || obj.Status.Endpoint == "" {
			return connector.Config{}, false, nil
		}
		cfg := r.connectionConfig(obj, obj.Status.Endpoint, connector.ProtocolStreamableHTTP)
		cfg.Egress = bridgeEgress.ForServer(obj.Namespace, obj.Labels)
		// The owner's config carries the serving version of the workload; so must this
		// one, or taking the server over would replace the session (see ServingInstance).
		if pods, ok := r.Stdio.(*PodRuntime); ok {
			if cfg.Instance, err = pods.ServingInstance(ctx, obj); err != nil {
				return connector.Config{}, false, err
			}
		}
		return cfg, true, nil
	}
	var obs observation
	cfg, err := r.reconcileSecrets(ctx, obj, &obs)
	if err != nil || obs.missingSecret != nil || obs.identityProvider != nil || obs.invalidSpec != "" {
		return connector.Config{}, false, err
	}
	cfg.Egress = rules
	return cfg, true, nil
}

// owns reports whether this replica writes key's status: always without sharding.
func (r *MCPServerReconciler) owns(key connector.Key) bool {
	return r.Shards == nil || r.Shards.Owns(key.String())
}

// ownedServersMetric is switchboard_shard_owned_servers: how many of the servers in the
// cache the shard ring gives this replica, counted when it is scraped.
func (r *MCPServerReconciler) ownedServersMetric() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "switchboard", Subsystem: "shard", Name: "owned_servers",
		Help: "MCPServers this replica owns: it alone holds their sessions and writes their status.",
	}, func() float64 {
		var servers mcpv1alpha1.MCPServerList
		// Names only are read: no copy of every server's status out of the cache.
		if err := r.Client.List(context.Background(), &servers, client.UnsafeDisableDeepCopy); err != nil {
			return 0 // the cache has not synced yet
		}
		owned := 0
		for i := range servers.Items {
			if r.owns(connector.Key{Namespace: servers.Items[i].Namespace, Name: servers.Items[i].Name}) {
				owned++
			}
		}
		return float64(owned)
	})
}

// forwardOwnershipChanges turns every change of the shard ring into reconciles of the
// servers whose owner it changed to or from this replica, until ctx ends: the servers
// it gained take their sessions over, the ones it lost stand by.
func (r *MCPServerReconciler) forwardOwnershipChanges(ctx context.Context, out chan<- event.TypedGenericEvent[connector.Key]) {
	self := r.Shards.Identity()
	log := ctrl.LoggerFrom(ctx).WithName("shards")
	for {
		var change sharding.Change
		select {
		case <-ctx.Done():
			return
		case change = <-r.Shards.Changes():
		}
		var servers mcpv1alpha1.MCPServerList
		// Names only are read: no copy of every server's status out of the cache.
		if err := r.Client.List(ctx, &servers, client.UnsafeDisableDeepCopy); err != nil {
			// Only before the cache has synced; its initial events reconcile every
			// server against the newest ring anyway.
			log.Error(err, "Listing servers after a change of shard members")
			continue
		}
		gained, lost := 0, 0
		for i := range servers.Items {
			name := types.NamespacedName{Namespace: servers.Items[i].Namespace, Name: servers.Items[i].Name}.String()
			was, is := change.Before.Owner(name) == self, change.After.Owner(name) == self
			if was == is {
				continue
			}
			if is {
				gained++
			} else {
				lost++
			}
			e := event.TypedGenericEvent[connector.Key]{Object: connector.Key{Namespace: servers.Items[i].Namespace, Name: servers.Items[i].Name}}
			select {
			case out <- e:
			case <-ctx.Done():
				return
			}
		}
		log.Info("Shard ownership changed", "members", change.After.Members(), "gained", gained, "lost", lost)
	}
}
