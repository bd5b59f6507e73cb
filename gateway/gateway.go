package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/cache"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	toolscache "k8s.io/client-go/tools/cache"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway/userauth"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/mcphttp"
	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
	"github.com/switchboard-mcp/switchboard/internal/objectevents"
	"github.com/switchboard-mcp/switchboard/internal/sessionless"
	"github.com/switchboard-mcp/switchboard/policy"
)

// Defaults of Options fields left zero.
const (
	DefaultMaxSessions           = 2048
	DefaultMaxSessionsPerCaller  = 64
	DefaultSessionRatePerCaller  = 10
	DefaultSessionBurstPerCaller = 32
	DefaultIdleTimeout           = 10 * time.Minute
	DefaultMaxMessageBytes       = 4 << 20
	DefaultMaxPendingCalls       = 64
	DefaultAccessTTL             = 10 * time.Second
	DefaultConnectTimeout        = 10 * time.Second
	// DefaultMaxListenStreams and DefaultMaxListenStreamsPerCaller match
	// DefaultMaxSessions and DefaultMaxSessionsPerCaller: a subscriptions/listen stream is
	// the sessionless era's counterpart of a session's standalone stream.
	DefaultMaxListenStreams          = 2048
	DefaultMaxListenStreamsPerCaller = 64
	// DefaultMaxInflightPerCaller is an eighth of the 256 requests a bridge serves at
	// once: with the chart's two replicas one caller holds at most a quarter of a stdio
	// server's bridge (or of any server reached through one upstream client).
	DefaultMaxInflightPerCaller = 32
)

// maxSessionLimiters bounds the callers whose session start rate the gateway keeps.
const maxSessionLimiters = 16384

// bodyReadTimeout bounds reading a POST body once its headers are in: a client that
// trickles its body holds no session.
const bodyReadTimeout = 30 * time.Second

// JSON-RPC error codes of the gateway's own answers.
const (
	// codeRefused answers a call the gateway's policy refuses (a filtered tool is unknown
	// to the caller, as the MCP specification answers an unknown tool).
	codeRefused = jsonrpc.CodeInvalidParams
	// codeUnavailable answers a call the gateway cannot relay: the server is not Ready,
	// a session limit is reached, or the upstream failed.
	codeUnavailable = jsonrpc.CodeInternalError
)

// Options configure a Gateway. Zero fields take the defaults named.
type Options struct {
	// Pool is the connector pool whose sessions the gateway's upstreams are built from.
	Pool *connector.Pool
	// Authenticator authenticates callers. Nil turns authentication and authorization
	// off (--catalog-auth=none, for switchboard dev only): every caller may use every
	// server.
	Authenticator Authenticator
	// Access reviews a caller's use of a server; required with an Authenticator.
	Access authorizationv1client.SubjectAccessReviewInterface
	// AccessTTL is how long an access answer is cached. Zero means 10s.
	AccessTTL time.Duration
	// ResourceMetadata names each endpoint's protected resource metadata (RFC 9728) in
	// the challenge of its 401 answers; the manager passes the catalogue's
	// (catalog.ResourceMetadata), which serves the documents. Nil gives a plain Bearer
	// challenge.
	ResourceMetadata ResourceMetadata
	// NewToolIndex builds the ToolIndex a toolset in Search mode serves find_tools from,
	// over its exposed tools. Required; the manager passes the catalogue's.
	NewToolIndex func([]IndexedTool) ToolIndex
	// MaxSessions bounds the open sessions of this replica. Zero means 2048.
	MaxSessions int
	// MaxSessionsPerCaller bounds the open sessions of one caller (identity.Caller.Key)
	// on this replica, of servers and toolsets together. Zero means 64.
	MaxSessionsPerCaller int
	// MaxSessionsPerNamespace bounds the open sessions of the servers and toolsets of one
	// namespace on this replica, whoever their callers. Zero means a quarter of
	// MaxSessions, so that no tenant takes the whole replica.
	MaxSessionsPerNamespace int
	// SessionRatePerCaller bounds the sessions per second one caller may start once it
	// has started SessionBurstPerCaller at once. Zero means 10 and 32; math.Inf(1) lifts
	// the rate.
	SessionRatePerCaller  float64
	SessionBurstPerCaller int
	// IdleTimeout ends a session that saw no request for this long. Zero means 10m.
	IdleTimeout time.Duration
	// MaxMessageBytes bounds one message a client sends. Zero means 4 MiB.
	MaxMessageBytes int
	// MaxPendingCalls bounds the calls one session may have waiting for the server.
	// Zero means 64.
	MaxPendingCalls int
	// ConnectTimeout bounds opening an upstream session. Zero means 10s.
	ConnectTimeout time.Duration
	// MaxListenStreams bounds the subscriptions/listen streams open on this replica, of
	// servers and toolsets together. Zero means 2048.
	MaxListenStreams int
	// MaxListenStreamsPerCaller bounds the subscriptions/listen streams one caller holds
	// open on this replica. Zero means 64.
	MaxListenStreamsPerCaller int
	// MaxInflightPerCaller bounds the sessionless requests of one caller this replica
	// serves at once, listen streams aside. Zero means 32.
	MaxInflightPerCaller int
	// ApprovalKey is the HMAC key of the approval requests put to sessionless clients
	// (see approval_input.go), at least 32 bytes; replicas that share it verify each
	// other's. Empty gives each process a random key of its own: a client's answer must
	// then reach the replica that asked, and elsewhere is refused, saying so.
	ApprovalKey []byte
	// Authorizations brokers persons' authorizations of perUser servers: the gateway
	// tells a session's client when one it elicited completed, and serves each
	// person's view and revocation of their grants. Nil serves neither.
	Authorizations *userauth.Broker
	// Registerer receives the gateway's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger logs the gateway's operation; Audit gets one line per session start and end
	// and per tool call. The zero Logger discards.
	Logger, Audit logr.Logger
}

