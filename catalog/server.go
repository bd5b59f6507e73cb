package catalog

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/cache"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/objectevents"
)

// Request bounds. readTimeout and writeTimeout bound each request of the catalogue's own
// routes (the listener, internal/frontdoor, has none, since the gateway it also serves
// carries streams that last as long as an agent's session).
const (
	readTimeout   = 15 * time.Second
	writeTimeout  = 30 * time.Second
	maxQueryBytes = 4 << 10
	maxBodyBytes  = 64 << 10
	reviewTimeout = 5 * time.Second
)

// Options configure the catalogue. The zero value authenticates callers with TokenReview.
type Options struct {
	// Auth selects how callers are authenticated; AuthTokenReview when empty.
	Auth AuthMode

	// Audiences, when set, are the token audiences TokenReview must accept; by default
	// the API server's own audiences.
	Audiences []string

	// AuthCacheTTL is how long successful TokenReviews and SubjectAccessReview answers
	// are cached; 10s when zero.
	AuthCacheTTL time.Duration

	// TokenCacheSize bounds the cached successful TokenReviews; 4096 when zero.
	TokenCacheSize int

	// NegativeCacheTTL is how long a failed TokenReview is remembered; 5s when zero.
	NegativeCacheTTL time.Duration

	// NegativeCacheSize bounds the remembered failed TokenReviews, in a cache apart from
	// the successful ones; 4096 when zero.
	NegativeCacheSize int

	// MaxConcurrentTokenReviews bounds the TokenReviews of unknown tokens in flight (and,
	// separately, of known tokens being re-reviewed); a request beyond it gets 429. 16
	// when zero.
	MaxConcurrentTokenReviews int

	// ServiceAccountTokensOnly refuses (401), without a TokenReview, every bearer token
	// that is not a ServiceAccount token of the cluster, verified against the API
	// server's ServiceAccount issuer keys: opaque tokens and JWTs of other issuers. See
	// [AuthenticatorOptions].ServiceAccountTokensOnly.
	ServiceAccountTokensOnly bool

	// IdentityProviders, when set, authenticate tokens of MCPIdentityProviders' issuers
	// besides Kubernetes tokens; see [AuthenticatorOptions].IdentityProviders.
	IdentityProviders *identity.Providers

	// ResourceMetadata publishes the protected resource metadata (RFC 9728) of /mcp and
	// of the gateway's endpoints under ResourceMetadataPathPrefix, and names it in the
	// challenge of /mcp's 401 answers. Nil publishes nothing (404).
	ResourceMetadata *ResourceMetadata

	// AccessCacheSize bounds the cached SubjectAccessReview results; 16384 when zero.
	AccessCacheSize int

	// RegistryNamePrefix is the reverse-DNS part of every name the MCP Registry API
	// (/v0.1) gives: an MCPServer is <prefix>/<namespace>.<name>, an MCPToolset
	// <prefix>/<namespace>.toolset_<name>. DefaultRegistryNamePrefix when empty; see
	// [CheckRegistryNamePrefix].
	RegistryNamePrefix string

	// Registerer receives the catalogue's metrics; controller-runtime's registry (served
	// on the manager's metrics endpoint) when nil.
	Registerer prometheus.Registerer

	// Logger logs the catalogue's lifecycle and failed reviews (never a token or a
	// query); ctrl.Log.WithName("catalog") when it has no sink, as the zero value has not.
	Logger logr.Logger

	// requestReadTimeout and requestWriteTimeout bound each request of the catalogue's
	// own routes: readTimeout and writeTimeout, shorter only in tests.
	requestReadTimeout, requestWriteTimeout time.Duration
	// registryReviews bounds the entries one registry request reviews; zero means
	// maxRegistryReviews.
	registryReviews int

	// serviceAccountKeys fetches the API server's ServiceAccount issuer and keys; New
	// sets it from the manager's config.
	serviceAccountKeys identity.ServiceAccountKeys
}

