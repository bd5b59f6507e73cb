package sharding

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// GroupLabel marks the member Leases of one group of replicas; its value is the group.
const GroupLabel = "mcp.switchboard.dev/shard-group"

// IncarnationAnnotation names, on a member's Lease, the process that last renewed it:
// two replicas started with one identity renew one Lease, and find each other by it.
const IncarnationAnnotation = "mcp.switchboard.dev/shard-incarnation"

// Options configure a Membership. Zero durations take the defaults documented on each.
type Options struct {
	// Leases reads and writes Leases in the namespace the members share (the manager's).
	Leases coordinationv1client.LeaseInterface
	// Group names the replicas that share the servers; their Leases carry it as
	// [GroupLabel] and are named "<Group>-<Identity>".
	Group string
	// Identity names this replica among them (its pod name); unique in the group.
	Identity string
	// LeaseDuration is how long a member that stopped renewing is still counted, and so
	// how long a killed replica's servers wait for a new owner. Zero means 15s.
	LeaseDuration time.Duration
	// RenewPeriod is how often a member renews its Lease. Zero means 2s, or a fifth of
	// a LeaseDuration under 10s.
	RenewPeriod time.Duration
	// JoinDelay is how long a new member waits, once its Lease exists, before it counts
	// itself in: long enough for the others to have seen the Lease and let go of the
	// servers it takes, so that no server has two owners. Zero means RenewPeriod.
	JoinDelay time.Duration
	// Logger receives membership changes.
	Logger logr.Logger
	// Now is the clock; nil means time.Now. Tests move it.
	Now func() time.Time
	// Registerer receives switchboard_shard_members; nil registers nothing.
	Registerer prometheus.Registerer
}

// Change is a new ring: the replicas counted before and after.
type Change struct {
	Before, After Ring
}

// Membership keeps this replica's Lease renewed and tells which replicas are live, and
// so which servers this one owns. It is a manager Runnable that runs on every replica,
// elected or not.
//
// A member is live while its Lease keeps being renewed: another replica's Lease counts
// until LeaseDuration after this replica last saw it change, measured on this replica's
// clock, so clock skew between nodes does not matter (client-go's leader election does
// the same). This replica counts itself only after JoinDelay and only while its own last
// renewal is recent enough that the others still count it: a replica cut off from the API
// server lets go of its servers before the others take them.
type Membership struct {
	opts      Options
	leaseName string
	log       logr.Logger
	now       func() time.Time

	changes chan Change
	wake    chan struct{}
	// undelivered is the change not yet handed to the reader, merged with any that came
	// after it; delivered pokes the goroutine that hands it over. A slow reader so never
	// holds up the renewals.
	undelivered *Change
	deliver     chan struct{}

	mu sync.Mutex
	// seen is when each other member's Lease was last seen to change, by Lease name.
	seen map[string]observedLease
	// renewed is when this replica last renewed its Lease; joined is when it may first
	// count itself.
	renewed, joined time.Time
	ring            Ring

	// incarnation tells this process from another started with the same identity.
	// While such a rival keeps renewing the Lease (until rivalUntil), the one with the
	// lower incarnation counts itself out (yields), so that no server has two owners.
	incarnation string
	rivalUntil  time.Time
	yields      bool

	members   prometheus.Gauge
	conflicts prometheus.Counter
}

type observedLease struct {
	holder          string
	resourceVersion string
	renewTime       time.Time
	duration        time.Duration
	at              time.Time
}

// New returns a Membership; it does nothing until started.
func New(opts Options) (*Membership, error) {
	if opts.Leases == nil || opts.Group == "" || opts.Identity == "" {
		return nil, errors.New("sharding: Leases, Group and Identity are required")
	}
	if errs := validation.IsDNS1123Subdomain(opts.Group + "-" + opts.Identity); len(errs) > 0 {
		return nil, fmt.Errorf("sharding: the member Lease name %q: %s", opts.Group+"-"+opts.Identity, strings.Join(errs, "; "))
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = 15 * time.Second
	}
	if opts.LeaseDuration < time.Second || opts.LeaseDuration > time.Hour {
		return nil, fmt.Errorf("sharding: the lease duration %s is not between 1s and 1h", opts.LeaseDuration)
	}
	if opts.RenewPeriod <= 0 {
		opts.RenewPeriod = min(2*time.Second, opts.LeaseDuration/5)
	}
	if opts.RenewPeriod >= opts.LeaseDuration/2 {
		return nil, fmt.Errorf("sharding: the renew period %s must be under half the lease duration %s", opts.RenewPeriod, opts.LeaseDuration)
	}
	if opts.JoinDelay <= 0 {
		opts.JoinDelay = opts.RenewPeriod
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	members := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "switchboard", Subsystem: "shard", Name: "members",
		Help: "Replicas this one counts as live shard members, itself included once it has joined.",
	})
	conflicts := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "switchboard", Subsystem: "shard", Name: "identity_conflicts_total",
		Help: "Times another process was found renewing this replica's member Lease: two replicas run with one --shard-identity.",
	})
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{members, conflicts} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("sharding: registering metrics: %w", err)
			}
		}
	}
	return &Membership{
		members:     members,
		conflicts:   conflicts,
		incarnation: rand.Text(),
		opts:        opts,
		leaseName:   opts.Group + "-" + opts.Identity,
		log:         opts.Logger.WithValues("identity", opts.Identity),
		now:         opts.Now,
		changes:     make(chan Change),
		wake:        make(chan struct{}, 1),
		deliver:     make(chan struct{}, 1),
		seen:        make(map[string]observedLease),
	}, nil
}