func (o *Options) defaults() error {
	if o.Pool == nil {
		return errors.New("gateway: a connector pool is required")
	}
	if o.NewToolIndex == nil {
		return errors.New("gateway: a tool index for toolsets in Search mode is required")
	}
	if o.Authenticator != nil && o.Access == nil {
		return errors.New("gateway: authentication needs a SubjectAccessReview client")
	}
	if o.AccessTTL <= 0 {
		o.AccessTTL = DefaultAccessTTL
	}
	if o.MaxSessions < 0 || o.MaxSessionsPerCaller < 0 || o.MaxSessionsPerNamespace < 0 || o.SessionBurstPerCaller < 0 {
		return errors.New("gateway: session limits (--gateway-max-sessions, --gateway-max-sessions-per-caller, " +
			"--gateway-max-sessions-per-namespace, --gateway-session-burst-per-caller) must not be negative")
	}
	if o.MaxListenStreams < 0 || o.MaxListenStreamsPerCaller < 0 || o.MaxInflightPerCaller < 0 {
		return errors.New("gateway: the limits of sessionless requests (--gateway-max-listen-streams, " +
			"--gateway-max-listen-streams-per-caller, --gateway-max-inflight-per-caller) must not be negative")
	}
	if o.SessionRatePerCaller < 0 || math.IsNaN(o.SessionRatePerCaller) {
		return errors.New("gateway: the session rate per caller (--gateway-session-rate-per-caller) must be a positive number of sessions per second")
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.MaxSessionsPerCaller == 0 {
		o.MaxSessionsPerCaller = DefaultMaxSessionsPerCaller
	}
	if o.MaxSessionsPerNamespace == 0 {
		o.MaxSessionsPerNamespace = max(1, o.MaxSessions/4)
	}
	if o.SessionRatePerCaller == 0 {
		o.SessionRatePerCaller = DefaultSessionRatePerCaller
	}
	if o.SessionBurstPerCaller == 0 {
		o.SessionBurstPerCaller = DefaultSessionBurstPerCaller
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.MaxPendingCalls <= 0 {
		o.MaxPendingCalls = DefaultMaxPendingCalls
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.MaxListenStreams == 0 {
		o.MaxListenStreams = DefaultMaxListenStreams
	}
	if o.MaxListenStreamsPerCaller == 0 {
		o.MaxListenStreamsPerCaller = DefaultMaxListenStreamsPerCaller
	}
	if o.MaxInflightPerCaller == 0 {
		o.MaxInflightPerCaller = DefaultMaxInflightPerCaller
	}
	return nil
}

// Gateway serves one Streamable HTTP MCP endpoint per MCPServer and relays each client
// session to an upstream session of its own. Create it with New, feed it MCPServer
// objects (EventHandler on the manager's informer, or Update and Delete), and serve
// Handler.
type Gateway struct {
	opts    Options
	log     logr.Logger
	audit   logr.Logger
	metrics *metrics
	access  *accessReviewer
	mux     *http.ServeMux

	// limiters holds each caller's rate limiter per server; sessionLimiters each
	// caller's limiter of session starts.
	limiters        *cache.LRUExpireCache
	sessionLimiters *cache.LRUExpireCache

	mu       sync.RWMutex
	servers  map[connector.Key]*server
	sessions map[string]*session
	// counts holds the upstream sessions of each server, callerCounts those of each
	// caller with each server (a server endpoint's or a toolset's).
	counts       map[connector.Key]int
	callerCounts map[callerServer]int
	// openSessions, callerSessions and namespaceSessions count the sessions holding a
	// session slot (see takeSessionSlotLocked): of this replica, of each caller (by
	// Identity.Key) and of each namespace.
	openSessions      int
	callerSessions    map[string]int
	namespaceSessions map[string]int
	seq               uint64

	// toolsets are the MCPToolsets the informer holds; toolsetSessions their open
	// sessions (nil while one is starting). Sessions of both kinds count against
	// MaxSessions and the caller's and the namespace's quotas.
	toolsets        map[connector.Key]*mcpv1alpha1.MCPToolset
	toolsetSessions map[string]*toolsetSession
	// sessionlessToolsets are the toolset sessions that serve each caller's sessionless
	// requests to a toolset, also held in toolsetSessions.
	sessionlessToolsets map[toolsetCaller]*toolsetSession

	// statelessHandler serves the sessionless era's requests through upstreamClients.
	statelessHandler        http.Handler
	statelessToolsetHandler http.Handler
	upstreamClients         *upstreamClients
	// listens are the subscriptions/listen streams open, inflight the other sessionless
	// requests being served (see admitSessionless).
	listens, inflight shares
	// openQuestions are the elicitations of session-era servers waiting for the answer
	// of a sessionless client (see input_bridge.go).
	openQuestions openQuestions
	// approvals issue and verify the approval requests of sessionless clients.
	approvals *approvals
	// policies are the MCPAccessPolicies, compiled (see accessPolicies).
	policies accessPolicies
	// fronts are the front door's timings of the requests being served, for their spans.
	fronts frontTraces
}

// New returns a Gateway.
func New(opts Options) (*Gateway, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	approvals, err := newApprovals(opts.ApprovalKey)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		approvals:       approvals,
		opts:            opts,
		log:             opts.Logger,
		audit:           auditLogger(opts.Audit),
		metrics:         m,
		limiters:        cache.NewLRUExpireCache(16384),
		sessionLimiters: cache.NewLRUExpireCache(maxSessionLimiters),
		servers:         make(map[connector.Key]*server),
		sessions:        make(map[string]*session),
		counts:          make(map[connector.Key]int),
		callerCounts:    make(map[callerServer]int),

		callerSessions:    make(map[string]int),
		namespaceSessions: make(map[string]int),

		toolsets:        make(map[connector.Key]*mcpv1alpha1.MCPToolset),
		toolsetSessions: make(map[string]*toolsetSession),

		sessionlessToolsets: make(map[toolsetCaller]*toolsetSession),

		policies: accessPolicies{byKey: map[connector.Key]*policy.Compiled{}, byNS: map[string][]*policy.Compiled{}},
	}
	if opts.Authenticator != nil {
		g.access = &accessReviewer{reviews: opts.Access, ttl: opts.AccessTTL, timeout: 5 * time.Second,
			cache: cache.NewLRUExpireCache(16384)}
	}
	g.upstreamClients = newUpstreamClients(g)
	g.statelessHandler = g.newStatelessHandler()
	g.statelessToolsetHandler = g.newStatelessToolsetHandler()
	g.mux = http.NewServeMux()
	// internal/gatewaypath names the paths; the catalogue publishes them as gatewayPath.
	g.mux.HandleFunc(gatewaypath.Prefix+"{namespace}/servers/{name}", g.serveServer)
	g.mux.HandleFunc(gatewaypath.Prefix+"{namespace}/toolsets/{name}", g.serveToolset)
	if opts.Authorizations != nil {
		g.mux.HandleFunc(gatewaypath.Prefix+"{namespace}/servers/{name}/authorization", g.serveAuthorization)
		opts.Authorizations.OnComplete(g.authorizationCompleted)
	}
	return g, nil
}

// Handler returns the gateway's HTTP handler, for the manager to mount at
// gatewaypath.Prefix.
func (g *Gateway) Handler() http.Handler { return g.mux }

// Update records the latest state of an MCPServer.
func (g *Gateway) Update(obj *mcpv1alpha1.MCPServer) {
	s := serverOf(obj)
	g.mu.Lock()
	g.servers[connector.Key{Namespace: obj.Namespace, Name: obj.Name}] = s
	g.mu.Unlock()
	g.resyncToolsets(func(ts *toolsetSession) bool { return ts.key.Namespace == obj.Namespace })
}

// Delete forgets an MCPServer and ends its sessions.
func (g *Gateway) Delete(key connector.Key) {
	g.mu.Lock()
	delete(g.servers, key)
	var ending []*session
	for _, s := range g.sessions {
		if s != nil && s.key == key {
			ending = append(ending, s)
		}
	}
	g.mu.Unlock()
	for _, s := range ending {
		s.end(errServerDeleted)
	}
	g.upstreamClients.endServer(key, "")
	g.metrics.forget(key)
	g.resyncToolsets(func(ts *toolsetSession) bool { return ts.key.Namespace == key.Namespace })
}

// EventHandler keeps the gateway's picture of MCPServers in step with an informer.
func (g *Gateway) EventHandler() toolscache.ResourceEventHandler {
	return objectevents.Handler(g.Update, func(o *mcpv1alpha1.MCPServer) {
		g.Delete(connector.Key{Namespace: o.Namespace, Name: o.Name})
	})
}

// server returns the gateway's picture of key, or nil.
func (g *Gateway) server(key connector.Key) *server {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.servers[key]
}

// Sessions returns the number of open sessions.
func (g *Gateway) Sessions() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.sessions) + len(g.toolsetSessions)
}

