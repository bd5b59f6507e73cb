package connector

import (
	"context"
	"sync"
)

// DefaultDiscoveryMemoryBudget is the manager-wide discovery memory budget when
// [Options] sets none.
const DefaultDiscoveryMemoryBudget = 256 << 20

// NamespaceShareDivisor divides the manager-wide budget into the most one namespace may
// hold: a quarter, so that no fewer than four namespaces can fill it and one tenant's
// servers never starve the rest.
const NamespaceShareDivisor = 4

// memoryBudget accounts the heap bytes that discoveries keep, and the bytes their pages
// occupy while being decoded, across every server of a pool. A namespace may hold at
// most a share of the limit.
type memoryBudget struct {
	limit   int64
	nsLimit int64

	mu   sync.Mutex
	used int64
	byNS map[string]int64
	// freed is closed and replaced whenever bytes are released, waking waiters.
	freed chan struct{}
}

func newMemoryBudget(limit int64) *memoryBudget {
	if limit <= 0 {
		limit = DefaultDiscoveryMemoryBudget
	}
	return &memoryBudget{
		limit:   limit,
		nsLimit: max(limit/NamespaceShareDivisor, 1),
		byNS:    make(map[string]int64),
		freed:   make(chan struct{}),
	}
}

// tryReserve takes n bytes for namespace ns, or fails with LimitExceeded naming the
// budget that would be broken.
func (b *memoryBudget) tryReserve(ns string, n int64) *Error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reserveLocked(ns, n)
}

func (b *memoryBudget) reserveLocked(ns string, n int64) *Error {
	if b.byNS[ns]+n > b.nsLimit {
		return newError(ReasonLimitExceeded,
			"discovery memory budget exceeded: namespace %s would keep more than its share of %d bytes (1/%d of --discovery-memory-budget %d)",
			ns, b.nsLimit, NamespaceShareDivisor, b.limit)
	}
	if b.used+n > b.limit {
		return newError(ReasonLimitExceeded,
			"discovery memory budget exceeded: the manager would keep more than --discovery-memory-budget %d bytes", b.limit)
	}
	b.used += n
	b.byNS[ns] += n
	return nil
}

// reserve takes n bytes for ns, waiting while other discoveries hold them, until ctx is
// done. What can never fit (more than the namespace share on its own, given what ns
// already keeps) fails at once.
func (b *memoryBudget) reserve(ctx context.Context, ns string, n int64, kept int64) *Error {
	for {
		b.mu.Lock()
		e := b.reserveLocked(ns, n)
		freed := b.freed
		b.mu.Unlock()
		if e == nil {
			return nil
		}
		if kept+n > b.nsLimit {
			return e
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return e
		}
	}
}

// release returns n bytes of ns.
func (b *memoryBudget) release(ns string, n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.byNS[ns] -= n; b.byNS[ns] <= 0 {
		delete(b.byNS, ns)
	}
	close(b.freed)
	b.freed = make(chan struct{})
}

// inUse returns the bytes held overall and by ns.
func (b *memoryBudget) inUse(ns string) (total, namespace int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.byNS[ns]
}

// lease is one session's part of the budget: the bytes its published discovery keeps
// and those of a discovery under way. A discovery under way first reuses what the
// published one holds, since it is about to replace it, so a server that rediscovers is
// charged the larger of its old and new lists rather than both. Closing a lease returns
// everything; a closed lease reserves nothing more.
type lease struct {
	budget *memoryBudget
	ns     string

	mu      sync.Mutex
	held    int64 // kept by the discovery the snapshot shows
	pending int64 // kept so far by the discovery under way
	reused  int64 // of pending, what is covered by held
	closed  bool
}

func (b *memoryBudget) lease(ns string) *lease { return &lease{budget: b, ns: ns} }

// grow adds held+n bytes to the discovery under way: held bytes already reserved (for
// a page, by hold) and n more, taken from what the published discovery holds and then
// from the budget, failing when they do not fit.
func (l *lease) grow(held, n int64) *Error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.budget.release(l.ns, held)
		return newError(ReasonLimitExceeded, "session closed during discovery")
	}
	l.pending += held
	reuse := min(n, l.held-l.reused)
	l.reused += reuse
	l.pending += reuse
	n -= reuse
	if e := l.budget.tryReserve(l.ns, n); e != nil {
		return e
	}
	l.pending += n
	return nil
}

// kept returns what the lease has reserved for kept lists.
func (l *lease) kept() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held + l.pending - l.reused
}

// commit makes the discovery under way the published one, returning what the previous
// one held beyond what was reused.
func (l *lease) commit() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.budget.release(l.ns, l.held-l.reused)
	l.held, l.pending, l.reused = l.pending, 0, 0
}

// abort returns what a failed discovery reserved; the published one keeps its bytes.
func (l *lease) abort() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.budget.release(l.ns, l.pending-l.reused)
	l.pending, l.reused = 0, 0
}

// hold charges up to n bytes of a page being fetched and decoded, no more than what the
// namespace share leaves beside what the lease keeps, and returns the charge. It waits
// while the budget is full until ctx is done; what can never fit fails at once.
func (l *lease) hold(ctx context.Context, n int64) (int64, error) {
	kept := l.kept()
	if room := l.budget.nsLimit - kept; room > 0 {
		n = min(n, room)
	}
	if err := l.budget.reserve(ctx, l.ns, n, kept); err != nil {
		return 0, err
	}
	return n, nil
}

// unhold returns what hold charged.
func (l *lease) unhold(n int64) { l.budget.release(l.ns, n) }

// close returns everything the lease holds.
func (l *lease) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	l.budget.release(l.ns, l.held+l.pending-l.reused)
	l.held, l.pending, l.reused = 0, 0, 0
}
