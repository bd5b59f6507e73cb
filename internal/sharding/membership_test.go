package sharding

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

const testNamespace = "switchboard-system"

func startMember(t *testing.T, leases coordinationv1client.LeaseInterface, identity string) (*Membership, context.CancelFunc) {
	t.Helper()
	m, err := New(Options{
		Leases:        leases,
		Group:         "switchboard",
		Identity:      identity,
		LeaseDuration: time.Second,
		RenewPeriod:   100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.Start(ctx); err != nil {
			t.Errorf("%s: %v", identity, err)
		}
	}()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return m, stop
}

// waitRing waits until m counts exactly members.
func waitRing(t *testing.T, m *Membership, members ...string) {
	t.Helper()
	want := NewRing(members...)
	deadline := time.Now().Add(10 * time.Second)
	for !m.Ring().Equal(want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s counts %v, want %v", m.Identity(), m.Ring().Members(), want.Members())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Replicas count each other in through their Leases; one that stops cleanly deletes
// its Lease and is counted out at once, one that dies is counted out once its Lease
// has not been renewed for the lease duration.
func TestMembersCountEachOtherThroughLeases(t *testing.T) {
	leases := fake.NewClientset().CoordinationV1().Leases(testNamespace)
	a, _ := startMember(t, leases, "replica-a")
	b, stopB := startMember(t, leases, "replica-b")
	waitRing(t, a, "replica-a", "replica-b")
	waitRing(t, b, "replica-a", "replica-b")

	stopB()
	if _, err := leases.Get(context.Background(), "switchboard-replica-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("replica-b's Lease after a clean stop: %v, want it deleted", err)
	}
	waitRing(t, a, "replica-a")

	// A replica killed without releasing: its Lease stays, unrenewed.
	if _, err := leases.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "switchboard-replica-dead", Labels: map[string]string{GroupLabel: "switchboard"}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("replica-dead"),
			LeaseDurationSeconds: ptr.To(int32(1)),
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRing(t, a, "replica-a", "replica-dead")
	waitRing(t, a, "replica-a")

	// Leases of another group are not members.
	if _, err := leases.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "other-replica-x", Labels: map[string]string{GroupLabel: "other"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("replica-x"), LeaseDurationSeconds: ptr.To(int32(60))},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	waitRing(t, a, "replica-a")
}

// Every change of the ring is delivered with what it was before, and a replica owns
// nothing until it has counted itself in.
func TestChangesTellTheRingBeforeAndAfter(t *testing.T) {
	leases := fake.NewClientset().CoordinationV1().Leases(testNamespace)
	m, err := New(Options{Leases: leases, Group: "switchboard", Identity: "replica-a",
		LeaseDuration: time.Second, RenewPeriod: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if m.Owns("ns/server") {
		t.Fatal("a replica that has not joined owns a server")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = m.Start(ctx) }()
	select {
	case c := <-m.Changes():
		if c.Before.Len() != 0 || !c.After.Equal(NewRing("replica-a")) {
			t.Errorf("first change %v -> %v, want [] -> [replica-a]", c.Before.Members(), c.After.Members())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no change delivered on joining")
	}
	if !m.Owns("ns/server") {
		t.Error("the only member does not own a server")
	}
}

func TestAnIdentityThatCannotNameALeaseIsRefused(t *testing.T) {
	leases := fake.NewClientset().CoordinationV1().Leases(testNamespace)
	if _, err := New(Options{Leases: leases, Group: "switchboard", Identity: "Replica_A"}); err == nil {
		t.Error("an identity with upper case and an underscore was accepted")
	}
}

// A replica that can no longer renew its Lease counts itself out one renew period before
// the others would count it out, so that no server has two owners while it is cut off.
func TestAReplicaCutOffFromTheAPIServerLetsGoOfItsServers(t *testing.T) {
	clients := fake.NewClientset()
	var cutOff atomic.Bool
	clients.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if cutOff.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	var offset atomic.Int64 // how far this replica's clock is moved ahead
	m, err := New(Options{
		Leases: clients.CoordinationV1().Leases(testNamespace), Group: "switchboard", Identity: "replica-a",
		LeaseDuration: 2 * time.Second, RenewPeriod: 100 * time.Millisecond,
		Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = m.Start(ctx) }()
	waitRing(t, m, "replica-a")

	cutOff.Store(true)
	time.Sleep(300 * time.Millisecond) // any renewal in flight has ended
	m.mu.Lock()
	renewed := m.renewed
	m.mu.Unlock()
	// Just before the margin the replica still counts itself, just after it does not.
	sinceRenewal := func() time.Duration { return time.Now().Add(time.Duration(offset.Load())).Sub(renewed) }
	offset.Add(int64(1800*time.Millisecond - sinceRenewal() - 50*time.Millisecond))
	time.Sleep(100 * time.Millisecond)
	if !m.Ring().Has("replica-a") {
		t.Fatalf("the replica let go %s after its last renewal, before the lease less a renew period", sinceRenewal())
	}
	offset.Add(int64(100 * time.Millisecond))
	time.Sleep(60 * time.Millisecond) // a few recounts
	if m.Ring().Has("replica-a") {
		t.Fatalf("the replica still counts itself %s after its last renewal, past the lease less a renew period", sinceRenewal())
	}
	if m.Owns("ns/server") {
		t.Error("a cut-off replica still owns a server")
	}

	cutOff.Store(false)
	waitRing(t, m, "replica-a")
}

// Two processes started with one identity renew one Lease. They find each other by
// the incarnation on it, and one of them yields: the identity's share of the servers
// has one owner, not two. Once the other stops, the one that yielded counts itself in.
func TestTwoReplicasWithOneIdentityDoNotBothOwn(t *testing.T) {
	leases := fake.NewClientset().CoordinationV1().Leases(testNamespace)
	a, stopA := startMember(t, leases, "replica-a")
	waitRing(t, a, "replica-a")
	twin, stopTwin := startMember(t, leases, "replica-a")

	yielding := func(m *Membership) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.yields
	}
	var winner, loser *Membership
	var stopWinner func()
	deadline := time.Now().Add(10 * time.Second)
	for winner == nil {
		switch {
		case yielding(a):
			winner, loser, stopWinner = twin, a, stopTwin
		case yielding(twin):
			winner, loser, stopWinner = a, twin, stopA
		}
		if time.Now().After(deadline) {
			t.Fatal("neither process of replica-a noticed the other")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if winner.incarnation < loser.incarnation {
		t.Errorf("the process with the lower incarnation kept the servers")
	}
	waitRing(t, winner, "replica-a")
	waitRing(t, loser)
	// The yield lasts: sample the rings for a few renewals.
	for range 20 {
		if loser.Ring().Len() != 0 || winner.Ring().Len() != 1 {
			t.Fatalf("after the yield the processes count %v and %v; want only the winner in", winner.Ring().Members(), loser.Ring().Members())
		}
		time.Sleep(25 * time.Millisecond)
	}
	if testutil.ToFloat64(loser.conflicts) < 1 {
		t.Error("the yielding process counted no identity conflict")
	}

	stopWinner()
	waitRing(t, loser, "replica-a")
}

// A Lease a previous process of this replica left behind (a crash, then a restart) is
// taken over without a conflict.
func TestARestartedReplicaTakesOverItsOldLease(t *testing.T) {
	leases := fake.NewClientset().CoordinationV1().Leases(testNamespace)
	if _, err := leases.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "switchboard-replica-a",
			Labels:      map[string]string{GroupLabel: "switchboard"},
			Annotations: map[string]string{IncarnationAnnotation: "the-process-before"},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("replica-a"),
			LeaseDurationSeconds: ptr.To(int32(1)),
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a, _ := startMember(t, leases, "replica-a")
	waitRing(t, a, "replica-a")
	if n := testutil.ToFloat64(a.conflicts); n != 0 {
		t.Errorf("%v identity conflicts for a Lease its previous process left; want none", n)
	}
}