// Close ends every session.
func (g *Gateway) Close() {
	g.mu.Lock()
	ending := make([]*session, 0, len(g.sessions))
	for _, s := range g.sessions {
		if s != nil { // nil holds the slot of a session still opening
			ending = append(ending, s)
		}
	}
	toolsetEnding := make([]*toolsetSession, 0, len(g.toolsetSessions))
	for _, s := range g.toolsetSessions {
		if s != nil {
			toolsetEnding = append(toolsetEnding, s)
		}
	}
	g.mu.Unlock()
	for _, s := range ending {
		s.end(errShuttingDown)
	}
	for _, s := range toolsetEnding {
		s.end(errShuttingDown)
	}
	g.upstreamClients.closeAll()
}

// Reasons a session ends besides its upstream's failure.
var (
	errServerDeleted = errors.New("the MCPServer was deleted")
	errShuttingDown  = errors.New("the gateway is shutting down")
	errIdle          = errors.New("session idle timeout")
	errClientEnded   = errors.New("client ended the session")
	errAccessRevoked = errors.New("the caller may no longer use this server")
	errNotReady      = errors.New("session was not initialized")
)

// serveServer is the endpoint of one server: authenticate, authorize, limit, then relay.
func (g *Gateway) serveServer(w http.ResponseWriter, r *http.Request) {
	if !mcphttp.HostAllowed(w, r) {
		return
	}
	r, forget := g.fronts.begin(r)
	defer forget()
	key := connector.Key{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	caller, ok := g.authorize(w, r, key, g.serverUse())
	if !ok {
		return
	}
	srv := g.server(key)
	if srv == nil {
		g.refuse(w, http.StatusNotFound, fmt.Sprintf("MCPServer %s not found", key))
		return
	}
	serveMethod(w, r, func() { g.servePOST(w, r, key, caller, srv) }, func() clientSession {
		if !g.admitRate(w, caller, srv, key, 1) {
			return nil
		}
		if s := g.requestSession(w, r, key, caller); s != nil {
			return s
		}
		return nil
	})
}

// clientSession is what the GET and DELETE of either endpoint need of a client session:
// a server's or a toolset's.
type clientSession interface {
	streamTransport() *mcp.StreamableServerTransport
	isEnding() bool
	end(reason error)
}

func (s *session) streamTransport() *mcp.StreamableServerTransport        { return s.transport }
func (s *toolsetSession) streamTransport() *mcp.StreamableServerTransport { return s.transport }

// serveMethod serves a Streamable HTTP request of an authorized caller: post handles a
// POST; a GET attaches the standalone stream to the session lookup finds, and a DELETE
// ends it (lookup answers 400 or 404 itself and returns nil when there is none).
func serveMethod(w http.ResponseWriter, r *http.Request, post func(), lookup func() clientSession) {
	switch r.Method {
	case http.MethodPost:
		post()
	case http.MethodGet:
		if !mcphttp.CheckGET(w, r) {
			return
		}
		// A standalone stream is no activity: a client that only listens is idle, and
		// reaping its session ends the stream.
		if s := lookup(); s != nil && !s.isEnding() {
			s.streamTransport().ServeHTTP(w, r)
		}
	case http.MethodDelete:
		if s := lookup(); s != nil {
			s.end(errClientEnded)
			w.WriteHeader(http.StatusNoContent)
		}
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	}
}

// useOf names what a front door's callers must be allowed to use: the kind and the
// resource of the SubjectAccessReview, and how to end a session of a caller who no
// longer may.
type useOf struct {
	kind, resource string
	// revoke ends the session id names, if it is the caller's with key.
	revoke func(id string, key connector.Key, caller *identity.Caller)
}

// serverUse and toolsetUse are the server and toolset endpoints' useOf.
func (g *Gateway) serverUse() useOf {
	return useOf{kind: "MCPServer", resource: resourceServers, revoke: func(id string, key connector.Key, caller *identity.Caller) {
		if s := g.lookup(id); s != nil && s.key == key && s.caller.Key == caller.Key {
			s.end(errAccessRevoked)
		}
	}}
}

func (g *Gateway) toolsetUse() useOf {
	return useOf{kind: "MCPToolset", resource: resourceToolsets, revoke: func(id string, key connector.Key, caller *identity.Caller) {
		if s := g.lookupToolsetSession(id); s != nil && s.key == key && s.caller.Key == caller.Key {
			s.end(errToolsetAccessRevoked)
		}
	}}
}

// authorize authenticates the caller and checks that it may use key, answering 401,
// 403, 429 or 503 when not. A caller refused on a session of its own has that session
// ended. For a toolset, use of each origin server is checked per server when tools are
// listed and called.
func (g *Gateway) authorize(w http.ResponseWriter, r *http.Request, key connector.Key, use useOf) (*identity.Caller, bool) {
	caller, ok := g.authenticate(w, r)
	ft := frontTraceOf(r.Context())
	if ft != nil {
		ft.authenticated = time.Now()
	}
	if !ok {
		refusedSpan(r, ft, "unauthenticated")
	}
	if !ok || g.access == nil {
		return caller, ok
	}
	allowed, err := g.access.allowedOn(r.Context(), caller, use.resource, key)
	if ft != nil {
		ft.authorizing, ft.authorized, ft.denied = true, time.Now(), err == nil && !allowed
	}
	if err != nil || !allowed {
		refusedSpan(r, ft, "forbidden")
	}
	if err != nil {
		g.log.Error(err, "Could not review a caller's access", "kind", use.kind, "object", key.String())
		g.refuse(w, http.StatusServiceUnavailable, "could not review the caller's access; retry shortly")
		return nil, false
	}
	if !allowed {
		if id := r.Header.Get(mcphttp.SessionIDHeader); id != "" {
			use.revoke(id, key, caller)
		}
		g.refuse(w, http.StatusForbidden, fmt.Sprintf("%s may not use %s %s (it needs verb %q on %s.%s %q in namespace %q)",
			caller.Username, use.kind, key, UseVerb, use.resource, mcpv1alpha1.GroupVersion.Group, key.Name, key.Namespace))
		return nil, false
	}
	return caller, true
}

// ResourceMetadata writes the WWW-Authenticate challenge of a 401 answered on an endpoint's
// path: one that names the endpoint's protected resource metadata (RFC 9728) when it is
// published, else a plain Bearer challenge. catalog.ResourceMetadata is the manager's.
type ResourceMetadata interface {
	Challenge(endpointPath string) string
}

// plainChallenge is the challenge of a 401 when no ResourceMetadata is set: the one
// catalog.ResourceMetadata gives when it publishes nothing.
const plainChallenge = `Bearer realm="switchboard"`

// challenge is the WWW-Authenticate challenge of a 401 answered on path.
func (g *Gateway) challenge(path string) string {
	if g.opts.ResourceMetadata == nil {
		return plainChallenge
	}
	return g.opts.ResourceMetadata.Challenge(path)
}

// authenticate tells who the caller is, answering 401, 429 or 503 when it cannot. With
// no Authenticator every caller is identity.Anonymous.
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request) (*identity.Caller, bool) {
	if g.opts.Authenticator == nil {
		return identity.Anonymous, true
	}
	caller, err := g.opts.Authenticator.AuthenticateRequest(r.Context(), r)
	switch {
	case errors.Is(err, identity.ErrUnauthenticated):
		w.Header().Set("WWW-Authenticate", g.challenge(r.URL.Path))
		g.refuse(w, http.StatusUnauthorized, err.Error())
		return nil, false
	case errors.Is(err, identity.ErrTooManyReviews):
		w.Header().Set("Retry-After", strconv.Itoa(int(identity.ReviewRetryAfter.Seconds())))
		g.refuse(w, http.StatusTooManyRequests, err.Error())
		return nil, false
	case err != nil:
		g.log.Error(err, "Could not authenticate a caller")
		g.refuse(w, http.StatusServiceUnavailable, "could not authenticate the caller; retry shortly")
		return nil, false
	}
	return caller, true
}