func (o *Options) defaults() error {
	mode, err := ParseAuthMode(string(o.Auth))
	if err != nil {
		return err
	}
	o.Auth = mode
	if o.RegistryNamePrefix == "" {
		o.RegistryNamePrefix = DefaultRegistryNamePrefix
	}
	if err := CheckRegistryNamePrefix(o.RegistryNamePrefix); err != nil {
		return err
	}
	if o.AuthCacheTTL <= 0 {
		o.AuthCacheTTL = 10 * time.Second
	}
	if o.TokenCacheSize <= 0 {
		o.TokenCacheSize = 4096
	}
	if o.AccessCacheSize <= 0 {
		o.AccessCacheSize = 16384
	}
	if o.Registerer == nil {
		o.Registerer = crmetrics.Registry
	}
	if o.Logger.GetSink() == nil {
		o.Logger = ctrl.Log.WithName("catalog")
	}
	if o.registryReviews <= 0 {
		o.registryReviews = maxRegistryReviews
	}
	if o.requestReadTimeout <= 0 {
		o.requestReadTimeout = readTimeout
	}
	if o.requestWriteTimeout <= 0 {
		o.requestWriteTimeout = writeTimeout
	}
	return nil
}

// Server is the catalogue: an HTTP handler for REST and MCP over an index that follows
// the manager's MCPServer and MCPToolset informers. Every replica serves it; the manager
// mounts its Handler beside the gateway's on one listener (internal/frontdoor).
type Server struct {
	opts    Options
	log     logr.Logger
	index   *index
	gate    *gatekeeper
	metrics *metrics
	handler http.Handler
	synced  func() bool

	toolsets toolsetStore

	// registry holds the entries of the MCP Registry API, built by registryBuild.
	registry      *registryIndex
	registryBuild registryBuilder
}

// New creates the catalogue and registers its event handlers on the manager's MCPServer
// and MCPToolset informers. Serve its Handler; it answers 503 until they have synced.
func New(mgr ctrl.Manager, opts Options) (*Server, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	// TokenReviews of unknown tokens, of known tokens and SubjectAccessReviews each get
	// an API client with a rate limiter of their own: a flood of bogus tokens spends only
	// the first.
	unknown, err := authenticationv1client.NewForConfig(identity.ReviewClientConfig(mgr.GetConfig()))
	if err != nil {
		return nil, fmt.Errorf("creating the catalogue's TokenReview client: %w", err)
	}
	known, err := authenticationv1client.NewForConfig(identity.ReviewClientConfig(mgr.GetConfig()))
	if err != nil {
		return nil, fmt.Errorf("creating the catalogue's TokenReview client for known tokens: %w", err)
	}
	access, err := authorizationv1client.NewForConfig(identity.ReviewClientConfig(mgr.GetConfig()))
	if err != nil {
		return nil, fmt.Errorf("creating the catalogue's SubjectAccessReview client: %w", err)
	}
	if opts.serviceAccountKeys, err = identity.APIServerServiceAccountKeys(mgr.GetConfig()); err != nil {
		return nil, err
	}
	s, err := newServer(opts, unknown.TokenReviews(), known.TokenReviews(), access.SubjectAccessReviews())
	if err != nil {
		return nil, err
	}
	informer, err := mgr.GetCache().GetInformer(context.Background(), &mcpv1alpha1.MCPServer{})
	if err != nil {
		return nil, fmt.Errorf("getting the MCPServer informer: %w", err)
	}
	reg, err := informer.AddEventHandler(s.eventHandler())
	if err != nil {
		return nil, fmt.Errorf("adding the catalogue's MCPServer event handler: %w", err)
	}
	toolsetInformer, err := mgr.GetCache().GetInformer(context.Background(), &mcpv1alpha1.MCPToolset{})
	if err != nil {
		return nil, fmt.Errorf("getting the MCPToolset informer: %w", err)
	}
	toolsetReg, err := toolsetInformer.AddEventHandler(s.toolsetEventHandler())
	if err != nil {
		return nil, fmt.Errorf("adding the catalogue's MCPToolset event handler: %w", err)
	}
	registryReg, err := informer.AddEventHandler(s.registryServerHandler())
	if err != nil {
		return nil, fmt.Errorf("adding the registry's MCPServer event handler: %w", err)
	}
	registryToolsetReg, err := toolsetInformer.AddEventHandler(s.registryToolsetHandler())
	if err != nil {
		return nil, fmt.Errorf("adding the registry's MCPToolset event handler: %w", err)
	}
	toolsetServerReg, err := informer.AddEventHandler(s.toolsetServerHandler())
	if err != nil {
		return nil, fmt.Errorf("adding the toolsets' MCPServer event handler: %w", err)
	}
	s.synced = func() bool {
		return reg.HasSynced() && toolsetReg.HasSynced() && registryReg.HasSynced() && registryToolsetReg.HasSynced() &&
			toolsetServerReg.HasSynced()
	}
	return s, nil
}

