package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/controllers"
	"github.com/switchboard-mcp/switchboard/egress"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/frontdoor"
	"github.com/switchboard-mcp/switchboard/internal/sharding"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// leaderElectionID names the Lease that manager replicas compete for.
const leaderElectionID = "switchboard.mcp.switchboard.dev"

// shardGroup names the replicas that share the servers; their member Leases are
// "switchboard-shard-<identity>".
const shardGroup = "switchboard-shard"

// The metrics endpoint's authentication and authorization filter reviews every scraper's
// token and access.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// The gateway enforces the MCPAccessPolicies its informer holds.
// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpaccesspolicies,verbs=get;list;watch

// managerOptions are the manager subcommand's flags.
type managerOptions struct {
	metricsAddr string
	// metricsSecure serves metrics over HTTPS to authenticated and authorized scrapers
	// only; false serves plain HTTP to anyone, for `switchboard dev`.
	metricsSecure  bool
	metricsCertDir string

	probeAddr        string
	pprofAddr        string
	leaderElect      bool
	leaderElectionNS string
	zap              zap.Options
	// auditLog is the gateway's audit log, never sampled (see auditLogger); unset, the
	// manager's own logger.
	auditLog logr.Logger

	maxConcurrentReconciles int
	maxConcurrentConnects   int
	discoveryMemoryBudget   int64
	defaultProbeInterval    time.Duration
	defaultEgress           string
	deniedCIDRs             []string

	stdioRuntime      string
	bridgeImage       string
	bridgeDelivery    string
	bridgeImageBinary string
	operatorNamespace string

	// clusterResourceNamespace holds the Secrets of cluster-scoped objects; empty means
	// operatorNamespace (see resourceNamespace).
	clusterResourceNamespace string
	// identityProviders verifies the tokens of MCPIdentityProviders for the catalogue and
	// the gateway; the MCPIdentityProvider controller applies every provider to it. Nil
	// registers no such controller and caches nothing for it.
	identityProviders *identity.Providers

	catalogAddr        string
	catalogAuth        string
	catalogSATokenOnly bool

	// gatewayPublicURL is the base URL clients reach the catalogue's address at; empty
	// publishes no protected resource metadata.
	gatewayPublicURL string
	// registryNamePrefix is the reverse-DNS part of the names the catalogue's MCP
	// Registry API gives.
	registryNamePrefix string
	// gatewayScopes are the scopes_supported of the protected resource metadata.
	gatewayScopes []string
	// gatewayAudiences are the audiences a Kubernetes token must be issued for to be
	// accepted at the catalogue and the gateway; empty accepts the API server's own.
	gatewayAudiences []string

	gatewayMaxSessions             int
	gatewayMaxSessionsPerCaller    int
	gatewayMaxSessionsPerNamespace int
	gatewaySessionRatePerCaller    float64
	gatewaySessionBurstPerCaller   int
	gatewayIdleTimeout             time.Duration

	gatewayMaxListenStreams          int
	gatewayMaxListenStreamsPerCaller int
	gatewayMaxInflightPerCaller      int
	gatewayApprovalKeySecret         string
	userGrantsKeySecret              string

	watchNamespaces []string

	sharding           string
	shardIdentity      string
	shardNamespace     string
	shardLeaseDuration time.Duration

	// tracingSamplingRatio is --tracing-sampling-ratio; negative leaves sampling to
	// OTEL_TRACES_SAMPLER.
	tracingSamplingRatio float64
}

// Sharding modes (--sharding).
const (
	shardingNone   = "none"
	shardingLeases = "leases"
)