// refuse answers an HTTP request the gateway will not relay, in plain text.
func (g *Gateway) refuse(w http.ResponseWriter, code int, message string) {
	g.metrics.refused.WithLabelValues(strconv.Itoa(code)).Inc()
	http.Error(w, message, code)
}

// admitRate applies spec.gateway.requestsPerSecond to the caller's requests to the
// server, charging n requests (each message of a batch counts as if it came alone), and
// answers 429 with Retry-After beyond it.
func (g *Gateway) admitRate(w http.ResponseWriter, caller *identity.Caller, srv *server, key connector.Key, n int) bool {
	if delay := g.rateDelay(caller, srv, key, n); delay > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(delay.Seconds()))))
		g.refuse(w, http.StatusTooManyRequests, fmt.Sprintf("more than %d requests per second to MCPServer %s (spec.gateway.requestsPerSecond)", srv.requestsPerSecond, key))
		return false
	}
	return true
}

// rateDelay takes n requests of the caller to the server from its limiter and returns
// zero, or how long the caller must wait when they are beyond the server's
// spec.gateway.requestsPerSecond (they are then not counted; more than a second's worth
// at once is never admitted).
func (g *Gateway) rateDelay(caller *identity.Caller, srv *server, key connector.Key, n int) time.Duration {
	if srv.requestsPerSecond <= 0 {
		return 0
	}
	// Kept for a minute after the last request: long enough to carry the rate, short
	// enough that idle callers cost nothing.
	lim := cachedLimiter(g.limiters, caller.Key+"/"+key.String(), rate.Limit(srv.requestsPerSecond), srv.requestsPerSecond, time.Minute)
	if n > lim.Burst() {
		return time.Second
	}
	res := lim.ReserveN(time.Now(), n)
	if delay := res.Delay(); delay > 0 {
		res.Cancel()
		return delay
	}
	return 0
}

