package connector

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure a Pool. Zero fields take the defaults documented on each.
type Options struct {
	// MaxConcurrentConnects bounds the session handshakes in flight at once, so a burst
	// of servers cannot exhaust sockets. A hung server holds a slot for at most its
	// connect timeout. Zero means 16.
	MaxConcurrentConnects int
	// Registerer receives the connector's metrics (the manager passes
	// controller-runtime's metrics.Registry). Nil registers nothing.
	Registerer prometheus.Registerer
	// Logger receives transitions: connected, lost, down. The zero Logger discards.
	Logger logr.Logger
	// InitialBackoff is the first reconnect delay; it doubles per failed attempt up to
	// MaxBackoff, with jitter. Zero means 1s.
	InitialBackoff time.Duration
	// MaxBackoff caps the reconnect delay. Zero means 5m.
	MaxBackoff time.Duration
	// DebounceDelay is how long list_changed notifications are gathered before one
	// rediscovery runs. Zero means 500ms.
	DebounceDelay time.Duration
	// ClientName and ClientVersion identify Switchboard to servers. Zero means
	// "switchboard" and "dev".
	ClientName, ClientVersion string
	// DiscoveryMemoryBudget bounds, in bytes, the heap that discovery may occupy across
	// all servers: what snapshots keep (names, descriptions, digests, the initialize
	// result a session holds) and the pages being decoded. One namespace may hold at
	// most 1/[NamespaceShareDivisor] of it. A discovery that would break it fails with
	// LimitExceeded; what other servers hold is untouched. Zero means
	// [DefaultDiscoveryMemoryBudget].
	DiscoveryMemoryBudget int64
	// MaxCallerTokens bounds the callers' tokens the pool holds for servers whose
	// credentials follow the caller, across all servers: entries are evicted least
	// recently used first. Zero means [DefaultMaxCallerTokens].
	MaxCallerTokens int
	// StandbyLinger is how long the session of a server another replica owns outlives
	// its last gateway upstream, so that an agent's next session does not pay a new
	// handshake (see [Pool.Standby]). Zero means 1m.
	StandbyLinger time.Duration
	// Grants keeps persons' grants for perUser servers (see [UserAuthorizer]); nil
	// refuses every perUser server with a reason naming the manager's flag.
	Grants GrantStore
	// AuthorizationRequired answers a call of a person who holds no grant for a
	// perUser server: the gateway's URL elicitation (-32042, see [URLElicitationRequired]).
	// Nil answers it with the connector's ReasonAuthorizationRequired error.
	AuthorizationRequired func(ctx context.Context, key Key, caller Caller) *jsonrpc.Error
}

// Event says that what the connector knows about a server changed: its state, its last
// error or what it offers. It carries only the key; read the details with
// [Pool.Snapshot]. Events for one key are coalesced while the reader is behind, so an
// event means "look again", never "this exact change happened".
type Event struct {
	Key Key
}

// Pool holds one session per server. It is safe for concurrent use; none of its
// methods block on the network.
type Pool struct {
	opts         Options
	log          logr.Logger
	metrics      *metrics
	impl         *mcp.Implementation
	client       *mcp.Client // shared by every session (newSharedClient)
	lives        sync.Map    // *mcp.ClientSession -> *live, for the client's handlers
	connectSlots chan struct{}
	memory       *memoryBudget
	callers      *callerCache // per-caller upstream tokens, all servers (percaller.go)

	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	servers map[Key]*entry
	closed  bool

	events *eventQueue
}

// entry is one server: the session answering Snapshot and, while a config change is
// being rolled out, the session that will replace it once its first connect settles.
type entry struct {
	current *session
	pending *session
	// standby says another replica owns the server: the session holds its config for
	// the gateway and runs only while gateway sessions use it.
	standby bool
}

// sessions returns the entry's sessions: the current one and any pending one.
func (e *entry) sessions() []*session {
	if e.pending != nil {
		return []*session{e.current, e.pending}
	}
	return []*session{e.current}
}

// latest returns the session built from the newest config.
func (e *entry) latest() *session {
	if e.pending != nil {
		return e.pending
	}
	return e.current
}

