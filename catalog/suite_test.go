package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/internal/frontdoor"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

var (
	envOnce   sync.Once
	envErr    error
	env       *testenv.Environment
	k8sClient client.Client
	clientset kubernetes.Interface
)

// requireEnv starts the control plane on first use, once for the whole test binary;
// TestMain stops it. Unit tests and fuzz targets never start it.
func requireEnv(tb testing.TB) {
	tb.Helper()
	envOnce.Do(func() {
		env, envErr = testenv.Start()
		if envErr != nil {
			return
		}
		k8sClient, envErr = client.New(env.Config, client.Options{Scheme: testenv.Scheme()})
		if envErr == nil {
			clientset, envErr = kubernetes.NewForConfig(env.Config)
		}
	})
	if envErr != nil {
		tb.Fatalf("starting the control plane: %v", envErr)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	os.Exit(code)
}

// running is one catalogue served by its own manager on a loopback port.
type running struct {
	srv      *catalog.Server
	base     string
	registry *prometheus.Registry
}

// startCatalog runs a manager with only the catalogue in it, served on a loopback port
// by the front door as cmd/switchboard does, until the test ends.
func startCatalog(tb testing.TB, mode catalog.AuthMode, configure ...func(*catalog.Options)) *running {
	tb.Helper()
	requireEnv(tb)
	return serveCatalog(tb, env.Config, mode, nil, configure...)
}

// startCatalogBeside is startCatalog with gateway mounted beside the catalogue on the same
// listener, as the manager mounts its gateway.
func startCatalogBeside(tb testing.TB, mode catalog.AuthMode, gateway http.Handler, configure ...func(*catalog.Options)) *running {
	tb.Helper()
	requireEnv(tb)
	return serveCatalog(tb, env.Config, mode, gateway, configure...)
}

// startCatalogOn is startCatalog with the manager connecting to the API server through
// cfg, such as a copy of env.Config whose transport watches the catalogue's reviews.
func startCatalogOn(tb testing.TB, cfg *rest.Config, mode catalog.AuthMode, configure ...func(*catalog.Options)) *running {
	tb.Helper()
	requireEnv(tb)
	return serveCatalog(tb, cfg, mode, nil, configure...)
}

func serveCatalog(tb testing.TB, cfg *rest.Config, mode catalog.AuthMode, gateway http.Handler, configure ...func(*catalog.Options)) *running {
	tb.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testenv.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		tb.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts := catalog.Options{
		Auth:       mode,
		Registerer: reg,
		Logger:     logr.Discard(),
	}
	for _, fn := range configure {
		fn(&opts)
	}
	srv, err := catalog.New(mgr, opts)
	if err != nil {
		tb.Fatal(err)
	}
	door, err := frontdoor.New(frontdoor.Options{Address: "127.0.0.1:0", Catalogue: srv.Handler(), Gateway: gateway})
	if err != nil {
		tb.Fatal(err)
	}
	if err := mgr.Add(door); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("manager stopped with an error: %v", err)
			}
		case <-time.After(30 * time.Second):
			tb.Error("manager did not stop within 30s")
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for door.Addr() == nil || srv.ReadyCheck(nil) != nil {
		if time.Now().After(deadline) {
			tb.Fatal("catalogue did not start within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &running{srv: srv, base: "http://" + door.Addr().String(), registry: reg}
}

// newNamespace creates a namespace for one test.
func newNamespace(tb testing.TB) string {
	tb.Helper()
	requireEnv(tb)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "catalog-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		tb.Fatal(err)
	}
	return ns.Name
}

// serverSpec describes a test MCPServer and the status the controller would write.
type serverSpec struct {
	name        string
	labels      map[string]string
	description string
	transport   mcpv1alpha1.Transport
	notReady    bool
	tools       []mcpv1alpha1.ToolInfo
	resources   []mcpv1alpha1.ResourceInfo
	prompts     []mcpv1alpha1.PromptInfo
	// conditions, when set, replace the Ready condition createServer writes by default.
	conditions []metav1.Condition
	// mutate changes the object before it is created.
	mutate func(*mcpv1alpha1.MCPServer)
}

func tool(name, title, description string) mcpv1alpha1.ToolInfo {
	return mcpv1alpha1.ToolInfo{Name: name, Title: title, Description: description}
}

// createServer creates an MCPServer and writes its status through the status
// subresource, as the controller does.
func createServer(tb testing.TB, ns string, s serverSpec) *mcpv1alpha1.MCPServer {
	tb.Helper()
	ctx := context.Background()
	obj := &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.name, Labels: s.labels},
		Spec: mcpv1alpha1.MCPServerSpec{
			Description: s.description,
			HTTP:        &mcpv1alpha1.HTTPServerSpec{URL: "https://" + s.name + ".example.com/mcp"},
		},
	}
	if s.mutate != nil {
		s.mutate(obj)
	}
	if err := k8sClient.Create(ctx, obj); err != nil {
		tb.Fatalf("creating %s/%s: %v", ns, s.name, err)
	}
	transport := s.transport
	if transport == "" {
		transport = mcpv1alpha1.TransportStreamableHTTP
	}
	ready := metav1.ConditionTrue
	reason := mcpv1alpha1.ReasonSucceeded
	if s.notReady {
		ready, reason = metav1.ConditionFalse, mcpv1alpha1.ReasonConnecting
	}
	obj.Status = mcpv1alpha1.MCPServerStatus{
		ObservedGeneration: obj.Generation,
		Conditions: []metav1.Condition{{
			Type: mcpv1alpha1.ConditionReady, Status: ready, Reason: reason, Message: "Test",
			LastTransitionTime: metav1.Now(), ObservedGeneration: obj.Generation,
		}},
		Transport:       transport,
		Endpoint:        "https://" + s.name + ".example.com/mcp",
		ProtocolVersion: "2025-11-25",
		ServerInfo:      &mcpv1alpha1.ServerInfo{Name: s.name + "-impl", Version: "1.0.0"},
		Capabilities:    &mcpv1alpha1.ServerCapabilities{Tools: true},
		Tools:           s.tools,
		ToolCount:       int32(len(s.tools)),
		Resources:       s.resources,
		ResourceCount:   int32(len(s.resources)),
		Prompts:         s.prompts,
		PromptCount:     int32(len(s.prompts)),
	}
	if s.conditions != nil {
		obj.Status.Conditions = s.conditions
	}
	if err := k8sClient.Status().Update(ctx, obj); err != nil {
		tb.Fatalf("writing status of %s/%s: %v", ns, s.name, err)
	}
	return obj
}