// servePOST relays a message to its session, or starts a session for an initialize
// request without a session id.
func (g *Gateway) servePOST(w http.ResponseWriter, r *http.Request, key connector.Key, caller *identity.Caller, srv *server) {
	if !mcphttp.CheckPOST(w, r) {
		return
	}
	body, msgs, ok := mcphttp.ReadMessages(w, r, int64(g.opts.MaxMessageBytes), bodyReadTimeout)
	if !ok {
		return
	}
	if ft := frontTraceOf(r.Context()); ft != nil && len(msgs.Messages) == 1 {
		ft.id = msgs.Messages[0].ID
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if sessionless.IsRequest(r, msgs) {
		g.serveStateless(w, r, key, caller, srv, msgs)
		return
	}
	if r.Header.Get(mcphttp.SessionIDHeader) != "" {
		s := g.requestSession(w, r, key, caller)
		if s == nil || !refuseBatch(w, msgs, s.negotiatedVersion()) ||
			!g.admitRate(w, caller, srv, key, len(msgs.Messages)) || !s.beginRequest() {
			return
		}
		g.presentCaller(upstreamCaller(r, caller), key)
		defer s.endRequest()
		s.transport.ServeHTTP(w, r)
		return
	}
	if !g.admitRate(w, caller, srv, key, 1) {
		return
	}

	req := mcphttp.InitializeRequest(w, body)
	if req == nil {
		return
	}
	if !srv.ready {
		g.metrics.refused.WithLabelValues(strconv.Itoa(http.StatusServiceUnavailable)).Inc()
		w.Header().Set("Retry-After", "5")
		mcphttp.WriteError(w, http.StatusServiceUnavailable, req.ID, codeUnavailable,
			fmt.Sprintf("MCPServer %s is not Ready (%s): %s", key, srv.reason, srv.message))
		return
	}
	s, err := g.startSession(r.Context(), key, caller, upstreamCaller(r, caller), srv)
	if err != nil {
		g.refuseSession(w, req.ID, caller, key.Namespace, []any{"server", key.Name}, err)
		return
	}
	if !s.beginRequest() {
		mcphttp.NotFound(w, "")
		return
	}
	s.transport.ServeHTTP(w, r)
	s.endRequest()
	if !s.isInitialized() {
		// The client went away, or the server refused initialize: nobody can use it.
		s.end(errNotReady)
	}
}

// batchlessVersion is the first MCP version without JSON-RPC batches.
const batchlessVersion = "2025-06-18"

// refuseBatch answers 400 to a batch in a session whose protocol version has no batches,
// whatever the request's MCP-Protocol-Version header says; it returns whether the body
// may go on. Where an older version allows batches, each message is judged and charged
// as if it came alone.
func refuseBatch(w http.ResponseWriter, msgs *mcpmsg.Body, version string) bool {
	if !msgs.Batch || version != "" && version < batchlessVersion {
		return true
	}
	mcphttp.WriteError(w, http.StatusBadRequest, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest,
		fmt.Sprintf("JSON-RPC batches are not part of MCP %s (this session's version); send one message per request", version))
	return false
}

// requestSession returns the session a request names, or answers 400 (no id) or 404
// (no such session, or one of another server or caller) and returns nil.
func (g *Gateway) requestSession(w http.ResponseWriter, r *http.Request, key connector.Key, caller *identity.Caller) *session {
	id, ok := requestSessionID(w, r)
	if !ok {
		return nil
	}
	s := g.lookup(id)
	if s == nil || s.key != key || s.caller.Key != caller.Key {
		// Another caller's session id is no capability: its owner's identity is part
		// of the session.
		mcphttp.NotFound(w, "")
		return nil
	}
	return s
}

// requestSessionID returns the session id a request carries, or answers 400.
func requestSessionID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.Header.Get(mcphttp.SessionIDHeader)
	if id == "" {
		http.Error(w, "Bad Request: "+r.Method+" requires an Mcp-Session-Id header", http.StatusBadRequest)
	}
	return id, id != ""
}

