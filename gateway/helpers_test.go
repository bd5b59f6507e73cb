package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/egress"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// Secrets the tests look for where they must never be.
const (
	upstreamSecret = "Bearer upstream-secret-4f1d"
	callerToken    = "caller-token-9a7c"
)

const namespace = "team-a"

// upstreamServer is a go-sdk MCP server over Streamable HTTP that records the headers of
// every request it receives.
type upstreamServer struct {
	*httptest.Server
	mcp *mcp.Server

	mu          sync.Mutex
	headers     []http.Header
	httpMethods []string
	rpcMethods  []string // the JSON-RPC method of every request message received
	redirect    string   // when set, every request is redirected there
}

// calls returns how many requests for method the upstream received.
func (u *upstreamServer) calls(method string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, m := range u.rpcMethods {
		if m == method {
			n++
		}
	}
	return n
}

// redirectTo makes the upstream answer every later request with a 307 to target.
func (u *upstreamServer) redirectTo(target string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.redirect = target
}

// newUpstream starts an upstream with the tools echo, search_notes and delete_all that
// speaks the session era (2025-11-25 and older).
func newUpstream(t testing.TB) *upstreamServer { return newUpstreamOfEra(t, false) }

// newUpstreamOfEra starts the upstream newUpstream does; a stateless one speaks the
// sessionless era (2026-07-28) too, as go-sdk's stateless server does.
func newUpstreamOfEra(t testing.TB, stateless bool) *upstreamServer {
	t.Helper()
	u := &upstreamServer{mcp: mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "1"}, nil)}
	type echoArgs struct {
		Text string `json:"text"`
	}
	mcp.AddTool(u.mcp, &mcp.Tool{Name: "echo", Description: "Echoes text."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	mcp.AddTool(u.mcp, &mcp.Tool{Name: "search_notes", Description: "Searches notes."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "found"}}}, nil, nil
		})
	mcp.AddTool(u.mcp, &mcp.Tool{Name: "delete_all", Description: "Deletes everything."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deleted"}}}, nil, nil
		})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.mcp },
		&mcp.StreamableHTTPOptions{Stateless: stateless})
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.headers = append(u.headers, r.Header.Clone())
		u.httpMethods = append(u.httpMethods, r.Method)
		redirect := u.redirect
		u.mu.Unlock()
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct {
				Method string `json:"method"`
			}
			if json.Unmarshal(body, &msg) == nil && msg.Method != "" {
				u.mu.Lock()
				u.rpcMethods = append(u.rpcMethods, msg.Method)
				u.mu.Unlock()
			}
		}
		if redirect != "" {
			http.Redirect(w, r, redirect, http.StatusTemporaryRedirect)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	// Streams the pools hold open would keep Close waiting: cut them first.
	t.Cleanup(func() {
		u.CloseClientConnections()
		u.Close()
	})
	return u
}

// methods returns the HTTP methods of the requests the upstream received, in order.
func (u *upstreamServer) methods() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.httpMethods...)
}

// seenHeaders returns every value of header name the upstream received.
func (u *upstreamServer) seenHeaders(name string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, h := range u.headers {
		out = append(out, h.Values(name)...)
	}
	return out
}

// loopbackRules allows loopback addresses, as a namespace's MCPEgressPolicy would.
func loopbackRules(t testing.TB) *egress.ServerRules {
	return rules(t, &mcpv1alpha1.MCPEgressPolicySpec{
		Egress: []mcpv1alpha1.EgressRule{{To: []mcpv1alpha1.EgressPeer{{IPBlock: &mcpv1alpha1.IPBlock{CIDR: "127.0.0.0/8"}}}}},
	})
}

// denyAllRules is a policy that selects the server and allows nothing.
func denyAllRules(t testing.TB) *egress.ServerRules {
	return rules(t, &mcpv1alpha1.MCPEgressPolicySpec{})
}

func rules(t testing.TB, spec *mcpv1alpha1.MCPEgressPolicySpec) *egress.ServerRules {
	t.Helper()
	labels := map[string]string{"app": "notes"}
	spec.ServerSelector = metav1.LabelSelector{MatchLabels: labels}
	set, errs := egress.Compile([]mcpv1alpha1.MCPEgressPolicy{{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "policy"},
		Spec:       *spec,
	}}, egress.Defaults{Posture: egress.PosturePublic})
	if len(errs) > 0 {
		t.Fatalf("compiling policy: %v", errs)
	}
	return set.ForServer(namespace, labels)
}

// harness is a pool holding a session with one upstream and a gateway in front of it.
type harness struct {
	t        testing.TB
	pool     *connector.Pool
	gw       *gateway.Gateway
	front    *httptest.Server
	upstream *upstreamServer
	key      connector.Key
	audit    *logLines
	registry *prometheus.Registry
}

// harnessOptions adjust a harness.
type harnessOptions struct {
	gateway func(*gateway.Options)
	server  func(*mcpv1alpha1.MCPServer)
	// upstreamURL, when set, is the server the pool connects to instead of the harness's
	// own upstream.
	upstreamURL string
	// upstreamQuery is appended to the upstream's URL: a query string is a secret.
	upstreamQuery string
	// protocol is the upstream's transport; StreamableHTTP when empty.
	protocol connector.Protocol
	// timeout, when set, is the upstream's timeout instead of 5s.
	timeout time.Duration
	// statelessUpstream makes the harness's upstream a sessionless (2026-07-28) server.
	statelessUpstream bool
	// config, when set, adjusts the connection's configuration.
	config func(*connector.Config)
}