func (o *managerOptions) bind(fs *flag.FlagSet) {
	fs.Float64Var(&o.tracingSamplingRatio, "tracing-sampling-ratio", -1,
		"Fraction (0 to 1) of the traces the manager starts that it samples; a caller's sampled flag is followed (parentbased_traceidratio). Negative leaves it to OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (parentbased_always_on when unset). Traces are exported only when an OTLP exporter is configured (OTEL_EXPORTER_OTLP_ENDPOINT, see docs/observability-traces.md).")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443",
		"Address the Prometheus metrics endpoint binds to; 0 disables it.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS to scrapers whose bearer token passes a TokenReview and who may get the /metrics URL (SubjectAccessReview); false serves plain HTTP without authentication.")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", "",
		"Folder holding tls.crt and tls.key for the metrics endpoint; empty uses a self-signed certificate.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081",
		"Address the /healthz and /readyz endpoints bind to.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "",
		"Address net/http/pprof binds to, for heap and goroutine profiles; empty disables it. Bind it to loopback only: profiles show memory contents.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Elect a leader among manager replicas so that exactly one reconciles at a time.")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", "",
		"Namespace of the leader election Lease; defaults to the manager's own namespace.")
	fs.IntVar(&o.maxConcurrentReconciles, "max-concurrent-reconciles", 8,
		"How many MCPServers are reconciled in parallel. Reconciles never wait on the network.")
	fs.IntVar(&o.maxConcurrentConnects, "max-concurrent-connects", 16,
		"How many MCP session handshakes run at once; a hung server holds one slot for at most its timeout.")
	o.discoveryMemoryBudget = connector.DefaultDiscoveryMemoryBudget
	fs.Func("discovery-memory-budget",
		"Heap that discovered tools, resources and prompts may occupy across all servers, as a quantity such as 256Mi; one namespace may use a quarter of it. Default 256Mi.",
		func(v string) error {
			q, err := resource.ParseQuantity(v)
			if err != nil || q.Value() <= 0 {
				return fmt.Errorf("%q is not a positive quantity of bytes such as 256Mi", v)
			}
			o.discoveryMemoryBudget = q.Value()
			return nil
		})
	fs.DurationVar(&o.defaultProbeInterval, "default-probe-interval", 30*time.Second,
		"Health probe interval of servers that set no spec.healthCheck.interval.")
	fs.StringVar(&o.defaultEgress, "default-egress", string(egress.PosturePublic),
		"Egress posture of servers no MCPEgressPolicy selects: public (public addresses only), all, or none.")
	fs.Func("denied-cidrs",
		"Comma-separated CIDRs the public posture also denies, such as the cluster's service and pod ranges.",
		func(v string) error {
			o.deniedCIDRs = append(o.deniedCIDRs, strings.Split(v, ",")...)
			return nil
		})
	fs.StringVar(&o.stdioRuntime, "stdio-runtime", "pod",
		"How stdio servers run: pod (a Deployment per server, in a cluster) or local (a bridge process per server on loopback, for development).")
	fs.StringVar(&o.bridgeImage, "bridge-image", os.Getenv("SWITCHBOARD_IMAGE"),
		"Image holding the switchboard binary that stdio server pods run as their bridge; defaults to $SWITCHBOARD_IMAGE.")
	fs.StringVar(&o.bridgeDelivery, "bridge-delivery", bridgeDeliveryAuto,
		"How the bridge binary gets into stdio server pods: image-volume (the bridge image mounted as an image volume, Kubernetes 1.36 and later), init-container (copied by an init container, about a second slower to start), or auto (image-volume when the API server is 1.36 or later).")
	fs.StringVar(&o.bridgeImageBinary, "bridge-image-binary", "",
		"Path of the switchboard binary inside the bridge image, for image-volume delivery; defaults to the manager's own path, as the bridge image is the manager's.")
	fs.StringVar(&o.operatorNamespace, "operator-namespace", os.Getenv("POD_NAMESPACE"),
		"Namespace the manager runs in, whose pods may reach stdio server bridges; defaults to $POD_NAMESPACE.")
	fs.StringVar(&o.clusterResourceNamespace, "cluster-resource-namespace", "",
		"Namespace holding the Secrets that cluster-scoped objects (MCPIdentityProviders) reference, as cert-manager's for ClusterIssuers; defaults to --operator-namespace. With --watch-namespaces, the manager also watches Secrets there and needs get, list and watch on them.")
	fs.StringVar(&o.catalogAddr, "catalog-bind-address", frontdoor.DefaultAddress,
		"Address the catalogue (REST under /api/v1, MCP at /mcp) listens on; 0 disables it.")
	fs.StringVar(&o.catalogAuth, "catalog-auth", string(catalog.AuthTokenReview),
		"How catalogue callers are authenticated: tokenreview, or none (for switchboard dev only).")
	fs.BoolVar(&o.catalogSATokenOnly, "catalog-service-account-tokens-only", false,
		"Accept only ServiceAccount tokens of the cluster (checked against its issuer keys) at the catalogue and the gateway; other tokens get 401 without a TokenReview.")
	fs.StringVar(&o.gatewayPublicURL, "gateway-public-url", "",
		"Public base URL clients reach the catalogue and the gateway at (https://mcp.example.com). With it, /mcp and every gateway endpoint publish OAuth protected resource metadata (RFC 9728) under /.well-known/oauth-protected-resource<endpoint path>, naming the advertised MCPIdentityProviders, and their 401 answers point to it; without it no metadata is served.")
	fs.StringVar(&o.registryNamePrefix, "registry-name-prefix", catalog.DefaultRegistryNamePrefix,
		"Reverse-DNS part of the server names the catalogue's MCP Registry API (/v0.1/servers) gives: an MCPServer is <prefix>/<namespace>.<name>, an MCPToolset <prefix>/<namespace>.toolset_<name>. Use a domain your organisation owns and one value per cluster, such as com.example.prod. The entries' remotes are the gateway's endpoints under --gateway-public-url; without it they have none.")
	o.gatewayScopes = slices.Clone(catalog.DefaultResourceScopes)
	fs.Func("gateway-scopes",
		"Comma-separated scopes the protected resource metadata lists in scopes_supported, which MCP clients ask their identity provider for; default openid,email,profile. Access is decided by RBAC, not by scopes.",
		func(v string) error {
			o.gatewayScopes = nil
			for _, sc := range strings.Split(v, ",") {
				if sc = strings.TrimSpace(sc); sc != "" {
					o.gatewayScopes = append(o.gatewayScopes, sc)
				}
			}
			return nil
		})
	fs.Func("gateway-audiences",
		"Comma-separated audiences a Kubernetes token must be issued for to be accepted at the catalogue and the gateway (TokenReview spec.audiences), such as switchboard: agents then present a projected ServiceAccount token minted for Switchboard, which the API server itself refuses, so no token a caller gives the gateway can be replayed at the API server. Empty accepts tokens for the API server's own audiences.",
		func(v string) error {
			audiences, err := parseAudiences(v)
			o.gatewayAudiences = audiences
			return err
		})
	fs.IntVar(&o.gatewayMaxSessions, "gateway-max-sessions", gateway.DefaultMaxSessions,
		"Gateway sessions this replica holds at most, the upstream sessions that serve sessionless clients of servers with sessions among them; a new session beyond it is answered 503.")
	fs.IntVar(&o.gatewayMaxSessionsPerCaller, "gateway-max-sessions-per-caller", gateway.DefaultMaxSessionsPerCaller,
		"Gateway sessions, of servers and toolsets together, one caller holds on this replica at most; its next session is answered 503.")
	fs.IntVar(&o.gatewayMaxSessionsPerNamespace, "gateway-max-sessions-per-namespace", 0,
		"Gateway sessions the servers and toolsets of one namespace hold on this replica at most, whoever calls them; a new one beyond it is answered 503. 0 means a quarter of --gateway-max-sessions, so that no tenant takes the whole replica.")
	fs.Float64Var(&o.gatewaySessionRatePerCaller, "gateway-session-rate-per-caller", gateway.DefaultSessionRatePerCaller,
		"Gateway sessions per second one caller may start, after a burst of --gateway-session-burst-per-caller; a session beyond it is answered 429 with Retry-After.")
	fs.IntVar(&o.gatewaySessionBurstPerCaller, "gateway-session-burst-per-caller", gateway.DefaultSessionBurstPerCaller,
		"Gateway sessions one caller may start at once before --gateway-session-rate-per-caller applies.")
	fs.DurationVar(&o.gatewayIdleTimeout, "gateway-idle-timeout", gateway.DefaultIdleTimeout,
		"A gateway session that saw no request for this long is ended, with its upstream session.")
	fs.IntVar(&o.gatewayMaxListenStreams, "gateway-max-listen-streams", gateway.DefaultMaxListenStreams,
		"subscriptions/listen streams of sessionless clients this replica holds open at most, of servers and toolsets together; a new one beyond it is answered 503 with Retry-After.")
	fs.IntVar(&o.gatewayMaxListenStreamsPerCaller, "gateway-max-listen-streams-per-caller", gateway.DefaultMaxListenStreamsPerCaller,
		"subscriptions/listen streams one caller holds open on this replica at most; its next one is answered 429 with Retry-After.")
	fs.IntVar(&o.gatewayMaxInflightPerCaller, "gateway-max-inflight-per-caller", gateway.DefaultMaxInflightPerCaller,
		"Sessionless requests (2026-07-28) of one caller this replica serves at once, listen streams aside; one more is answered 429 with Retry-After, so that no caller takes another's share of a server or a bridge.")
	fs.StringVar(&o.gatewayApprovalKeySecret, "gateway-approval-key-secret", "",
		"NAMESPACE/NAME of the Secret whose key "+approvalKeyField+" (at least 32 bytes) every replica signs and checks the approvals it asks 2026-07-28 clients for (RequireApproval) with; empty makes a key per replica, and an approval then holds only on the replica that asked.")
	fs.StringVar(&o.userGrantsKeySecret, "user-grants-key-secret", "",
		"NAMESPACE/NAME of the Secret whose keys (each data key a key id, the value 32 bytes; the id that sorts last seals, every one opens) seal persons' grants of perUser servers, which are kept as Secrets in that namespace; empty refuses every perUser server. Needs --gateway-public-url.")
	fs.Func("watch-namespaces",
		"Comma-separated namespaces whose objects the manager watches and reconciles; empty watches every namespace. Its RBAC may then be Roles in those namespaces.",
		func(v string) error {
			for _, ns := range strings.Split(v, ",") {
				ns = strings.TrimSpace(ns)
				if ns == "" {
					continue
				}
				if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
					return fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
				}
				o.watchNamespaces = append(o.watchNamespaces, ns)
			}
			return nil
		})
	fs.StringVar(&o.sharding, "sharding", shardingNone,
		"How replicas share the MCPServers: none (the elected leader, or the only replica, owns every server) or leases (every replica holds a Lease in --shard-namespace and owns the servers a rendezvous hash of namespace/name gives it; the others' gateways stand by).")
	fs.StringVar(&o.shardIdentity, "shard-identity", os.Getenv("POD_NAME"),
		"This replica's name among the shard members, unique among them; defaults to $POD_NAME, then the host name.")
	fs.StringVar(&o.shardNamespace, "shard-namespace", "",
		"Namespace of the shard member Leases; defaults to --leader-election-namespace, then $POD_NAMESPACE.")
	fs.DurationVar(&o.shardLeaseDuration, "shard-lease-duration", 15*time.Second,
		"How long a replica that stopped renewing its Lease (killed, cut off) keeps its servers before the others take them over.")
	// --kubeconfig; without it the in-cluster config or $KUBECONFIG is used.
	config.RegisterFlags(fs)
	// Structured JSON logs unless --zap-devel asks for human-readable ones.
	o.zap.BindFlags(fs)
}

