package bridge

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// ErrTooManySessions means a new session was refused because each of the
// Options.MaxSessions sessions had a request in flight, so none could be evicted.
var ErrTooManySessions = errors.New("too many sessions")

// ErrEvicted ends the least recently used idle session when a new session needs its slot.
// Its client gets 404 on its next request and, as MCP says, starts a new session.
var ErrEvicted = errors.New("session evicted: the bridge was at its session limit and this session was the least recently used")

// slotWait bounds how long a new session waits for an ending session's subprocess to be
// reaped and give its slot back, on top of the grace period that subprocess has.
const slotWait = 5 * time.Second

// busyWait is how long a new session waits, when every session has a request in flight,
// for one of them to finish before it is refused: a client's next request often comes
// the moment its last one is answered, before the bridge has counted that one finished.
const busyWait = time.Second

// endedMemory is how many ended sessions the bridge remembers, to tell a client that
// comes back why its session is gone.
const endedMemory = 256

// shutdownTimeout bounds how long Serve waits for HTTP requests to finish once every
// session has ended.
const shutdownTimeout = 5 * time.Second

// Bridge serves a stdio MCP server over Streamable HTTP, one subprocess per session.
// Create it with New, serve Handler (or call Serve), and Close it to stop every
// subprocess.
type Bridge struct {
	opts Options
	log  logr.Logger

	mu       sync.Mutex
	sessions map[string]*session // live sessions by ID
	ended    map[string]string   // recently ended session IDs and why
	endedIDs []string            // ended's keys, oldest first
	slots    int                 // sessions whose subprocess is not yet reaped
	changed  chan struct{}       // closed and replaced when a slot is freed or a session starts
	seq      uint64
	closing  bool
	// busyWaiters counts new sessions waiting for a request to end (see busyWait).
	busyWaiters atomic.Int32

	spares *spares // nil without Options.WarmProcesses, and in Shared mode
	// startup watches the first process for Options.StartupWindow; nil without one.
	startup *startupWatch
	shared  *sharedProcess // the one process of Shared mode; nil in PerSession mode
	// stateless serves the sessionless era's requests, from a process of its own.
	stateless *statelessFront
	metrics   *metrics

	wg        sync.WaitGroup // one per session until its subprocess is reaped
	closeOnce sync.Once
}

// SessionInfo describes a live session.
type SessionInfo struct {
	// ID is the session's Mcp-Session-Id. It is a bearer secret: do not log it.
	ID string
	// PID is the process ID of the session's subprocess, the leader of its process group.
	PID int
	// Started is when the session began.
	Started time.Time
}

// New validates opts, applies the defaults and returns a Bridge with no sessions. The
// command must be found; it is first run when the first client initializes a session.
func New(opts Options) (*Bridge, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Bridge{
		opts:     opts,
		log:      opts.Logger,
		sessions: make(map[string]*session),
		ended:    make(map[string]string),
		changed:  make(chan struct{}),
		startup:  newStartupWatch(opts.Command[0], opts.StartupWindow),
	}
	b.metrics = newMetrics(b)
	b.stateless = newStatelessFront(b)
	switch {
	case opts.SessionMode == Shared:
		b.shared = newSharedProcess(opts, b.log)
		b.shared.startup = b.startup
	case opts.WarmProcesses > 0:
		b.spares = newSpares(b, opts.WarmProcesses)
	}
	return b, nil
}

// startProcess starts a subprocess of the server command and logs its stderr.
func (b *Bridge) startProcess() (*process, error) {
	proc, err := traceProcessStart(b.opts.Command, func() (*process, error) {
		return startProcess(b.opts.Command, b.opts.Env, b.opts.Dir)
	})
	if err != nil {
		b.startup.observe(nil, err)
		return nil, err
	}
	proc.logStderrTo(b.log.WithValues("pid", proc.pid))
	b.startup.observe(proc, nil)
	return proc, nil
}

// takeProcess returns the subprocess for a new session: a warm spare when there is one.
func (b *Bridge) takeProcess() (*process, error) {
	if b.spares != nil {
		return b.spares.take()
	}
	return b.startProcess()
}

