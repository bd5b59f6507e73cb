package connector

import (
	"context"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// modernProtocol is the first protocol version without sessions and without ping.
const modernProtocol = "2026-07-28"

// session holds the connection to one server for one Config. It runs on its own
// goroutine (run); everything the pool reads goes through mu.
type session struct {
	key      Key
	cfg      Config
	endpoint *url.URL
	pool     *Pool
	red      redactor
	stack    *httpStack // nil when the config cannot be acted on
	setupErr *Error
	// callers are the per-caller credentials of a server whose credentials follow
	// the caller (percaller.go); nil for other servers.
	callers *callerTokens
	// users authorizes each person of a perUser server at its authorization server
	// (peruser.go); nil for other servers.
	users *UserAuthorizer
	// initTemplate is what a person's Upstream answers a deferred initialize with
	// (upstream_peruser.go).
	initTemplate atomic.Pointer[initTemplate]
	// mem is the session's share of the pool's discovery memory budget.
	mem *lease

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// startOnce runs the session, or releases what it holds if it is closed unstarted
	// (a standby server's session that was never needed); started says it runs.
	startOnce sync.Once
	started   atomic.Bool
	// opening counts the upstreams being opened on the session, which keep a standby
	// server's session from being stopped before they are registered.
	opening atomic.Int32
	// recheck tells a session between connections that the decider changed; watching
	// is the watch of its live session, which judges its destinations at once.
	recheck  chan struct{}
	watching atomic.Pointer[watch]

	// detected is the transport Auto settled on; reconnects reuse it. Only run touches it.
	detected Transport

	mu       sync.Mutex
	snap     Snapshot
	settled  bool
	onSettle func(*session)
	// settledCh is closed once the first connect attempt has settled (after onSettle);
	// settleWatched says Pool.Settled handed it out.
	settledCh     chan struct{}
	settleWatched atomic.Bool
	// began is when the session was made: what its first connect is measured from.
	began time.Time

	// upstreams are the gateway's sessions with the server built from this config.
	upstreamsMu sync.Mutex
	upstreams   map[*Upstream]struct{}
}

func newSession(p *Pool, key Key, cfg Config) *session {
	cfg = cfg.withDefaults()
	s := &session{
		key:     key,
		cfg:     cfg,
		pool:    p,
		red:     newRedactor(cfg.secrets()),
		done:    make(chan struct{}),
		recheck: make(chan struct{}, 1),
		mem:     p.memory.lease(key.Namespace),

		settledCh: make(chan struct{}),
		began:     time.Now(),
	}
	s.ctx, s.cancel = context.WithCancel(p.ctx)
	s.snap = Snapshot{State: StateConnecting, Endpoint: DisplayURL(cfg.URL)}

	endpoint, err := cfg.validate()
	if err != nil {
		s.setupErr = newError(ReasonInvalidSpec, "%s", err.Error())
		return s
	}
	s.endpoint = endpoint
	stack, err := newHTTPStack(cfg, endpoint)
	if err != nil {
		s.setupErr = classify(err, nil)
		return s
	}
	s.stack = stack
	if cfg.OAuth2 != nil || cfg.WorkloadIdentity != nil {
		auth, e := newTokenSource(s.ctx, cfg, endpoint, stack)
		if e != nil {
			s.setupErr = e
			return s
		}
		stack.auth = auth
		s.red.issued = auth.issuedSecrets
	}
	if cfg.PerCaller != nil {
		callers, e := newCallerTokens(s.ctx, key, cfg, endpoint, stack, p.callers)
		if e != nil {
			s.setupErr = e
			return s
		}
		s.callers = callers
	}
	if cfg.PerUser != nil {
		if p.opts.Grants == nil {
			s.setupErr = newError(ReasonInvalidSpec, "the server acts for each person with their own account, and this manager keeps no persons' grants: start it with --user-grants-key-secret")
			return s
		}
		if cfg.Protocol == ProtocolSSE {
			s.setupErr = newError(ReasonInvalidSpec, "a server that acts for each person with their own account must speak Streamable HTTP: the legacy SSE transport cannot open a session before the person authorized it")
			return s
		}
		pu, e := checkedPerUser(cfg)
		if e != nil {
			s.setupErr = e
			return s
		}
		s.users = newUserAuthorizer(s.ctx, key, cfg, pu, endpoint, stack, p.opts.Grants)
	}
	return s
}

// logger returns the session's logger. It is made when a line is written, which is
// rarely: a logger kept per session holds a clone of the log encoder, about a KiB.
func (s *session) logger() logr.Logger {
	return s.pool.log.WithValues("server", s.key.String())
}

// snapshot returns a copy of what the session knows.
func (s *session) snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.clone()
}