// egressDefaults parses --default-egress and --denied-cidrs.
// maxGatewayAudiences bounds --gateway-audiences, as MCPIdentityProvider bounds its
// issuer's audiences.
const maxGatewayAudiences = 16

// parseAudiences reads --gateway-audiences: comma-separated, blanks dropped, each a
// printable token of at most 2048 bytes, at most maxGatewayAudiences, none twice.
func parseAudiences(v string) ([]string, error) {
	var out []string
	for _, aud := range strings.Split(v, ",") {
		aud = strings.TrimSpace(aud)
		switch {
		case aud == "":
			continue
		case len(aud) > 2048:
			return nil, fmt.Errorf("an audience is longer than 2048 bytes")
		case strings.ContainsFunc(aud, func(r rune) bool { return r <= ' ' || r == 0x7f || r == utf8.RuneError }):
			return nil, fmt.Errorf("audience %q holds a space or control character", aud)
		case slices.Contains(out, aud):
			return nil, fmt.Errorf("audience %q is named twice", aud)
		}
		out = append(out, aud)
	}
	if len(out) > maxGatewayAudiences {
		return nil, fmt.Errorf("%d audiences named; at most %d", len(out), maxGatewayAudiences)
	}
	return out, nil
}

func (o *managerOptions) egressDefaults() (egress.Defaults, error) {
	posture, err := egress.ParseDefaultPosture(o.defaultEgress)
	if err != nil {
		return egress.Defaults{}, fmt.Errorf("--default-egress: %w", err)
	}
	defaults := egress.Defaults{Posture: posture}
	for _, c := range o.deniedCIDRs {
		prefix, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return egress.Defaults{}, fmt.Errorf("--denied-cidrs: %w", err)
		}
		defaults.ClusterCIDRs = append(defaults.ClusterCIDRs, prefix)
	}
	return defaults, defaults.Validate()
}