// newServer builds a Server on the given review clients.
func newServer(opts Options, unknown, known authenticationv1client.TokenReviewInterface,
	access authorizationv1client.SubjectAccessReviewInterface) (*Server, error) {
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	gate := &gatekeeper{
		mode: opts.Auth,
		authn: identity.NewAuthenticator(unknown, known, identity.AuthenticatorOptions{
			Audiences:            opts.Audiences,
			TTL:                  opts.AuthCacheTTL,
			NegativeTTL:          opts.NegativeCacheTTL,
			CacheSize:            opts.TokenCacheSize,
			NegativeCacheSize:    opts.NegativeCacheSize,
			MaxConcurrentReviews: opts.MaxConcurrentTokenReviews,
			Timeout:              reviewTimeout,
			Observe:              m.authOutcome,

			ServiceAccountKeys:       opts.serviceAccountKeys,
			ServiceAccountTokensOnly: opts.ServiceAccountTokensOnly,
			IdentityProviders:        opts.IdentityProviders,
			Logger:                   opts.Logger,
		}),
		access:      access,
		ttl:         opts.AuthCacheTTL,
		timeout:     reviewTimeout,
		accessCache: cache.NewLRUExpireCache(opts.AccessCacheSize),
		metrics:     m,
	}
	s := &Server{
		opts:    opts,
		log:     opts.Logger,
		index:   newIndex(),
		gate:    gate,
		metrics: m,
		synced:  func() bool { return true },

		toolsets: newToolsetStore(),

		registry:      newRegistryIndex(),
		registryBuild: registryBuilder{prefix: opts.RegistryNamePrefix, base: opts.ResourceMetadata.publicURL()},
	}
	s.index.onChange = m.setIndexSize
	m.setIndexSize(0, 0, 0)
	s.handler = s.withDeadlines(s.routes())
	if opts.Auth == AuthNone {
		s.log.Info("WARNING: catalogue authentication is disabled (--catalog-auth=none): every caller sees every namespace; use it with switchboard dev only")
	}
	return s, nil
}

// withDeadlines gives each request of the catalogue's own routes its read and write
// deadline. net/http clears them on the connection once the request is done, so they do
// not reach a gateway request that follows on the same keep-alive connection of the
// listener both are served on.
func (s *Server) withDeadlines(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		now := time.Now()
		// Only a ResponseWriter of net/http's own supports deadlines; there is no
		// connection to bound otherwise.
		_ = rc.SetReadDeadline(now.Add(s.opts.requestReadTimeout))
		_ = rc.SetWriteDeadline(now.Add(s.opts.requestWriteTimeout))
		h.ServeHTTP(w, r)
	})
}

// eventHandler keeps the index in step with the informer.
func (s *Server) eventHandler() toolscache.ResourceEventHandler {
	return objectevents.Handler(
		func(o *mcpv1alpha1.MCPServer) { s.index.upsert(newServerEntry(o)) },
		func(o *mcpv1alpha1.MCPServer) { s.index.delete(serverKey{namespace: o.Namespace, name: o.Name}) })
}

// Authenticator returns the catalogue's token authenticator, for the gateway to share
// (one cache and one review budget for every agent-facing endpoint of the manager). It
// is nil when the catalogue runs with AuthNone.
func (s *Server) Authenticator() *identity.Authenticator {
	if s.opts.Auth == AuthNone {
		return nil
	}
	return s.gate.authn
}

// Handler returns the catalogue's HTTP handler: REST under /api/v1, MCP at /mcp, each
// request with its own read and write deadline.
func (s *Server) Handler() http.Handler {
	return s.handler
}

// ReadyCheck fails until the catalogue's index has seen every MCPServer the informer
// listed at start. Its signature is healthz.Checker's.
func (s *Server) ReadyCheck(_ *http.Request) error {
	if !s.synced() {
		return errors.New("the catalogue's index has not synced yet")
	}
	return nil
}
