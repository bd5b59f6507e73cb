package controllers_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/controllers"
	"github.com/switchboard-mcp/switchboard/egress"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

var (
	env       *testenv.Environment
	k8sClient client.Client
)

func TestMain(m *testing.M) {
	// Components that log before a manager hands them its logger (client-go's
	// reflectors) use the global one.
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	os.Exit(testenv.Main(m, &env, &k8sClient))
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// operator is one running manager, watching one test namespace only, so tests running
// one after another never see each other's objects.
type operator struct {
	namespace string
	logs      *syncBuffer
	metrics   *prometheus.Registry
	stop      func()
}

// probeInterval is the manager's default probe interval in tests: servers that set no
// healthCheck are probed this often.
const probeInterval = 300 * time.Millisecond

// newNamespace creates a namespace for one test.
func newNamespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "mcps-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// startOperator runs a manager with the MCPServer controller for namespace, logging
// into a buffer the test can search. It stops at cleanup or when stop is called.
func startOperator(t testing.TB, namespace string, options ...operatorOption) *operator {
	t.Helper()
	return startOperatorWith(t, namespace, env.Config, options...)
}

// startOperatorWith is startOperator with the manager talking to the API server through
// base, for a test that changes how it does.
func startOperatorWith(t testing.TB, namespace string, base *rest.Config, options ...operatorOption) *operator {
	t.Helper()
	logs := &syncBuffer{}
	// Log everything, V(1) and V(2) included, so the leak test searches every line the
	// operator could ever write.
	log := zap.New(zap.WriteTo(logs), zap.Level(zapcore.Level(-2)))
	// As in production (ctrl.GetConfig), no client-side rate limit: the API server's
	// priority and fairness decides.
	cfg := rest.CopyConfig(base)
	cfg.QPS = -1
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testenv.Scheme(),
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{namespace: {}},
			ByObject:          controllers.CacheByObject(),
		},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	registry := prometheus.NewRegistry()
	pool, err := connector.NewPool(connector.Options{
		Registerer:     registry,
		Logger:         log.WithName("connector"),
		InitialBackoff: 100 * time.Millisecond,
		MaxBackoff:     time.Second,
		DebounceDelay:  50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(pool); err != nil {
		t.Fatal(err)
	}
	r := &controllers.MCPServerReconciler{
		Client:                  mgr.GetClient(),
		SecretReader:            mgr.GetAPIReader(),
		Recorder:                mgr.GetEventRecorder("switchboard"),
		Pool:                    pool,
		DefaultProbeInterval:    probeInterval,
		MaxConcurrentReconciles: 4,
		// Test servers listen on loopback, which the default posture denies: allow it
		// explicitly, as the tests of a real cluster would with a policy.
		EgressDefaults: egress.Defaults{Posture: egress.PostureAll},
	}
	for _, o := range options {
		o(r, mgr)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := (&controllers.MCPEgressPolicyReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := (&controllers.MCPToolsetReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := (&controllers.MCPAccessPolicyReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), log))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager stopped with an error: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &operator{namespace: namespace, logs: logs, metrics: registry, stop: stop}
}

// conformanceClient is what a test of an official MCP conformance scenario needs to run
// Switchboard as the scenario's OAuth client: a namespace with a running operator, the
// oauthclient wrapper built, and a kubeconfig for it to write MCPServers with.
type conformanceClient struct {
	namespace string
	op        *operator
	wrapper   string
	// kubeconfig is the path of a kubeconfig of an envtest user in system:masters.
	kubeconfig string
}

// newConformanceClient sets up a conformanceClient whose kubeconfig authenticates as
// user.
func newConformanceClient(t *testing.T, user string) *conformanceClient {
	t.Helper()
	ns := newNamespace(t)
	c := &conformanceClient{
		namespace:  ns,
		op:         startOperator(t, ns),
		wrapper:    testenv.BuildGoBinary(t, "./test/conformance/oauthclient"),
		kubeconfig: filepath.Join(t.TempDir(), "kubeconfig"),
	}
	u, err := env.ControlPlane.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.kubeconfig, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// env is the wrapper's environment for a scenario whose MCPServer is named server.
func (c *conformanceClient) env(server string) []string {
	return []string{"SWITCHBOARD_KUBECONFIG=" + c.kubeconfig, "SWITCHBOARD_NAMESPACE=" + c.namespace, "SWITCHBOARD_SERVER_NAME=" + server}
}

// withCatalog serves the catalogue, without authentication, from the operator's cache;
// *handler is set to its HTTP handler, for a test to call directly.
func withCatalog(t testing.TB, handler *http.Handler) operatorOption {
	return func(_ *controllers.MCPServerReconciler, mgr ctrl.Manager) {
		srv, err := catalog.New(mgr, catalog.Options{
			Auth: catalog.AuthNone, Registerer: prometheus.NewRegistry(),
			Logger: mgr.GetLogger().WithName("catalog"),
		})
		if err != nil {
			t.Fatal(err)
		}
		*handler = srv.Handler()
	}
}

// operatorOption changes the reconciler before it is set up.
type operatorOption func(*controllers.MCPServerReconciler, ctrl.Manager)

// withEgressDefaults sets the default egress posture.
func withEgressDefaults(d egress.Defaults) operatorOption {
	return func(r *controllers.MCPServerReconciler, _ ctrl.Manager) { r.EgressDefaults = d }
}

// withProbeInterval sets the default probe interval.
func withProbeInterval(d time.Duration) operatorOption {
	return func(r *controllers.MCPServerReconciler, _ ctrl.Manager) { r.DefaultProbeInterval = d }
}

// withMaxConcurrentReconciles sets the reconciler's parallelism.
func withMaxConcurrentReconciles(n int) operatorOption {
	return func(r *controllers.MCPServerReconciler, _ ctrl.Manager) { r.MaxConcurrentReconciles = n }
}

// withPodRuntime runs stdio servers as Deployments whose init container copies the
// bridge.
func withPodRuntime() operatorOption {
	return withPodRuntimeBridgeAt("")
}

// withPodRuntimeBridgeAt runs stdio servers as Deployments that mount the bridge image
// as an image volume and run the binary at binary inside it; "" copies it with an init
// container instead.
func withPodRuntimeBridgeAt(binary string) operatorOption {
	return func(r *controllers.MCPServerReconciler, mgr ctrl.Manager) {
		r.Stdio = &controllers.PodRuntime{
			Client:            mgr.GetClient(),
			Scheme:            mgr.GetScheme(),
			BridgeImage:       "ghcr.io/switchboard-mcp/switchboard:test",
			BridgeImageBinary: binary,
			OperatorNamespace: "switchboard-system",
		}
	}
}

// events returns the Events recorded for the named object.
func events(t *testing.T, namespace, name string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := k8sClient.List(context.Background(), &list, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}