func newHarness(t testing.TB, ho harnessOptions) *harness {
	t.Helper()
	h := &harness{t: t, upstream: newUpstreamOfEra(t, ho.statelessUpstream), key: connector.Key{Namespace: namespace, Name: "notes"},
		audit: &logLines{}, registry: prometheus.NewRegistry()}
	pool, err := connector.NewPool(connector.Options{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	h.pool = pool
	cfg := h.config(loopbackRules(t))
	if ho.upstreamURL != "" {
		cfg.URL = ho.upstreamURL
	}
	cfg.URL += ho.upstreamQuery
	if ho.protocol != "" {
		cfg.Protocol = ho.protocol
	}
	if ho.timeout > 0 {
		cfg.Timeout = ho.timeout
	}
	if ho.config != nil {
		ho.config(&cfg)
	}
	pool.Ensure(h.key, cfg)
	testutil.Eventually(t, 10*time.Second, "the pool's session to become ready", func() error {
		if snap, _ := pool.Snapshot(h.key); snap.State != connector.StateReady {
			return fmt.Errorf("state %s: %w", snap.State, snap.LastError)
		}
		return nil
	})

	opts := gateway.Options{Pool: pool, NewToolIndex: catalogToolIndex, Registerer: h.registry, Audit: h.audit.logger()}
	if ho.gateway != nil {
		ho.gateway(&opts)
	}
	gw, err := gateway.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	h.gw = gw
	obj := readyServer(h.key)
	if ho.server != nil {
		ho.server(obj)
	}
	gw.Update(obj)
	h.front = httptest.NewServer(gw.Handler())
	t.Cleanup(h.front.Close)
	return h
}

func (h *harness) config(r *egress.ServerRules) connector.Config {
	return connector.Config{
		URL:         h.upstream.URL,
		Protocol:    connector.ProtocolStreamableHTTP,
		Headers:     []connector.Header{{Name: "Authorization", Value: upstreamSecret}},
		Timeout:     5 * time.Second,
		HealthCheck: connector.HealthCheck{Interval: time.Hour},
		Egress:      r,
	}
}

// readyServer is an MCPServer the controller has reported Ready.
func readyServer(key connector.Key) *mcpv1alpha1.MCPServer {
	return &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Generation: 1},
		Status: mcpv1alpha1.MCPServerStatus{Conditions: []metav1.Condition{{
			Type: mcpv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: mcpv1alpha1.ReasonSucceeded,
			ObservedGeneration: 1, LastTransitionTime: metav1.Now(),
		}}},
	}
}

// url is the gateway endpoint of the harness's server.
func (h *harness) url() string { return h.front.URL + gatewaypath.Server(h.key.Namespace, h.key.Name) }

// connect opens a client session through the gateway, sending the caller's token.
func (h *harness) connect(opts *mcp.ClientOptions) *mcp.ClientSession {
	h.t.Helper()
	cs, err := h.tryConnect(callerToken, opts)
	if err != nil {
		h.t.Fatalf("connecting through the gateway: %v", err)
	}
	return cs
}

// connectTo opens a client session through the gateway with another server than the
// harness's own.
func (h *harness) connectTo(key connector.Key) *mcp.ClientSession {
	h.t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: h.front.URL + gatewaypath.Server(key.Namespace, key.Name), MaxRetries: -1,
	}, sessionEraClient)
	if err != nil {
		h.t.Fatalf("connecting to %s through the gateway: %v", key, err)
	}
	h.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func (h *harness) tryConnect(token string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	cs, err := tryConnectAs(h.url(), token, sessionEra, opts)
	if err == nil {
		h.t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

// tryConnectAs connects a go-sdk client of protocol version to endpoint, presenting
// token, without retries: the one way the tests connect an agent to the gateway.
func tryConnectAs(endpoint, token, version string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{token: token}}, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
}

// connectAs is tryConnectAs for a test that cannot go on without the session; the
// session is closed when the test ends.
func connectAs(t *testing.T, endpoint, token, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := tryConnectAs(endpoint, token, version, opts)
	if err != nil {
		t.Fatalf("connecting a %s client to %s: %v", version, endpoint, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// sessionEra is the newest protocol version with sessions.
const sessionEra = "2025-11-25"

// sessionEraClient makes a go-sdk client speak the session era: it speaks the
// sessionless era first unless told otherwise, and the tests that use it are about
// sessions.
var sessionEraClient = &mcp.ClientSessionOptions{ProtocolVersion: sessionEra}

// bearer adds a caller's token and a cookie to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
		r.Header.Set("Cookie", "session="+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// callText calls tool and returns its first text content.
func callText(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", err
	}
	if len(res.Content) == 0 {
		return "", nil
	}
	if text, ok := res.Content[0].(*mcp.TextContent); ok {
		return text.Text, nil
	}
	return "", nil
}

// logLines collects log lines as text.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{})
}

func (l *logLines) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// matching returns the lines that contain every one of parts.
func (l *logLines) matching(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.lines {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}