func (g *Gateway) lookup(id string) *session {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.sessions[id]
}

// startSession reserves a session slot (the replica's, the namespace's, the caller's and
// the server's, at the caller's session rate), opens an upstream session and starts
// relaying. The upstream session acts for who. A refusal is a *sessionRefusal.
func (g *Gateway) startSession(ctx context.Context, key connector.Key, caller *identity.Caller, who *connector.Caller, srv *server) (*session, error) {
	start, err := g.reserveSessionStart(caller)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	if err := g.takeServerSessionLocked(key, srv, caller); err != nil {
		g.mu.Unlock()
		start.Cancel()
		return nil, err
	}
	id := rand.Text()
	g.seq++
	seq := g.seq
	// The slot is held under a placeholder while the upstream opens, without the lock.
	g.sessions[id] = nil
	g.mu.Unlock()

	release := func() {
		g.mu.Lock()
		delete(g.sessions, id)
		g.releaseServerSessionLocked(key, caller.Key)
		g.mu.Unlock()
	}
	openCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opts.ConnectTimeout)
	defer cancel()
	up, err := g.opts.Pool.OpenUpstream(openCtx, key, who)
	if err != nil {
		release()
		return nil, &sessionRefusal{status: openRefusalStatus(err), err: fmt.Errorf("could not open a session with MCPServer %s: %w", key, err)}
	}
	s, err := newSession(g, id, seq, key, caller, up)
	if err != nil {
		_ = up.Close()
		release()
		return nil, &sessionRefusal{status: http.StatusInternalServerError, err: err}
	}
	g.mu.Lock()
	g.sessions[id] = s
	g.mu.Unlock()
	g.metrics.sessionOpened(key)
	s.start()
	return s, nil
}

// forget removes an ended session and gives its slots back.
func (g *Gateway) forget(s *session) {
	g.mu.Lock()
	if g.sessions[s.id] == s {
		delete(g.sessions, s.id)
		g.releaseServerSessionLocked(s.key, s.caller.Key)
	}
	g.mu.Unlock()
	g.metrics.sessionClosed(s.key)
}