// NewPool returns a running pool. Call Close (or Start, as a controller-runtime
// Runnable) to stop it.
func NewPool(opts Options) (*Pool, error) {
	if opts.MaxConcurrentConnects <= 0 {
		opts.MaxConcurrentConnects = 16
	}
	if opts.InitialBackoff <= 0 {
		opts.InitialBackoff = time.Second
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Minute
	}
	if opts.DebounceDelay <= 0 {
		opts.DebounceDelay = 500 * time.Millisecond
	}
	if opts.StandbyLinger <= 0 {
		opts.StandbyLinger = time.Minute
	}
	if opts.ClientName == "" {
		opts.ClientName = "switchboard"
	}
	if opts.ClientVersion == "" {
		opts.ClientVersion = "dev"
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{
		opts:         opts,
		log:          opts.Logger,
		metrics:      m,
		impl:         &mcp.Implementation{Name: opts.ClientName, Version: opts.ClientVersion},
		connectSlots: make(chan struct{}, opts.MaxConcurrentConnects),
		memory:       newMemoryBudget(opts.DiscoveryMemoryBudget),
		callers:      newCallerCache(opts.MaxCallerTokens),
		ctx:          ctx,
		cancel:       cancel,
		servers:      make(map[Key]*entry),
		events:       newEventQueue(),
	}
	p.client = newSharedClient(p)
	go p.events.run(ctx)
	return p, nil
}

// Ensure makes the pool hold a session for key with cfg. It is idempotent: the same
// config again changes nothing, and a config that differs only in its egress decider
// swaps the decider in place. Any other change (URL, headers, CA bundle, timeouts,
// limits) starts a new session; the old one keeps answering Snapshot until the new one
// has connected or failed its first attempt, so the controller sees no gap. A standby
// session with the same config (see [Pool.Standby]) is started in place.
func (p *Pool) Ensure(key Key, cfg Config) {
	var stale []*session
	defer func() { closeAll(stale) }()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	e := p.servers[key]
	if e != nil {
		e.standby = false
		if latest := e.latest(); sameSession(latest.cfg.withDefaults(), cfg.withDefaults()) {
			latest.setEgress(cfg.Egress)
			if latest.start() {
				p.metrics.setState(key, StateConnecting)
			}
			return
		}
	}
	s := newSession(p, key, cfg)
	switch {
	case e == nil:
		p.servers[key] = &entry{current: s}
		p.metrics.setState(key, StateConnecting)
	case !e.current.started.Load():
		// A standby session answers nothing the new one would have to take over.
		stale = e.sessions()
		e.current, e.pending = s, nil
		p.metrics.setState(key, StateConnecting)
	default:
		if e.pending != nil {
			stale = append(stale, e.pending)
		}
		e.pending = s
		s.onSettle = p.promote
	}
	s.start()
}

// Standby makes the pool hold cfg for a server another replica owns, so that this
// replica's gateway can open upstream sessions with it ([Pool.OpenUpstream]), without a
// session of its own: no connection, no probes, no discovery. The gateway's first
// upstream starts the session; once no upstream has used it for
// [Options.StandbyLinger], it is stopped again. A session this replica ran as the owner is stopped unless the gateway
// is using it. [Pool.Ensure] with the same config takes the server over.
func (p *Pool) Standby(key Key, cfg Config) {
	var stale []*session
	defer func() { closeAll(stale) }()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	e := p.servers[key]
	if e != nil && sameSession(e.latest().cfg.withDefaults(), cfg.withDefaults()) {
		e.standby = true
		s := e.latest()
		s.setEgress(cfg.Egress)
		if e.pending != nil {
			stale = append(stale, e.current)
			e.current, e.pending = s, nil
			s.onSettle = nil
		}
		if s.started.Load() && !s.inUse() {
			stale = append(stale, s)
			e.current = newSession(p, key, cfg)
			p.metrics.forget(key)
		}
		return
	}
	if e != nil {
		stale = e.sessions()
		p.metrics.forget(key)
	}
	p.servers[key] = &entry{current: newSession(p, key, cfg), standby: true}
}

// parkIfUnused stops s and keeps its config, if s is a standby server's session that no
// upstream uses.
func (p *Pool) parkIfUnused(s *session) {
	p.mu.Lock()
	e := p.servers[s.key]
	if p.closed || e == nil || !e.standby || e.current != s || s.inUse() {
		p.mu.Unlock()
		return
	}
	cfg := s.cfg
	if s.stack != nil {
		cfg.Egress = s.stack.egress() // the newest decider, which setEgress swapped in
	}
	e.current = newSession(p, s.key, cfg)
	p.metrics.forget(s.key)
	p.mu.Unlock()
	s.close()
}

// closeAll closes sessions taken out of the pool; never under the pool's lock, since
// closing ends the gateway's upstreams.
func closeAll(sessions []*session) {
	for _, s := range sessions {
		s.close()
	}
}

// beingReplaced reports whether s is its server's current session while a session of a
// newer config connects to replace it.
func (p *Pool) beingReplaced(s *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.servers[s.key]
	return e != nil && e.current == s && e.pending != nil
}

// promote makes a settled replacement session the current one and stops the old one.
func (p *Pool) promote(s *session) {
	p.mu.Lock()
	e := p.servers[s.key]
	if e == nil || e.pending != s {
		p.mu.Unlock()
		return
	}
	old := e.current
	e.current, e.pending = s, nil
	p.mu.Unlock()
	old.close()
	p.metrics.setState(s.key, s.snapshot().State)
	p.events.add(s.key)
}

// changed is called by a session whose snapshot changed noticeably.
func (p *Pool) changed(s *session, state State) {
	p.mu.Lock()
	e := p.servers[s.key]
	current := e != nil && e.current == s
	p.mu.Unlock()
	if !current {
		return
	}
	p.metrics.setState(s.key, state)
	p.events.add(s.key)
}

// Remove stops the session for key and forgets it. It returns at once; the session
// winds down (closing its MCP session) in the background.
func (p *Pool) Remove(key Key) {
	p.mu.Lock()
	e := p.servers[key]
	delete(p.servers, key)
	p.mu.Unlock()
	if e == nil {
		return
	}
	closeAll(e.sessions())
	p.metrics.forget(key)
}

// Snapshot returns what the pool knows about key, and false when it holds no session
// for it.
func (p *Pool) Snapshot(key Key) (Snapshot, bool) {
	current := p.current(key)
	if current == nil {
		return Snapshot{}, false
	}
	return current.snapshot(), true
}

// Protocol returns the transport and the negotiated protocol version of key's session,
// as its Snapshot has them, and false when the pool holds no session for key. It copies
// nothing else, for callers that ask on every request (the gateway's sessionless front
// door).
func (p *Pool) Protocol(key Key) (Transport, string, bool) {
	current := p.current(key)
	if current == nil {
		return "", "", false
	}
	current.mu.Lock()
	defer current.mu.Unlock()
	return current.snap.Transport, current.snap.ProtocolVersion, true
}

// current returns the session built from the newest config the pool has set up for key,
// or nil.
func (p *Pool) current(key Key) *session {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.servers[key]; e != nil {
		return e.current
	}
	return nil
}

// Settled returns a channel that is closed once the session built from the newest
// config for key has settled its first connect attempt, successful or not (Snapshot then
// tells which); nil when the pool holds no session for key. A caller that finds it open
// gets an Event for key once it closes, so it can report a quick server's outcome
// instead of reporting it as connecting first.
func (p *Pool) Settled(key Key) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.servers[key]; e != nil {
		s := e.latest()
		s.settleWatched.Store(true) // before the caller looks: settle then sends an event
		return s.settledCh
	}
	return nil
}

// FirstConnect reports when the newest session of the server key names began, while its
// first connect attempt has not settled (connecting is false once it has, or when the
// pool holds no session). A caller that waits for the outcome is woken by an event when
// it settles, as with Settled.
func (p *Pool) FirstConnect(key Key) (began time.Time, connecting bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.servers[key]
	if e == nil {
		return time.Time{}, false
	}
	s := e.latest()
	s.settleWatched.Store(true) // before the caller looks: settle then sends an event
	select {
	case <-s.settledCh:
		return time.Time{}, false
	default:
		return s.began, true
	}
}

// Keys returns the keys the pool holds sessions for, in no particular order.
func (p *Pool) Keys() []Key {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]Key, 0, len(p.servers))
	for k := range p.servers {
		keys = append(keys, k)
	}
	return keys
}

// Events returns the channel of change events. There is one channel per pool; it is
// closed by Close. A controller feeds it to a controller-runtime channel source by
// mapping each Event to a GenericEvent for an object with the key's namespace and name.
func (p *Pool) Events() <-chan Event { return p.events.out }

// Start blocks until ctx is done and then closes the pool; it lets a manager run the
// pool as a Runnable.
func (p *Pool) Start(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case <-p.ctx.Done():
	}
	p.Close()
	return nil
}

// Close stops every session and waits for them to wind down, closes the Events channel
// and makes later calls to Ensure no-ops. It is idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var sessions []*session
	for k, e := range p.servers {
		sessions = append(sessions, e.sessions()...)
		delete(p.servers, k)
	}
	p.mu.Unlock()
	p.cancel()
	for _, s := range sessions {
		s.releaseIfUnstarted()
		<-s.done
	}
	<-p.events.stopped
}

func (p *Pool) backoff(attempt int) time.Duration {
	return backoffDelay(attempt, p.opts.InitialBackoff, p.opts.MaxBackoff)
}

// eventQueue coalesces events per key so that sessions never block on a slow reader and
// no key's event is ever dropped.
type eventQueue struct {
	mu      sync.Mutex
	pending map[Key]struct{}
	order   []Key
	wake    chan struct{}
	out     chan Event
	stopped chan struct{}
}

func newEventQueue() *eventQueue {
	return &eventQueue{
		pending: make(map[Key]struct{}),
		wake:    make(chan struct{}, 1),
		out:     make(chan Event, 64),
		stopped: make(chan struct{}),
	}
}

func (q *eventQueue) add(k Key) {
	q.mu.Lock()
	if _, ok := q.pending[k]; !ok {
		q.pending[k] = struct{}{}
		q.order = append(q.order, k)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *eventQueue) pop() (Key, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) == 0 {
		return Key{}, false
	}
	k := q.order[0]
	q.order = q.order[1:]
	delete(q.pending, k)
	return k, true
}

func (q *eventQueue) run(ctx context.Context) {
	defer close(q.stopped)
	defer close(q.out)
	for {
		for {
			k, ok := q.pop()
			if !ok {
				break
			}
			select {
			case q.out <- Event{Key: k}:
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-q.wake:
		case <-ctx.Done():
			return
		}
	}
}