// metricsOptions returns how the metrics endpoint is served: by default over HTTPS behind
// controller-runtime's authentication and authorization filter, which admits a scraper
// only when a TokenReview accepts its bearer token and a SubjectAccessReview allows it
// `get` on the non-resource URL /metrics; with --metrics-secure=false over plain HTTP.
func (o *managerOptions) metricsOptions() metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.metricsAddr}
	if !o.metricsSecure {
		return opts
	}
	opts.SecureServing = true
	opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	opts.CertDir = o.metricsCertDir
	// HTTP/1.1 only, as kubebuilder scaffolds it: HTTP/2 stream resets and rapid resets
	// (CVE-2023-44487, CVE-2023-39325) cost the server more than they cost a client.
	opts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	return opts
}

// newStdioRuntime returns the runtime --stdio-runtime names.
func (o *managerOptions) newStdioRuntime(mgr ctrl.Manager) (controllers.StdioRuntime, error) {
	switch o.stdioRuntime {
	case "pod":
		if o.bridgeImage == "" {
			// http servers need no bridge; stdio servers are then rejected with a
			// condition that says what to set.
			ctrl.Log.WithName("manager").Info("No --bridge-image: stdio servers will not run")
			return nil, nil
		}
		clients, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return nil, fmt.Errorf("creating the pods/log client: %w", err)
		}
		binary, err := o.bridgeBinaryInImage(clients.Discovery())
		if err != nil {
			return nil, err
		}
		return &controllers.PodRuntime{
			Client:            mgr.GetClient(),
			Scheme:            mgr.GetScheme(),
			BridgeImage:       o.bridgeImage,
			BridgeImageBinary: binary,
			OperatorNamespace: o.operatorNamespace,
			// The log tail of a server container that exited, for its status.
			Logs: controllers.PodLogs{Client: clients.CoreV1()},
		}, nil
	case "local":
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("locating the switchboard binary for local bridges: %w", err)
		}
		local := &controllers.LocalRuntime{Binary: self, Reader: mgr.GetAPIReader(), Logger: ctrl.Log.WithName("stdio-local")}
		return local, mgr.Add(local)
	default:
		return nil, fmt.Errorf("--stdio-runtime must be pod or local, not %q", o.stdioRuntime)
	}
}