// sessionRefusal is why a new session, a server's or a toolset's, did not start: the
// HTTP status to answer the initialize request with and, for a limit that frees up, when
// to retry.
type sessionRefusal struct {
	status     int
	retryAfter time.Duration
	err        error
}

func (r *sessionRefusal) Error() string { return r.err.Error() }
func (r *sessionRefusal) Unwrap() error { return r.err }

// sessionsFull is the refusal of a session beyond one of the session limits: 503, to be
// retried once a session ends.
func sessionsFull(format string, args ...any) *sessionRefusal {
	return &sessionRefusal{status: http.StatusServiceUnavailable, retryAfter: time.Second, err: fmt.Errorf(format, args...)}
}

// refuseSession answers a request whose session (or sessionless client) did not start
// with a JSON-RPC error, the refusal's status and its Retry-After, and audits the
// refusal: the caller, the target ("server", name or "toolset", name) and the reason,
// the connector's (a refused token exchange is InvalidGrant, say) or the HTTP status's.
func (g *Gateway) refuseSession(w http.ResponseWriter, id jsonrpc.ID, caller *identity.Caller, namespace string, target []any, err error) {
	status, retryAfter := http.StatusInternalServerError, time.Duration(0)
	var refusal *sessionRefusal
	if errors.As(err, &refusal) {
		status, retryAfter = refusal.status, refusal.retryAfter
	}
	reason := connector.ReasonOf(err)
	if reason == "" {
		reason = strings.ReplaceAll(http.StatusText(status), " ", "")
	}
	kv := append([]any{"caller", caller.Username, "namespace", namespace}, target...)
	g.audit.Info("Session refused", append(kv, "status", status, "reason", reason)...)
	g.metrics.refused.WithLabelValues(strconv.Itoa(status)).Inc()
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retryAfter.Seconds()))))
	}
	mcphttp.WriteError(w, status, id, codeUnavailable, err.Error())
}

// cachedLimiter returns the limiter c holds under key, or a new one when it holds none or
// one of another limit, and keeps it there for keep after this use.
func cachedLimiter(c *cache.LRUExpireCache, key string, limit rate.Limit, burst int, keep time.Duration) *rate.Limiter {
	var lim *rate.Limiter
	if v, ok := c.Get(key); ok {
		lim, _ = v.(*rate.Limiter)
	}
	if lim == nil || lim.Limit() != limit || lim.Burst() != burst {
		lim = rate.NewLimiter(limit, burst)
	}
	c.Add(key, lim, keep)
	return lim
}

// reserveSessionStart takes one session start from the caller's limiter
// (--gateway-session-rate-per-caller), or refuses it with 429 and how long to wait. The
// reservation is the caller's to cancel when the session is refused for another reason.
func (g *Gateway) reserveSessionStart(caller *identity.Caller) (*rate.Reservation, error) {
	limit, burst := rate.Limit(g.opts.SessionRatePerCaller), g.opts.SessionBurstPerCaller
	// Kept until its bucket would be full again: forgetting it then loses nothing.
	refill := time.Minute
	if limit != rate.Inf {
		refill = max(refill, time.Duration(float64(burst)/float64(limit)*float64(time.Second)))
	}
	res := cachedLimiter(g.sessionLimiters, caller.Key, limit, burst, refill).Reserve()
	if delay := res.Delay(); delay > 0 {
		res.Cancel()
		return nil, &sessionRefusal{status: http.StatusTooManyRequests, retryAfter: delay, err: fmt.Errorf(
			"%s started more than %d gateway sessions at once or %g per second (--gateway-session-rate-per-caller); retry after %s",
			caller.Username, burst, g.opts.SessionRatePerCaller, delay.Round(time.Millisecond))}
	}
	return res, nil
}

// takeSessionSlotLocked counts one more session of the caller with a server or toolset of
// namespace against the replica's, the namespace's and the caller's limits: a server's
// session, a toolset's, or the upstream session that serves a sessionless client (see
// takeServerSession).
func (g *Gateway) takeSessionSlotLocked(namespace string, caller *identity.Caller) error {
	switch {
	case g.openSessions >= g.opts.MaxSessions:
		return sessionsFull("the gateway holds its maximum of %d sessions (--gateway-max-sessions); retry later", g.opts.MaxSessions)
	case g.namespaceSessions[namespace] >= g.opts.MaxSessionsPerNamespace:
		return sessionsFull("the servers and toolsets of namespace %s hold their share of %d gateway sessions on this replica (--gateway-max-sessions-per-namespace); retry later",
			namespace, g.opts.MaxSessionsPerNamespace)
	case g.callerSessions[caller.Key] >= g.opts.MaxSessionsPerCaller:
		return sessionsFull("%s holds its maximum of %d gateway sessions on this replica (--gateway-max-sessions-per-caller); end one or retry later",
			caller.Username, g.opts.MaxSessionsPerCaller)
	}
	g.openSessions++
	g.namespaceSessions[namespace]++
	g.callerSessions[caller.Key]++
	return nil
}

// releaseSessionSlotLocked gives back a slot takeSessionSlotLocked took.
func (g *Gateway) releaseSessionSlotLocked(namespace, callerKey string) {
	g.openSessions--
	decrement(g.namespaceSessions, namespace)
	decrement(g.callerSessions, callerKey)
}