// Identity returns this replica's name in the ring.
func (m *Membership) Identity() string { return m.opts.Identity }

// NeedLeaderElection is false: every replica is a member.
func (m *Membership) NeedLeaderElection() bool { return false }

// Ring returns the live members as this replica last counted them.
func (m *Membership) Ring() Ring {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ring
}

// Owns reports whether this replica owns key (namespace/name of a server). Before this
// replica has counted itself in, and after it lost touch with the API server, it owns
// nothing.
func (m *Membership) Owns(key string) bool {
	return m.Ring().Owner(key) == m.opts.Identity
}

// Changes delivers the rings, in order. While its reader is busy, changes are merged:
// the next one it reads goes from the last ring it read to the newest.
func (m *Membership) Changes() <-chan Change { return m.changes }

// Start renews this replica's Lease and watches the group's until ctx ends; then it
// deletes its Lease, so the others take its servers over at once instead of after the
// lease duration.
func (m *Membership) Start(ctx context.Context) error {
	if err := m.renew(ctx); err != nil {
		return fmt.Errorf("creating the shard member Lease %s: %w", m.leaseName, err)
	}
	m.mu.Lock()
	m.joined = m.now().Add(m.opts.JoinDelay)
	m.mu.Unlock()

	informer := cache.NewSharedIndexInformer(listThenWatch{&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = GroupLabel + "=" + m.opts.Group
			return m.opts.Leases.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = GroupLabel + "=" + m.opts.Group
			return m.opts.Leases.Watch(ctx, o)
		},
	}}, &coordinationv1.Lease{}, 0, cache.Indexers{})
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.observe(obj) },
		UpdateFunc: func(_, obj any) { m.observe(obj) },
		DeleteFunc: m.forget,
	}); err != nil {
		return err
	}
	go informer.RunWithContext(ctx)
	go m.deliverChanges(ctx)

	renew := time.NewTicker(m.opts.RenewPeriod)
	defer renew.Stop()
	// Expiries and the join are noticed by recounting at least this often.
	recount := time.NewTicker(m.opts.RenewPeriod / 4)
	defer recount.Stop()
	for {
		select {
		case <-ctx.Done():
			m.release()
			return nil
		case <-renew.C:
			if err := m.renew(ctx); err != nil && ctx.Err() == nil {
				m.log.Error(err, "Renewing the shard member Lease failed", "lease", m.leaseName)
			}
		case <-recount.C:
		case <-m.wake:
		}
		m.recount()
	}
}

// deliverChanges hands the undelivered change to the reader of Changes until ctx ends.
func (m *Membership) deliverChanges(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.deliver:
		}
		m.mu.Lock()
		change := m.undelivered
		m.undelivered = nil
		m.mu.Unlock()
		if change == nil {
			continue
		}
		select {
		case m.changes <- *change:
		case <-ctx.Done():
			return
		}
	}
}

// renew writes this replica's Lease with a fresh renew time, creating it if need be.
func (m *Membership) renew(ctx context.Context) error {
	now := m.now()
	ctx, cancel := context.WithTimeout(ctx, m.opts.RenewPeriod)
	defer cancel()
	lease, err := m.opts.Leases.Get(ctx, m.leaseName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name:   m.leaseName,
			Labels: map[string]string{GroupLabel: m.opts.Group},
		}}
		m.fill(lease, now)
		lease.Spec.AcquireTime = &metav1.MicroTime{Time: now}
		_, err = m.opts.Leases.Create(ctx, lease, metav1.CreateOptions{})
	case err == nil:
		m.noteRival(lease, now)
		m.fill(lease, now)
		_, err = m.opts.Leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.renewed = now
	m.mu.Unlock()
	return nil
}