// resourceNamespace is the namespace of the Secrets of cluster-scoped objects:
// --cluster-resource-namespace, or else the manager's own.
func (o *managerOptions) resourceNamespace() string {
	if o.clusterResourceNamespace != "" {
		return o.clusterResourceNamespace
	}
	return o.operatorNamespace
}

// cacheOptions returns the manager's cache options: the stdio workload kinds limited to
// the operator's own objects and, with --watch-namespaces, every kind limited to those
// namespaces, except Secrets (metadata only), which are also watched in the cluster
// resource namespace when MCPIdentityProviders are reconciled. Cached objects keep no
// managedFields: nothing reads them from the cache, and for a server-side applied object
// they are a copy of the spec's field set, per object, for as long as the object lives.
func (o *managerOptions) cacheOptions() cache.Options {
	opts := cache.Options{
		ByObject:         controllers.CacheByObject(),
		DefaultTransform: cache.TransformStripManagedFields(),
	}
	if len(o.watchNamespaces) > 0 {
		opts.DefaultNamespaces = make(map[string]cache.Config, len(o.watchNamespaces))
		for _, ns := range o.watchNamespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
		if ns := o.resourceNamespace(); o.identityProviders != nil && ns != "" && !slices.Contains(o.watchNamespaces, ns) {
			secrets := make(map[string]cache.Config, len(o.watchNamespaces)+1)
			for watched := range opts.DefaultNamespaces {
				secrets[watched] = cache.Config{}
			}
			secrets[ns] = cache.Config{}
			opts.ByObject[&corev1.Secret{}] = cache.ByObject{Namespaces: secrets}
		}
	}
	return opts
}

// newScheme returns the scheme of every kind the manager reads or writes.
func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := mcpv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}

// setupControllers creates the connector pool and registers every controller with the
// manager: adding a controller is one entry in the list.
func setupControllers(mgr ctrl.Manager, opts managerOptions) error {
	egressDefaults, err := opts.egressDefaults()
	if err != nil {
		return err
	}
	users, err := opts.newUserAuthorizations(mgr)
	if err != nil {
		return err
	}
	poolOpts := connector.Options{
		MaxConcurrentConnects: opts.maxConcurrentConnects,
		DiscoveryMemoryBudget: opts.discoveryMemoryBudget,
		Registerer:            metrics.Registry,
		Logger:                ctrl.Log.WithName("connector"),
	}
	users.poolOptions(&poolOpts)
	pool, err := connector.NewPool(poolOpts)
	if err != nil {
		return fmt.Errorf("creating connector pool: %w", err)
	}
	if users != nil {
		users.pool = pool
	}
	if err := mgr.Add(pool); err != nil {
		return err
	}
	stdio, err := opts.newStdioRuntime(mgr)
	if err != nil {
		return err
	}
	servers := &controllers.MCPServerReconciler{
		Client:                  mgr.GetClient(),
		SecretReader:            mgr.GetAPIReader(),
		Recorder:                mgr.GetEventRecorder("switchboard"),
		Pool:                    pool,
		DefaultProbeInterval:    opts.defaultProbeInterval,
		MaxConcurrentReconciles: opts.maxConcurrentReconciles,
		EgressDefaults:          egressDefaults,
		Stdio:                   stdio,
		// The Secrets of MCPIdentityProviders' token exchanges.
		ClusterResourceNamespace: opts.resourceNamespace(),
	}
	if servers.Shards, err = opts.newMembership(mgr); err != nil {
		return err
	}
	setups := []interface{ SetupWithManager(ctrl.Manager) error }{
		servers,
		&controllers.MCPEgressPolicyReconciler{Client: mgr.GetClient()},
		&controllers.MCPToolsetReconciler{Client: mgr.GetClient()},
		&controllers.MCPAccessPolicyReconciler{Client: mgr.GetClient()},
	}
	if opts.identityProviders != nil {
		setups = append(setups, &controllers.MCPIdentityProviderReconciler{
			Client:       mgr.GetClient(),
			SecretReader: mgr.GetAPIReader(),
			Namespace:    opts.resourceNamespace(),
			Providers:    opts.identityProviders,
			Recorder:     mgr.GetEventRecorder("switchboard"),
			Elected:      mgr.Elected(),
		})
	}
	if servers.Shards == nil {
		// After servers, whose setup registers the Secret index it shares. With
		// sharding the servers' reconciler stands by for other replicas' servers itself.
		setups = append(setups, &controllers.FollowerSessionReconciler{Servers: servers, Elected: mgr.Elected()})
	}
	for _, s := range setups {
		if err := s.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up controller %T: %w", s, err)
		}
	}
	return setupCatalog(mgr, opts, pool, users)
}