// update changes the snapshot and tells the pool when a user would notice.
func (s *session) update(change func(*Snapshot)) {
	s.mu.Lock()
	before := s.snap
	next := s.snap.clone()
	change(&next)
	s.snap = next
	s.mu.Unlock()
	if noticeablyDifferent(before, next) {
		s.pool.changed(s, next.State)
	}
}

// settle marks the end of the first connect attempt, success or not, which is when a
// replacement session takes over from the one it replaces.
func (s *session) settle() {
	s.mu.Lock()
	if s.settled {
		s.mu.Unlock()
		return
	}
	s.settled = true
	onSettle := s.onSettle
	s.mu.Unlock()
	if onSettle != nil {
		onSettle(s)
	}
	close(s.settledCh)
	if s.settleWatched.Load() {
		// Whoever saw the attempt unsettled (Pool.Settled) hears about it now: the
		// event that announced the outcome may have come before the close.
		s.pool.events.add(s.key)
	}
}

// setEgress swaps the egress decider in place (dropping the idle connections the old one
// admitted) and asks the session to re-judge the destinations it is connected to.
func (s *session) setEgress(d EgressDecider) {
	if d == nil {
		d = DefaultEgressDecider()
	}
	if s.stack == nil || sameDecision(s.stack.egress(), d) {
		return
	}
	s.stack.setDecider(d)
	s.eachUpstream(func(u *Upstream) { u.judge(d) })
	if w := s.watching.Load(); w != nil {
		go w.recheck()
	}
	// Also for a session between connections, or one whose watch is just ending: its
	// backoff is cut short, and the next watch judges its destinations once more.
	select {
	case s.recheck <- struct{}{}:
	default:
	}
}

// start runs the session unless it runs already or was closed, and reports whether
// this call started it.
func (s *session) start() bool {
	first := false
	s.startOnce.Do(func() {
		first = true
		s.started.Store(true)
		go s.run()
	})
	return first
}

// inUse reports whether gateway upstreams use the session or are being opened on it.
func (s *session) inUse() bool {
	if s.opening.Load() > 0 {
		return true
	}
	s.upstreamsMu.Lock()
	defer s.upstreamsMu.Unlock()
	return len(s.upstreams) > 0
}

// close stops the session; it returns at once and the goroutine winds down on its own.
// Its gateway sessions end with it: they were built from a config that is no longer
// wanted.
func (s *session) close() {
	s.upstreamsMu.Lock()
	s.cancel()
	s.upstreamsMu.Unlock()
	s.releaseIfUnstarted()
	s.endUpstreams("the server's configuration changed or the server was removed")
	if s.callers != nil {
		s.callers.close()
	}
}

// releaseIfUnstarted keeps a session that never ran from ever running, and releases
// what run would have released on its way out.
func (s *session) releaseIfUnstarted() {
	s.startOnce.Do(func() {
		s.mem.close()
		if s.stack != nil {
			s.stack.close()
		}
		s.settle()
		close(s.done)
	})
}