// newCaller creates a ServiceAccount in ns, lets it list mcpservers there when
// canList, and returns a token for it from the TokenRequest API.
func newCaller(tb testing.TB, ns, name string, canList bool) string {
	tb.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := k8sClient.Create(ctx, sa); err != nil {
		tb.Fatal(err)
	}
	if canList {
		grantList(tb, ns, ns, name)
	}
	tr, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return tr.Status.Token
}

// grantList lets the ServiceAccount saNamespace/saName list mcpservers in ns, and waits
// until the API server's authorizer says so.
func grantList(tb testing.TB, ns, saNamespace, saName string) {
	tb.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: saNamespace + "-" + saName + "-mcpserver-reader"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{mcpv1alpha1.GroupVersion.Group},
			Resources: []string{"mcpservers"},
			Verbs:     []string{"get", "list", "watch"},
		}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: saName}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			tb.Fatal(err)
		}
	}
	// RBAC reaches the authorizer through its own informer; wait for it so the
	// catalogue does not cache an early denial.
	user := "system:serviceaccount:" + saNamespace + ":" + saName
	deadline := time.Now().Add(10 * time.Second)
	for {
		sar, err := clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   user,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + saNamespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Verb: "list", Group: mcpv1alpha1.GroupVersion.Group, Resource: "mcpservers",
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		if sar.Status.Allowed {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("RBAC for %s not effective within 10s", user)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// response is one HTTP exchange with the catalogue.
type response struct {
	code   int
	header http.Header
	body   []byte
}

// get requests path (with query) from the catalogue with an optional bearer token and
// extra headers ("Name: value").
func (r *running) get(tb testing.TB, token, path string, headers ...string) response {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ": ")
		req.Header.Set(name, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		tb.Fatal(err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: body}
}

// getJSON requests path, expects 200 and decodes the body into out.
func (r *running) getJSON(tb testing.TB, token, path string, out any) {
	tb.Helper()
	resp := r.get(tb, token, path)
	if resp.code != http.StatusOK {
		tb.Fatalf("GET %s: %d %s", path, resp.code, resp.body)
	}
	if err := json.Unmarshal(resp.body, out); err != nil {
		tb.Fatalf("GET %s: decoding %s: %v", path, resp.body, err)
	}
}

// expectError requests path and expects a JSON error with the given code.
func (r *running) expectError(tb testing.TB, token, path string, code int) {
	tb.Helper()
	resp := r.get(tb, token, path)
	var e catalog.Error
	if err := json.Unmarshal(resp.body, &e); err != nil || resp.code != code || e.Code != code || e.Message == "" {
		tb.Fatalf("GET %s: got %d %s, want a JSON error with code %d", path, resp.code, resp.body, code)
	}
	if ct := resp.header.Get("Content-Type"); ct != "application/json" {
		tb.Fatalf("GET %s: error content type %q", path, ct)
	}
}

func serverNames(l catalog.ServerList) []string {
	var out []string
	for _, s := range l.Items {
		out = append(out, s.Namespace+"/"+s.Name)
	}
	return out
}

func toolNames(l catalog.ToolList) []string {
	var out []string
	for _, t := range l.Items {
		out = append(out, t.Server.Namespace+"/"+t.Server.Name+"/"+t.Name)
	}
	return out
}

// waitTimeout bounds every wait of these tests.
const waitTimeout = 10 * time.Second

// bearerTransport adds a bearer token to every request.
type bearerTransport struct {
	token string
}

func (b bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// mcpSession connects a go-sdk client to the catalogue's MCP endpoint, at the newest
// protocol version both speak.
func mcpSession(tb testing.TB, c *running, token string) *mcp.ClientSession {
	tb.Helper()
	return mcpSessionAt(tb, c, token, "")
}

// mcpSessionAt is mcpSession for a client that asks for protocol version (the newest
// when empty), and fails unless the catalogue settles on it.
func mcpSessionAt(tb testing.TB, c *running, token, version string) *mcp.ClientSession {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "catalog-test", Version: "v1"}, nil)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:             c.base + "/mcp",
		HTTPClient:           &http.Client{Transport: bearerTransport{token: token}, Timeout: 10 * time.Second},
		DisableStandaloneSSE: true,
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		tb.Fatalf("connecting to the catalogue over MCP: %v", err)
	}
	tb.Cleanup(func() { _ = session.Close() })
	if got := session.InitializeResult().ProtocolVersion; version != "" && got != version {
		tb.Fatalf("the catalogue settled on protocol version %q, want %q", got, version)
	}
	return session
}