func (m *Membership) fill(lease *coordinationv1.Lease, now time.Time) {
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[IncarnationAnnotation] = m.incarnation
	lease.Spec.HolderIdentity = ptr.To(m.opts.Identity)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(m.opts.LeaseDuration / time.Second)) //nolint:gosec // at most an hour (New)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
}

// noteRival looks at this replica's Lease as read before a renewal. Once this process
// has renewed it, another incarnation on it means another process renewed it since:
// two replicas run with one identity. Both would own the same share of the servers, so
// the one with the lower incarnation yields until the other has stopped renewing for a
// lease duration. A Lease a previous process of this replica left behind is no rival:
// this process has not renewed it yet.
func (m *Membership) noteRival(lease *coordinationv1.Lease, now time.Time) {
	other := lease.Annotations[IncarnationAnnotation]
	m.mu.Lock()
	if other == "" || other == m.incarnation || m.renewed.IsZero() {
		m.mu.Unlock()
		return
	}
	first := !now.Before(m.rivalUntil)
	m.rivalUntil = now.Add(m.opts.LeaseDuration)
	m.yields = other > m.incarnation
	yields := m.yields
	m.mu.Unlock()
	if first {
		m.conflicts.Inc()
		m.log.Error(nil, "Another process renews this replica's shard member Lease: two replicas run with one --shard-identity; give each its own (the pod name is)",
			"lease", m.leaseName, "thisReplicaYields", yields)
	}
}

// release deletes this replica's Lease on the way out; the others count it out as soon
// as they see the deletion.
func (m *Membership) release() {
	m.mu.Lock()
	m.renewed = time.Time{}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.opts.Leases.Delete(ctx, m.leaseName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		m.log.Error(err, "Releasing the shard member Lease failed; the others take over once it expires", "lease", m.leaseName)
		return
	}
	m.log.Info("Released the shard member Lease", "lease", m.leaseName)
}

// observe records another member's Lease, as of now when it changed.
func (m *Membership) observe(obj any) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok || lease.Name == m.leaseName || lease.Labels[GroupLabel] != m.opts.Group ||
		lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return
	}
	duration := m.opts.LeaseDuration
	if s := lease.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		duration = time.Duration(*s) * time.Second
	}
	m.mu.Lock()
	var renewTime time.Time
	if lease.Spec.RenewTime != nil {
		renewTime = lease.Spec.RenewTime.Time
	}
	prev, known := m.seen[lease.Name]
	if !known || prev.resourceVersion != lease.ResourceVersion || !prev.renewTime.Equal(renewTime) {
		m.seen[lease.Name] = observedLease{
			holder:          *lease.Spec.HolderIdentity,
			resourceVersion: lease.ResourceVersion,
			renewTime:       renewTime,
			duration:        duration,
			at:              m.now(),
		}
	}
	m.mu.Unlock()
	m.poke()
}

func (m *Membership) forget(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	m.mu.Lock()
	delete(m.seen, lease.Name)
	m.mu.Unlock()
	m.poke()
}

func (m *Membership) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// recount works out the live members and, when they changed, hands the new ring to
// deliverChanges.
func (m *Membership) recount() {
	now := m.now()
	m.mu.Lock()
	var live []string
	for _, l := range m.seen {
		if now.Before(l.at.Add(l.duration)) {
			live = append(live, l.holder)
		}
	}
	// This replica counts itself only while the others surely still count it: its
	// last renewal is less than the lease duration, minus a renew period of margin, old;
	// and not while it yields to a rival with its identity.
	yielding := m.yields && now.Before(m.rivalUntil)
	if !yielding && !now.Before(m.joined) && !m.renewed.IsZero() && now.Sub(m.renewed) < m.opts.LeaseDuration-m.opts.RenewPeriod {
		live = append(live, m.opts.Identity)
	}
	next := NewRing(live...)
	before := m.ring
	if next.Equal(before) {
		m.mu.Unlock()
		return
	}
	m.ring = next
	m.members.Set(float64(next.Len()))
	if m.undelivered == nil {
		m.undelivered = &Change{Before: before}
	}
	m.undelivered.After = next
	m.mu.Unlock()
	m.log.Info("Shard members changed", "members", next.Members(), "before", before.Members())
	select {
	case m.deliver <- struct{}{}:
	default:
	}
}

// listThenWatch lists the member Leases and then watches them, instead of streaming the
// list: for a handful of Leases a plain list costs the same, and every client,
// fakes included, supports it.
type listThenWatch struct {
	*cache.ListWatch
}

// IsWatchListSemanticsUnSupported tells the reflector to list, then watch.
func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }
