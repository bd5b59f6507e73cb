package connector

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serve keeps an established session: it probes it, rediscovers on list_changed
// (debounced), judges its destinations again when the egress decider changes, and
// returns why the session must be rebuilt. The goroutine that runs it only waits for
// the session to end: the probes, rediscoveries and re-checks run on timers and
// callbacks (a watch), and whichever finds the session must go closes it. A server's
// session used to keep a second goroutine that did nothing but wait, a tenth of what
// an idle server costs in a fleet.
func (s *session) serve(l *live) *Error {
	w := &watch{s: s, l: l}
	w.start()
	err := l.cs.Wait()
	if e := w.stop(); e != nil {
		return e
	}
	e := classify(err, s.stack.obs.last())
	if err == nil {
		// A clean end is no protocol violation: the server restarted or let the
		// session go, and a reconnect heals it.
		e = newError(ReasonSessionEnded, "server ended the session")
	}
	if !e.sessionMissing {
		s.fail(e, true)
	}
	return e
}

// watch looks after one live session while serve waits for it to end.
type watch struct {
	s *session
	l *live

	// work serializes probes and rediscoveries, as one loop once did; stop waits for
	// the one running.
	work     sync.Mutex
	probe    *time.Timer
	debounce *time.Timer // non-nil while a rediscovery is pending
	closed   func() bool // stops watching the session's context

	mu  sync.Mutex
	why *Error // why the watch ended the session; set once
	end bool   // the session has ended, whoever ended it
}

// start arms the probe timer, watches the session's context and takes over the
// list_changed notifications and egress re-checks that came while connecting.
func (w *watch) start() {
	s := w.s
	w.work.Lock()
	w.probe = time.AfterFunc(s.cfg.HealthCheck.Interval, w.runProbe)
	w.work.Unlock()
	w.closed = context.AfterFunc(s.ctx, func() {
		w.finish(&Error{Reason: ReasonProtocolError, Message: "session closed"})
	})
	s.watching.Store(w)
	if w.l.watchChanges(w) {
		w.listChanged()
	}
	select {
	case <-s.recheck:
		go w.recheck()
	default:
	}
}

// stop ends the watch once the session has ended, waiting for a probe or rediscovery
// still running, and returns why the watch ended the session, or nil when it did not.
func (w *watch) stop() *Error {
	w.closed()
	w.s.watching.CompareAndSwap(w, nil)
	w.l.watchChanges(nil)
	w.mu.Lock()
	w.end = true
	why := w.why
	w.mu.Unlock()
	w.work.Lock()
	defer w.work.Unlock()
	w.probe.Stop()
	if w.debounce != nil {
		w.debounce.Stop()
	}
	return why
}

// finish ends the session for reason why, unless it has ended already.
func (w *watch) finish(why *Error) {
	w.mu.Lock()
	if w.end {
		w.mu.Unlock()
		return
	}
	w.end, w.why = true, why
	w.mu.Unlock()
	_ = w.l.cs.Close()
}

// ended reports whether the session has ended.
func (w *watch) ended() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.end
}

func (w *watch) runProbe() {
	w.work.Lock()
	defer w.work.Unlock()
	if w.ended() {
		return
	}
	s := w.s
	if e := s.probe(w.l); e != nil {
		if e.sessionMissing || s.probeFailed(e) {
			w.finish(e)
			return
		}
	} else {
		s.probeSucceeded()
	}
	w.probe.Reset(s.cfg.HealthCheck.Interval)
}

// listChanged schedules one rediscovery for the notifications of the next
// DebounceDelay.
func (w *watch) listChanged() {
	w.work.Lock()
	defer w.work.Unlock()
	if w.debounce == nil && !w.ended() {
		w.debounce = time.AfterFunc(w.s.pool.opts.DebounceDelay, w.runRediscovery)
	}
}

func (w *watch) runRediscovery() {
	w.work.Lock()
	defer w.work.Unlock()
	w.debounce = nil
	if w.ended() {
		return
	}
	s := w.s
	if e := s.rediscover(w.l); e != nil && (e.sessionMissing || s.probeFailed(e)) {
		w.finish(e)
	}
}

// recheck judges the session's destinations against the current decider.
func (w *watch) recheck() {
	if w.ended() {
		return
	}
	s := w.s
	for _, dest := range s.stack.obs.destinations() {
		if e := s.stack.judgeDial(dest); e != nil {
			s.fail(e, true)
			w.finish(e)
			return
		}
	}
}

// rediscover refreshes the lists after a list_changed notification.
func (s *session) rediscover(l *live) (e *Error) {
	ctx, span := s.startSpan(s.ctx, "discover")
	defer func() { endSpan(span, e) }()
	s.stack.obs.reset()
	d, err := discover(ctx, l.cs, s.cfg, s.red, s.mem)
	if err != nil {
		e := classify(err, s.stack.obs.last())
		s.pool.metrics.discoveryError(s.key, e.Reason)
		return e
	}
	s.update(func(snap *Snapshot) { setDiscovered(snap, d) })
	return nil
}

// probe touches the network in both protocol eras: ping where sessions exist; where
// they do not (2026-07-28), ping is gone and a fresh server/discover is the cheapest
// request that must reach the server.
func (s *session) probe(l *live) (e *Error) {
	ctx, span := s.startSpan(s.ctx, "probe")
	defer func() { endSpan(span, e) }()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	s.stack.obs.reset()
	start := time.Now()
	var err error
	switch {
	case !l.modern():
		err = l.cs.Ping(ctx, nil)
	case l.transport == TransportStreamableHTTP:
		err = s.discoverProbe(ctx)
	default:
		_, err = l.cs.ListTools(ctx, nil)
	}
	s.pool.metrics.probed(s.key, time.Since(start))
	if err != nil {
		return classify(err, s.stack.obs.last())
	}
	return nil
}

// discoverProbe runs server/discover through a throwaway go-sdk client: in the
// 2026-07-28 era that is all a connect does, and it holds no server state.
func (s *session) discoverProbe(ctx context.Context) error {
	client := mcp.NewClient(s.pool.impl, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:             s.cfg.URL,
		HTTPClient:           s.stack.client,
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
		MaxEventSize:         s.cfg.Limits.MaxEventBytes,
	}, nil)
	if err != nil {
		return err
	}
	return cs.Close()
}

// probeFailed records a failed probe and reports whether the threshold is reached.
func (s *session) probeFailed(e *Error) bool {
	s.fail(e, false)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.ConsecutiveFailures >= s.cfg.HealthCheck.FailureThreshold
}

func (s *session) probeSucceeded() {
	s.mu.Lock()
	failing := s.snap.ConsecutiveFailures > 0
	s.mu.Unlock()
	if failing {
		s.update(func(snap *Snapshot) {
			snap.ConsecutiveFailures = 0
			snap.LastError = nil
		})
	}
}

// backoffDelay returns the delay before reconnect attempt n (from 1): the initial backoff
// doubling up to the maximum, with equal jitter (half fixed, half random).
func backoffDelay(n int, initial, maxDelay time.Duration) time.Duration {
	d := initial
	for i := 1; i < n && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	half := d / 2
	return half + rand.N(half+1) //nolint:gosec // jitter needs no cryptographic randomness
}