// resolveSharding fills in the shard identity and namespace their flags leave to
// defaults.
func (o *managerOptions) resolveSharding() error {
	if o.sharding != shardingLeases {
		return nil
	}
	if o.shardIdentity == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--shard-identity is empty and the host name is unknown: %w", err)
		}
		o.shardIdentity = host
	}
	for _, fallback := range []string{o.leaderElectionNS, o.operatorNamespace} {
		if o.shardNamespace == "" {
			o.shardNamespace = fallback
		}
	}
	if o.shardNamespace == "" {
		return errors.New("--sharding=leases needs --shard-namespace, --leader-election-namespace or $POD_NAMESPACE")
	}
	return nil
}

// newMembership returns this replica's shard membership, added to mgr, or nil without
// --sharding=leases.
func (o *managerOptions) newMembership(mgr ctrl.Manager) (*sharding.Membership, error) {
	switch o.sharding {
	case shardingNone, "": // "": switchboard dev, which sets no flags
		return nil, nil
	case shardingLeases:
	default:
		return nil, fmt.Errorf("--sharding must be none or leases, not %q", o.sharding)
	}
	clients, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("creating the shard Lease client: %w", err)
	}
	membership, err := sharding.New(sharding.Options{
		Leases:        clients.CoordinationV1().Leases(o.shardNamespace),
		Group:         shardGroup,
		Identity:      o.shardIdentity,
		LeaseDuration: o.shardLeaseDuration,
		Logger:        ctrl.Log.WithName("shards"),
		Registerer:    metrics.Registry,
	})
	if err != nil {
		return nil, fmt.Errorf("--sharding=leases: %w", err)
	}
	return membership, mgr.Add(membership)
}

// setupCatalog adds the catalogue and the gateway, which every replica serves side by side
// on one listener (--catalog-bind-address): the catalogue from its informer cache, the
// gateway over upstream sessions built from pool's. The two share the catalogue's
// identity.Authenticator and know nothing of each other: what the gateway needs of the
// catalogue (its tool ranking, the resource metadata's challenge) is handed to it here.
func setupCatalog(mgr ctrl.Manager, opts managerOptions, pool *connector.Pool, users *userAuthorizations) error {
	mode, err := catalog.ParseAuthMode(opts.catalogAuth)
	if err != nil {
		return fmt.Errorf("--catalog-auth: %w", err)
	}
	metadata, err := catalog.NewResourceMetadata(opts.gatewayPublicURL, opts.gatewayScopes, opts.identityProviders)
	if err != nil {
		return fmt.Errorf("--gateway-public-url: %w", err)
	}
	cat, err := catalog.New(mgr, catalog.Options{
		ResourceMetadata:   metadata,
		Auth:               mode,
		Logger:             ctrl.Log.WithName("catalog"),
		RegistryNamePrefix: opts.registryNamePrefix,

		ServiceAccountTokensOnly: opts.catalogSATokenOnly,
		IdentityProviders:        opts.identityProviders,
		Audiences:                opts.gatewayAudiences,
	})
	if err != nil {
		return fmt.Errorf("creating the catalogue: %w", err)
	}
	gatewayOpts := gateway.Options{
		Pool:                      pool,
		ResourceMetadata:          metadata,
		NewToolIndex:              catalogToolIndex,
		MaxSessions:               opts.gatewayMaxSessions,
		MaxSessionsPerCaller:      opts.gatewayMaxSessionsPerCaller,
		MaxSessionsPerNamespace:   opts.gatewayMaxSessionsPerNamespace,
		SessionRatePerCaller:      opts.gatewaySessionRatePerCaller,
		SessionBurstPerCaller:     opts.gatewaySessionBurstPerCaller,
		IdleTimeout:               opts.gatewayIdleTimeout,
		MaxListenStreams:          opts.gatewayMaxListenStreams,
		MaxListenStreamsPerCaller: opts.gatewayMaxListenStreamsPerCaller,
		MaxInflightPerCaller:      opts.gatewayMaxInflightPerCaller,
		Registerer:                metrics.Registry,
		Logger:                    ctrl.Log.WithName("gateway"),
		Audit:                     opts.auditRoot().WithName("gateway").WithName("audit"),
	}
	if opts.gatewayApprovalKeySecret != "" {
		if gatewayOpts.ApprovalKey, err = approvalKey(context.Background(), mgr.GetAPIReader(), opts.gatewayApprovalKeySecret); err != nil {
			return err
		}
	} else {
		ctrl.Log.WithName("gateway").Info("No --gateway-approval-key-secret: each replica signs the approvals it asks 2026-07-28 clients for with a key of its own, so a client's answer must reach the replica that asked")
	}
	var authorizations http.Handler
	if users != nil {
		gatewayOpts.Authorizations = users.broker
		authorizations = users.broker.Handler()
	}
	if mode != catalog.AuthNone {
		// An API client of its own, so that the gateway's reviews do not queue behind
		// the manager's other requests.
		access, err := authorizationv1client.NewForConfig(identity.ReviewClientConfig(mgr.GetConfig()))
		if err != nil {
			return fmt.Errorf("creating the gateway's SubjectAccessReview client: %w", err)
		}
		gatewayOpts.Authenticator = cat.Authenticator()
		gatewayOpts.Access = access.SubjectAccessReviews()
	}
	gw, err := gateway.New(gatewayOpts)
	if err != nil {
		return fmt.Errorf("creating the gateway: %w", err)
	}
	informer, err := mgr.GetCache().GetInformer(context.Background(), &mcpv1alpha1.MCPServer{})
	if err != nil {
		return fmt.Errorf("getting the MCPServer informer: %w", err)
	}
	if _, err := informer.AddEventHandler(gw.EventHandler()); err != nil {
		return fmt.Errorf("adding the gateway's MCPServer event handler: %w", err)
	}
	toolsetInformer, err := mgr.GetCache().GetInformer(context.Background(), &mcpv1alpha1.MCPToolset{})
	if err != nil {
		return fmt.Errorf("getting the MCPToolset informer: %w", err)
	}
	if _, err := toolsetInformer.AddEventHandler(gw.ToolsetEventHandler()); err != nil {
		return fmt.Errorf("adding the gateway's MCPToolset event handler: %w", err)
	}
	policyInformer, err := mgr.GetCache().GetInformer(context.Background(), &mcpv1alpha1.MCPAccessPolicy{})
	if err != nil {
		return fmt.Errorf("getting the MCPAccessPolicy informer: %w", err)
	}
	if _, err := policyInformer.AddEventHandler(gw.PolicyEventHandler()); err != nil {
		return fmt.Errorf("adding the gateway's MCPAccessPolicy event handler: %w", err)
	}
	door, err := frontdoor.New(frontdoor.Options{
		Address:   opts.catalogAddr,
		Catalogue: cat.Handler(),
		Gateway:   gw.Handler(),
		Logger:    ctrl.Log.WithName("catalog"),

		Authorizations: authorizations,
	})
	if err != nil {
		return err
	}
	if err := mgr.Add(door); err != nil {
		return err
	}
	if err := mgr.Add(gw); err != nil {
		return err
	}
	// Not ready until the catalogue's index has synced.
	return mgr.AddReadyzCheck("catalog", cat.ReadyCheck)
}

// catalogToolIndex is the catalogue's ranking (catalog.NewToolIndex) as the gateway's
// ToolIndex: a toolset's find_tools ranks its tools as the catalogue's search_tools ranks
// a server's.
func catalogToolIndex(tools []gateway.IndexedTool) gateway.ToolIndex {
	items := make([]catalog.IndexedTool, len(tools))
	for i, t := range tools {
		items[i] = catalog.IndexedTool(t)
	}
	return catalog.NewToolIndex(items)
}

// containerMemoryLimitEnv carries the container's memory limit in bytes, from the
// downward API (resourceFieldRef limits.memory), as config/manager and the chart set it.
const containerMemoryLimitEnv = "SWITCHBOARD_MEMORY_LIMIT"