// run is the session's life: connect, serve until the session breaks, back off,
// reconnect; until the pool closes it.
func (s *session) run() {
	defer close(s.done)
	defer s.mem.close()
	defer s.settle()
	if s.setupErr != nil {
		s.fail(s.setupErr, true)
		s.settle()
		<-s.ctx.Done()
		return
	}
	defer s.stack.close()
	if (s.callers != nil && s.callers.metadataOnly) || s.users != nil {
		// No operator credential: the session must not act as a caller.
		s.watchMetadata()
		return
	}

	attempt := 0
	begun := time.Now()
	for {
		l, err := s.connect()
		if s.ctx.Err() != nil {
			if l != nil {
				l.close()
			}
			return
		}
		var delay time.Duration
		if err != nil && attempt == 0 && err.connectionRefused && time.Since(begun) < refusedAtFirstGrace {
			// Still connecting, not failing: see refusedAtFirstGrace.
			if !s.sleep(refusedAtFirstRetry/2 + rand.N(refusedAtFirstRetry/2+1)) { //nolint:gosec // jitter
				return
			}
			continue
		}
		if err != nil {
			attempt++
			s.fail(err, true)
			s.settle()
			delay = s.pool.backoff(attempt)
		} else {
			// Losing a live session counts as the first failed attempt: the next
			// failure backs off further.
			attempt = 1
			s.settle()
			err = s.serve(l)
			l.close()
			if s.ctx.Err() != nil {
				return
			}
			s.pool.metrics.reconnects(s.key)
			if !err.sessionMissing {
				delay = s.pool.backoff(1)
			}
			err = s.red.scrubError(err)
			s.logger().Info("Session lost, reconnecting", "reason", err.Reason, "message", err.Message, "after", delay.String())
		}
		if !s.sleep(delay) {
			return
		}
	}
}

// A server that has just become available may refuse connections for a moment: its
// Service's new endpoint is programmed on each node a little after its pod turns Ready
// (kube-proxy syncs at most once a second by default, and rejects connections to a
// Service without endpoints until then). So a session's first connect, when refused,
// is tried again every refusedAtFirstRetry (with jitter) for refusedAtFirstGrace
// without being reported: the session is connecting, not down, and no backoff of a
// second or more follows a refusal of a few milliseconds (a refused connection costs
// the server nothing). After that, or after any other failure, refusals back off and
// are reported as usual.
const (
	refusedAtFirstRetry = 100 * time.Millisecond
	refusedAtFirstGrace = 2 * time.Second
)

// sleep waits for d or until the session is closed, and reports whether to go on. A
// new egress decider cuts the wait short: a server the old policy denied should not
// wait out a five-minute backoff once the policy allows it.
func (s *session) sleep(d time.Duration) bool {
	if d <= 0 {
		return s.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.recheck:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// fail records a failed connect or probe. down marks the session Down at once (a failed
// connect); otherwise it goes Down only at the failure threshold.
func (s *session) fail(e *Error, down bool) {
	e = s.red.scrubError(e)
	if s.pool.beingReplaced(s) {
		// A session of a newer config connects meanwhile (a stdio server's new pod, a
		// changed spec), and its first connect settles what the server is: this one
		// failing now is no news. A stdio server's pod that rolls ends this session's
		// MCP session (its requests reach the new pod, which never heard of it), and
		// reporting that would make the server unready for as long as the new session
		// takes to connect, refusing every call meanwhile.
		s.logger().Info("Session failed while a newer config's session connects", "reason", e.Reason, "message", e.Message)
		return
	}
	var becameDown bool
	s.update(func(snap *Snapshot) {
		snap.ConsecutiveFailures++
		snap.LastError = e
		if down || snap.ConsecutiveFailures >= s.cfg.HealthCheck.FailureThreshold {
			becameDown = snap.State != StateDown
			snap.State = StateDown
			snap.ConnectedAt = time.Time{}
		}
	})
	if becameDown {
		s.logger().Info("Session down", "reason", e.Reason, "message", e.Message)
	}
}