// Sessions returns the live sessions, oldest first.
func (b *Bridge) Sessions() []SessionInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	infos := make([]SessionInfo, 0, len(b.sessions))
	for _, s := range b.sessions {
		var pid int
		if s.proc != nil {
			pid = s.proc.pid
		} else {
			pid = b.shared.pid()
		}
		infos = append(infos, SessionInfo{ID: s.id, PID: pid, Started: s.started})
	}
	slices.SortFunc(infos, func(a, b SessionInfo) int { return a.Started.Compare(b.Started) })
	return infos
}

// newSession reserves a slot and starts a session with its own subprocess.
func (b *Bridge) newSession(ctx context.Context) (*session, error) {
	seq, err := b.reserveSlot(ctx)
	if err != nil {
		return nil, err
	}
	s, err := b.startSession(rand.Text(), seq)
	if err != nil {
		b.sessionDone()
		return nil, err
	}
	b.mu.Lock()
	closing := b.closing
	// A process that exits at once can end its session before it is in the table; its
	// end then found nothing to forget, and adding it now would keep it forever.
	if !closing && !s.isEnding() {
		b.sessions[s.id] = s
		b.broadcastLocked()
	}
	b.mu.Unlock()
	if closing {
		// Close ran while the subprocess started, and did not see this session.
		s.end(ErrShuttingDown)
		return nil, ErrShuttingDown
	}
	return s, nil
}

// reserveSlot takes a session slot for a new session. At the limit it evicts the least
// recently used session that has no request in flight and waits for its subprocess to be
// reaped; it fails with ErrTooManySessions only when every session has a request in
// flight. It returns the new session's sequence number.
func (b *Bridge) reserveSlot(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.opts.GracePeriod+slotWait)
	defer cancel()
	busyUntil := time.Now().Add(busyWait)
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if b.closing {
			return 0, ErrShuttingDown
		}
		if b.slots < b.opts.MaxSessions {
			b.slots++
			b.seq++
			b.wg.Add(1)
			return b.seq, nil
		}
		// Every slot is taken. Slots of sessions that are ending come back once their
		// subprocess is reaped; without any, one live session has to go.
		if b.slots == len(b.sessions) {
			victim := b.evictableLocked()
			if victim == nil && time.Now().Before(busyUntil) {
				b.waitForARequestLocked(time.Until(busyUntil))
				continue
			}
			if victim == nil {
				b.metrics.refused.Inc()
				return 0, fmt.Errorf("%w: each of the %d sessions has a request in flight", ErrTooManySessions, b.opts.MaxSessions)
			}
			b.mu.Unlock()
			b.metrics.evictions.Inc()
			victim.log.Info("Evicting the least recently used session to make room for a new one", "maxSessions", b.opts.MaxSessions)
			victim.end(ErrEvicted)
			b.mu.Lock()
			continue
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
		}
		b.mu.Lock()
		if ctx.Err() != nil {
			b.metrics.refused.Inc()
			return 0, fmt.Errorf("%w: the %d sessions are still ending", ErrTooManySessions, b.opts.MaxSessions)
		}
	}
}

// evictableLocked picks the least recently used live session with no request in flight and
// stops its activity, so that it can begin none before it ends; nil when every session
// is busy.
func (b *Bridge) evictableLocked() *session {
	for {
		var victim *session
		var victimUsed time.Time
		for _, s := range b.sessions {
			if used, idle := s.activity.IdleSince(); idle && (victim == nil || used.Before(victimUsed)) {
				victim, victimUsed = s, used
			}
		}
		if victim == nil || victim.activity.StopIfIdle() {
			return victim
		}
		// It began a request since: look again.
	}
}

// waitForARequestLocked waits at most d for a session's request to end, with b.mu held
// on entry and on return.
func (b *Bridge) waitForARequestLocked(d time.Duration) {
	changed := b.changed
	b.busyWaiters.Add(1)
	b.mu.Unlock()
	timer := time.NewTimer(d)
	select {
	case <-changed:
	case <-timer.C:
	}
	timer.Stop()
	b.busyWaiters.Add(-1)
	b.mu.Lock()
}

