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

// memoryBudget accounts the heap that discoveries keep, and the heap their pages occupy
// while being decoded, across every server of a pool. A namespace may hold at most a
// share of the limit. The two are told apart so that what a server keeps is judged
// alone: it fits or it does not, whatever pages other servers happen to be decoding at
// the moment, while a page waits until the bytes it may take are free.
type memoryBudget struct {
	limit   int64
	nsLimit int64

	mu             sync.Mutex
	kept, pages    int64
	keptNS, pageNS map[string]int64
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
		keptNS:  make(map[string]int64),
		pageNS:  make(map[string]int64),
		freed:   make(chan struct{}),
	}
}

func (b *memoryBudget) nsExceeded(ns string) *Error {
	return newError(ReasonLimitExceeded,
		"discovery memory budget exceeded: namespace %s would keep more than its share of %d bytes (1/%d of --discovery-memory-budget %d)",
		ns, b.nsLimit, NamespaceShareDivisor, b.limit)
}

func (b *memoryBudget) exceeded() *Error {
	return newError(ReasonLimitExceeded,
		"discovery memory budget exceeded: the manager would keep more than --discovery-memory-budget %d bytes", b.limit)
}

// keep adds n kept bytes for ns, fromPages of them moved over from what ns holds for
// pages, or fails with LimitExceeded naming the budget that would be broken.
func (b *memoryBudget) keep(ns string, fromPages, n int64) *Error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.keptNS[ns]+n > b.nsLimit {
		return b.nsExceeded(ns)
	}
	if b.kept+n > b.limit {
		return b.exceeded()
	}
	b.pages -= fromPages
	b.pageNS[ns] -= fromPages
	b.kept += n
	b.keptNS[ns] += n
	return nil
}

// hold takes up to n bytes for a page of ns and returns how many: no more than kept
// bytes leave free, since those are not about to be released. It then waits while other
// pages fill the budget, until ctx is done. When kept bytes leave nothing, it fails at
// once with LimitExceeded naming the budget.
func (b *memoryBudget) hold(ctx context.Context, ns string, n int64) (int64, *Error) {
	for {
		b.mu.Lock()
		var e *Error
		nsRoom, room := b.nsLimit-b.keptNS[ns], b.limit-b.kept
		switch {
		case nsRoom <= 0:
			b.mu.Unlock()
			return 0, b.nsExceeded(ns)
		case room <= 0:
			b.mu.Unlock()
			return 0, b.exceeded()
		}
		n = min(n, nsRoom, room)
		switch {
		case b.keptNS[ns]+b.pageNS[ns]+n > b.nsLimit:
			e = b.nsExceeded(ns)
		case b.kept+b.pages+n > b.limit:
			e = b.exceeded()
		default:
			b.pages += n
			b.pageNS[ns] += n
		}
		freed := b.freed
		b.mu.Unlock()
		if e == nil {
			return n, nil
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return 0, e
		}
	}
}

// release returns kept and page bytes of ns.
func (b *memoryBudget) release(ns string, kept, pages int64) {
	if kept <= 0 && pages <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.kept -= kept
	b.pages -= pages
	if b.keptNS[ns] -= kept; b.keptNS[ns] <= 0 {
		delete(b.keptNS, ns)
	}
	if b.pageNS[ns] -= pages; b.pageNS[ns] <= 0 {
		delete(b.pageNS, ns)
	}
	close(b.freed)
	b.freed = make(chan struct{})
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

// grow adds n kept bytes to the discovery under way: first out of what the published
// discovery holds, then out of fromPage bytes held for the page being converted, then
// from the budget. It returns how many of fromPage it used.
func (l *lease) grow(fromPage, n int64) (int64, *Error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, newError(ReasonLimitExceeded, "session closed during discovery")
	}
	reuse := min(n, l.held-l.reused)
	l.reused += reuse
	l.pending += reuse
	n -= reuse
	fromPage = min(fromPage, n)
	if e := l.budget.keep(l.ns, fromPage, n); e != nil {
		return 0, e
	}
	l.pending += n
	return fromPage, nil
}

// commit makes the discovery under way the published one, returning what the previous
// one held beyond what was reused.
func (l *lease) commit() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.budget.release(l.ns, l.held-l.reused, 0)
	l.held, l.pending, l.reused = l.pending, 0, 0
}

// abort returns what a failed discovery reserved; the published one keeps its bytes.
func (l *lease) abort() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.budget.release(l.ns, l.pending-l.reused, 0)
	l.pending, l.reused = 0, 0
}

// hold charges up to n bytes of a page being fetched and decoded, and returns the
// charge (see memoryBudget.hold).
func (l *lease) hold(ctx context.Context, n int64) (int64, error) {
	n, err := l.budget.hold(ctx, l.ns, n)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// unhold returns what hold charged and grow did not use.
func (l *lease) unhold(n int64) { l.budget.release(l.ns, 0, n) }

// close returns everything the lease holds.
func (l *lease) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	l.budget.release(l.ns, l.held+l.pending-l.reused, 0)
	l.held, l.pending, l.reused = 0, 0, 0
}