// takeServerSessionLocked counts one more session of the caller with the server against
// every session quota: a session slot (the replica's, the namespace's and the caller's)
// and a server slot (the server's and the caller's with it). Sessions of the server's
// endpoint and the upstream sessions of sessionless clients both take theirs here.
func (g *Gateway) takeServerSessionLocked(key connector.Key, srv *server, caller *identity.Caller) error {
	if err := g.takeSessionSlotLocked(key.Namespace, caller); err != nil {
		return err
	}
	if err := g.takeServerSlotLocked(key, srv, caller); err != nil {
		g.releaseSessionSlotLocked(key.Namespace, caller.Key)
		return err
	}
	return nil
}

// releaseServerSessionLocked gives back what takeServerSessionLocked took.
func (g *Gateway) releaseServerSessionLocked(key connector.Key, callerKey string) {
	g.releaseSessionSlotLocked(key.Namespace, callerKey)
	g.releaseServerSlotLocked(key, callerKey)
}

// takeServerSession reserves what a session of the caller with the server holds, for the
// upstream session that serves the caller's sessionless requests to a server of the
// session era: a session start at the caller's rate and the slots takeServerSessionLocked
// takes, as startSession reserves them for a session. A refusal is a *sessionRefusal;
// release gives the slots back, once however often it is called.
func (g *Gateway) takeServerSession(key connector.Key, caller *identity.Caller) (release func(), err error) {
	start, err := g.reserveSessionStart(caller)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	srv := g.servers[key]
	if srv == nil {
		start.Cancel()
		return nil, &sessionRefusal{status: http.StatusNotFound, err: fmt.Errorf("MCPServer %s not found", key)}
	}
	if err := g.takeServerSessionLocked(key, srv, caller); err != nil {
		start.Cancel()
		return nil, err
	}
	return g.releaseOnce(func() { g.releaseServerSessionLocked(key, caller.Key) }), nil
}

// callerServer is one caller's use of one server.
type callerServer struct {
	caller string // identity.Caller.Key
	server connector.Key
}

// takeServerSlotLocked counts one more upstream session of the server, a server
// endpoint's or a toolset's, against its spec.gateway.maxSessions, and one more of the
// caller against its spec.gateway.maxSessionsPerCaller, which cannot raise
// --gateway-max-sessions-per-caller.
func (g *Gateway) takeServerSlotLocked(key connector.Key, srv *server, caller *identity.Caller) error {
	if srv.maxSessions > 0 && g.counts[key] >= srv.maxSessions {
		return sessionsFull("MCPServer %s holds its maximum of %d gateway sessions (spec.gateway.maxSessions); retry later", key, srv.maxSessions)
	}
	cs := callerServer{caller: caller.Key, server: key}
	limit, setting := g.opts.MaxSessionsPerCaller, "--gateway-max-sessions-per-caller"
	if srv.maxSessionsPerCaller > 0 && srv.maxSessionsPerCaller < limit {
		limit, setting = srv.maxSessionsPerCaller, "spec.gateway.maxSessionsPerCaller"
	}
	if g.callerCounts[cs] >= limit {
		return sessionsFull("%s holds its maximum of %d gateway sessions with MCPServer %s (%s); end one or retry later",
			caller.Username, limit, key, setting)
	}
	g.counts[key]++
	g.callerCounts[cs]++
	return nil
}

// releaseServerSlotLocked gives back a slot takeServerSlotLocked took.
func (g *Gateway) releaseServerSlotLocked(key connector.Key, callerKey string) {
	decrement(g.counts, key)
	decrement(g.callerCounts, callerServer{caller: callerKey, server: key})
}

// decrement counts one less of k, forgetting k at zero so that the map holds only what
// open sessions use.
func decrement[K comparable](counts map[K]int, k K) {
	counts[k]--
	if counts[k] <= 0 {
		delete(counts, k)
	}
}

// takeServerSlot is takeServerSlotLocked for a caller without the lock; the release it
// returns may be called any number of times and gives the slot back once.
func (g *Gateway) takeServerSlot(key connector.Key, caller *identity.Caller) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	srv := g.servers[key]
	if srv == nil {
		return nil, fmt.Errorf("MCPServer %s not found", key)
	}
	if err := g.takeServerSlotLocked(key, srv, caller); err != nil {
		return nil, err
	}
	return g.releaseOnce(func() { g.releaseServerSlotLocked(key, caller.Key) }), nil
}

// releaseOnce returns a release that runs releaseLocked under g.mu the first time it is
// called and does nothing after, so that a slot is given back once whoever ends first.
func (g *Gateway) releaseOnce(releaseLocked func()) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			releaseLocked()
		})
	}
}

// Start waits until ctx ends and then ends every session, so that the gateway can run as
// a manager Runnable on every replica.
func (g *Gateway) Start(ctx context.Context) error {
	<-ctx.Done()
	g.Close()
	return nil
}

// NeedLeaderElection returns false: every replica serves the gateway.
func (g *Gateway) NeedLeaderElection() bool { return false }