// requestEnded marks a session's request finished, and wakes a new session waiting for
// one to finish (see busyWait).
func (b *Bridge) requestEnded(s *session) {
	s.endRequest()
	if b.busyWaiters.Load() > 0 {
		b.mu.Lock()
		b.broadcastLocked()
		b.mu.Unlock()
	}
}

// broadcastLocked wakes the sessions waiting in reserveSlot.
func (b *Bridge) broadcastLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// lookup returns the live session with the given ID, or nil and why there is none.
func (b *Bridge) lookup(id string) (*session, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.sessions[id]; ok {
		return s, ""
	}
	if reason, ok := b.ended[id]; ok {
		return nil, "session ended: " + reason
	}
	return nil, "session not found"
}

// forget removes an ending session from the table and remembers why it ended.
func (b *Bridge) forget(s *session, reason error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.sessions[s.id]; !ok {
		return
	}
	delete(b.sessions, s.id)
	if len(b.endedIDs) == endedMemory {
		delete(b.ended, b.endedIDs[0])
		b.endedIDs = b.endedIDs[1:]
	}
	b.ended[s.id] = reason.Error()
	b.endedIDs = append(b.endedIDs, s.id)
}

// sessionDone gives a session slot back once its subprocess is reaped.
func (b *Bridge) sessionDone() {
	b.mu.Lock()
	b.slots--
	b.broadcastLocked()
	b.mu.Unlock()
	b.wg.Done()
}

// Close ends every session and refuses new ones: each subprocess gets its stdin closed,
// Options.GracePeriod to exit, then SIGTERM and SIGKILL to its process group. Close returns once
// every subprocess has been reaped. It is safe to call more than once.
func (b *Bridge) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closing = true
		live := make([]*session, 0, len(b.sessions))
		for _, s := range b.sessions {
			live = append(live, s)
		}
		b.mu.Unlock()
		if len(live) > 0 {
			b.log.Info("Ending all sessions", "sessions", len(live), "gracePeriod", b.opts.GracePeriod.String())
		}
		for _, s := range live {
			s.end(ErrShuttingDown)
		}
		if b.spares != nil {
			b.spares.close()
		}
		b.stateless.close()
		if b.shared != nil {
			b.wg.Wait() // the sessions first, so that none sees the process go
			if err := b.shared.close(); err != nil {
				b.log.Error(err, "Could not stop the shared MCP server process")
			}
		}
	})
	b.wg.Wait()
	return nil
}

// ready reports whether the bridge takes new sessions at all (it may still be full).
func (b *Bridge) ready() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.closing
}

// Serve serves Handler on ln until ctx is done, then shuts down: it ends every session
// (see Close) and stops the HTTP server. It returns nil after a shutdown that ctx asked
// for, and a *CommandError after one that a first process failing within
// Options.StartupWindow asked for.
func (b *Bridge) Serve(ctx context.Context, ln net.Listener) error {
	srv := b.newHTTPServer(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	b.log.Info("Serving MCP over Streamable HTTP", "address", ln.Addr().String(), "path", "/mcp",
		"command", b.opts.Command[0], "sessionMode", b.opts.SessionMode, "maxSessions", b.opts.MaxSessions, "idleTimeout", b.opts.IdleTimeout.String(), "warmProcesses", b.opts.WarmProcesses)

	var serveErr, startupErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	case startupErr = <-b.startup.failures():
	}
	b.log.Info("Shutting down")
	// Close kept-alive connections first: a client's next request then opens a new
	// connection, which its Service sends to another pod, instead of reaching this
	// bridge after its sessions have ended.
	srv.SetKeepAlivesEnabled(false)
	_ = b.Close()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serving http: %w", serveErr)
	}
	return startupErr
}

// ListenAndServe listens on the TCP address addr and calls Serve.
func (b *Bridge) ListenAndServe(ctx context.Context, addr string) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	return b.Serve(ctx, ln)
}
