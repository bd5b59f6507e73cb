package connector

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serve keeps an established session: it probes it, rediscovers on list_changed
// (debounced) and watches for the session ending. It returns why the session must be
// rebuilt.
func (s *session) serve(l *live) *Error {
	probe := time.NewTicker(s.cfg.HealthCheck.Interval)
	defer probe.Stop()
	ended := make(chan error, 1)
	go func() { ended <- l.cs.Wait() }()

	var debounce <-chan time.Time
	for {
		select {
		case <-s.ctx.Done():
			return &Error{Reason: ReasonProtocolError, Message: "session closed"}

		case <-l.changed:
			if debounce == nil {
				debounce = time.After(s.pool.opts.DebounceDelay)
			}

		case <-debounce:
			debounce = nil
			if e := s.rediscover(l); e != nil && (e.sessionMissing || s.probeFailed(e)) {
				return e
			}

		case <-probe.C:
			if e := s.probe(l); e != nil {
				if e.sessionMissing || s.probeFailed(e) {
					return e
				}
			} else {
				s.probeSucceeded()
			}

		case err := <-ended:
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

		case <-s.recheck:
			for _, dest := range s.stack.obs.destinations() {
				if e := s.stack.judgeDial(dest); e != nil {
					s.fail(e, true)
					return e
				}
			}
		}
	}
}

// rediscover refreshes the lists after a list_changed notification.
func (s *session) rediscover(l *live) *Error {
	s.stack.obs.reset()
	d, err := discover(s.ctx, l.cs, s.cfg, s.red, s.mem)
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
func (s *session) probe(l *live) *Error {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
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
