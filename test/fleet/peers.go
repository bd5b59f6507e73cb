package main

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-mcp/switchboard/internal/sharding"
)

// With -peers, the manager runs sharded (--sharding=leases) beside peers that exist only
// as member Leases this program renews: it owns its ring share of the servers and stands
// by for the rest, which shows what a standby server costs a replica.
const (
	shardNamespace = "switchboard-system"
	shardGroup     = "switchboard-shard" // the manager's shard group (cmd/switchboard)
	managerShardID = "fleet-manager"
)

// peerRing returns the ring of the manager and its simulated peers.
func peerRing(peers int) sharding.Ring {
	members := []string{managerShardID}
	for i := range peers {
		members = append(members, fmt.Sprintf("fleet-peer-%d", i))
	}
	return sharding.NewRing(members...)
}

// ownedByManager returns how many of the fleet's servers the manager owns.
func ownedByManager(o options) int {
	if o.peers == 0 {
		return o.servers
	}
	ring := peerRing(o.peers)
	owned := 0
	for i := range o.servers {
		if ring.Owner(o.namespace+"/"+serverName(i)) == managerShardID {
			owned++
		}
	}
	return owned
}

// shardArgs are the manager flags that make it a member of the peers' group.
func shardArgs(o options) []string {
	if o.peers == 0 {
		return nil
	}
	return []string{"--sharding", "leases", "--shard-identity", managerShardID, "--shard-namespace", shardNamespace}
}

// startPeers creates the peers' member Leases and renews them every second until ctx
// ends or stop is called (before the control plane stops).
func startPeers(ctx context.Context, c client.Client, o options) (stop func(), err error) {
	if o.peers == 0 {
		return func() {}, nil
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shardNamespace}}); err != nil {
		return nil, err
	}
	ctx, stop = context.WithCancel(ctx)
	leases := make([]*coordinationv1.Lease, o.peers)
	for i := range leases {
		id := fmt.Sprintf("fleet-peer-%d", i)
		leases[i] = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: shardNamespace, Name: shardGroup + "-" + id,
				Labels: map[string]string{sharding.GroupLabel: shardGroup}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(id), LeaseDurationSeconds: ptr.To(int32(15)),
				RenewTime: &metav1.MicroTime{Time: time.Now()}},
		}
		if err := c.Create(ctx, leases[i]); err != nil {
			stop()
			return nil, err
		}
	}
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, l := range leases {
				l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
				if err := c.Update(ctx, l); err != nil && ctx.Err() == nil {
					logf("Renewing the peer Lease %s: %v", l.Name, err)
				}
			}
		}
	}()
	logf("Simulating %d shard peers: the manager owns %d of the %d servers", o.peers, ownedByManager(o), o.servers)
	return stop, nil
}