// callTool calls an MCP tool and decodes its structured output into out.
func callTool(tb testing.TB, session *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		tb.Fatalf("calling %s: %v", name, err)
	}
	if out != nil && !res.IsError {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			tb.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			tb.Fatalf("decoding %s output %s: %v", name, b, err)
		}
	}
	return res
}

// mcpStatus posts an MCP initialize request with an optional bearer token and returns
// the HTTP status code.
func mcpStatus(tb testing.TB, c *running, token string) int {
	tb.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/mcp", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := bearerTransport{token: token}.RoundTrip(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// waitServers waits until the catalogue lists exactly n servers in ns, each with the
// status createServer wrote (the informer delivers creation and status separately).
func (r *running) waitServers(tb testing.TB, token, ns string, n int) {
	tb.Helper()
	var l catalog.ServerList
	testutil.Eventually(tb, waitTimeout, fmt.Sprintf("%d servers with status in %s", n, ns), func() error {
		l = catalog.ServerList{}
		r.getJSON(tb, token, "/api/v1/servers?limit=500&namespace="+ns, &l)
		for _, s := range l.Items {
			if s.Endpoint == "" {
				return fmt.Errorf("%s has no status yet", s.Name)
			}
		}
		if len(l.Items) != n {
			return fmt.Errorf("have %q", serverNames(l))
		}
		return nil
	})
}
