package sharding

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
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