// memoryLimitFromContainer returns the Go memory limit for a container memory limit in
// $SWITCHBOARD_MEMORY_LIMIT: 90% of it, so that the garbage collector works harder as the
// heap nears the limit (a burst of reconnects, a large discovery) instead of the kernel
// killing the manager, with a tenth left for what is not Go heap. False when the limit is
// unset or GOMEMLIMIT, which the runtime reads itself, is set.
func memoryLimitFromContainer(getenv func(string) string) (int64, bool) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, false
	}
	limit, err := strconv.ParseInt(getenv(containerMemoryLimitEnv), 10, 64)
	if err != nil || limit <= 0 {
		return 0, false
	}
	return limit / 10 * 9, true
}

func runManager(args []string) int {
	var opts managerOptions
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	opts.bind(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts.zap)))
	opts.auditLog = auditLogger(opts.zap)
	opts.identityProviders = identity.NewProviders(identity.Options{})
	log := ctrl.Log.WithName("manager")
	if limit, ok := memoryLimitFromContainer(os.Getenv); ok {
		debug.SetMemoryLimit(limit)
		log.Info("Go memory limit set from the container's", "bytes", limit)
	}

	ctx := ctrl.SetupSignalHandler()
	provider, err := tracing.Setup(ctx, tracing.Options{ServiceName: "switchboard-manager", SamplingRatio: opts.tracingSamplingRatio})
	if err != nil {
		log.Error(err, "Invalid tracing configuration")
		return 2
	}
	if provider != nil {
		log.Info("Exporting traces by OTLP")
	}
	defer shutdownTracing(log, provider)
	if err := startManager(ctx, nil, opts); err != nil {
		log.Error(err, "Manager stopped with an error")
		return 1
	}
	log.Info("Manager stopped")
	return 0
}

// shutdownTracing sends the spans still batched, within a few seconds.
func shutdownTracing(log logr.Logger, provider *tracing.Provider) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := provider.Shutdown(ctx); err != nil {
		log.Error(err, "Could not send the last spans")
	}
}

// startManager builds the manager, registers every controller and runs until ctx ends,
// then shuts down gracefully. A nil cfg means the --kubeconfig flag, $KUBECONFIG or the
// in-cluster config.
func startManager(ctx context.Context, cfg *rest.Config, opts managerOptions) error {
	scheme, err := newScheme()
	if err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	if cfg == nil {
		if cfg, err = ctrl.GetConfig(); err != nil {
			return fmt.Errorf("loading kubeconfig: %w", err)
		}
	}
	if err := opts.resolveSharding(); err != nil {
		return err
	}
	if opts.sharding == shardingLeases {
		// Each replica writes as a field manager of its own (the user agent up to its
		// first slash), so the managedFields of a server's status say which replica
		// wrote it.
		cfg = rest.CopyConfig(cfg)
		cfg.UserAgent = "switchboard-" + opts.shardIdentity + "/" + rest.DefaultKubernetesUserAgent()
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   opts.cacheOptions(),
		Metrics:                 opts.metricsOptions(),
		HealthProbeBindAddress:  opts.probeAddr,
		PprofBindAddress:        opts.pprofAddr,
		LeaderElection:          opts.leaderElect,
		LeaderElectionID:        leaderElectionID,
		LeaderElectionNamespace: opts.leaderElectionNS,
		// Hand the Lease over at once on a clean shutdown instead of making the next
		// leader wait for it to expire.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := setupControllers(mgr, opts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	ctrl.Log.WithName("manager").Info("Starting manager", "pid", os.Getpid())
	return mgr.Start(ctx)
}

// auditRoot is the logger the gateway's audit log is named under: auditLog when set,
// otherwise the manager's own (switchboard dev's, which is never sampled).
func (o *managerOptions) auditRoot() logr.Logger {
	if o.auditLog.GetSink() != nil {
		return o.auditLog
	}
	return ctrl.Log
}

// auditLogger returns the logger of the gateway's audit log, configured by the same
// --zap-* flags as the manager's, but never sampled: zap keeps only every 100th repeat
// of a message beyond 100 a second unless debug levels are on, and the audit log is one
// line per tool call. Only its Info lines are written, so enabling the debug levels
// that turn sampling off shows nothing more.
func auditLogger(opts zap.Options) logr.Logger {
	level := uberzap.NewAtomicLevelAt(zapcore.Level(-2))
	opts.Level = &level
	opts.ZapOpts = slices.Clone(opts.ZapOpts)
	return zap.New(zap.UseFlagOptions(&opts))
}
