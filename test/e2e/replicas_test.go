//go:build e2e && linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

const (
	// sessionlessVersion is the first MCP version without sessions: a client discovers
	// the server once, then every request stands alone.
	sessionlessVersion = "2026-07-28"
	// leaseNamespace holds the leader election Lease of the replicas.
	leaseNamespace = "switchboard-system"
	// leaseName is the manager's leader election ID (cmd/switchboard leaderElectionID).
	leaseName = "switchboard.mcp.switchboard.dev"
	// replicaCalls is how many tools/call the client sends through the two replicas;
	// killAt is the call with which one replica is killed.
	replicaCalls = 200
	killAt       = replicaCalls / 3
	// takeoverCalls are sent once the surviving replica leads.
	takeoverCalls = 20
)

// replicaServers are the MCPServers the client calls through the replicas: a server of
// the sessionless era, whose one upstream client a replica shares among callers, and a
// server with sessions, for which each replica holds a session per caller.
var replicaServers = []string{"sessionless", "with-sessions"}

// Issue 27: a 2026-07-28 client needs nothing that lives in one replica's memory. Two
// manager replicas serve the gateway behind a round-robin balancer, so consecutive
// requests alternate replicas; the leader is SIGKILLed a third of the way through a loop
// of tool calls. The client never discovers or initializes again, only the call in
// flight at the kill may fail, and the calls go on succeeding while, and after, the
// survivor takes the lead.
func TestAnyReplicaServesASessionlessClient(t *testing.T) {
	start := time.Now()
	root := testenv.RepoRoot()
	work := t.TempDir()
	bin := buildSwitchboard(t)
	kubeconfigPath = startControlPlane(t, work)
	t.Logf("control plane up (%s)", time.Since(start).Round(time.Millisecond))

	var replicas []*managerProcess
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range replicas {
				t.Logf("log of %s (last 40 lines):\n%s", filepath.Base(m.logPath), m.logTail(40))
			}
			dumpDiagnostics(t, nil)
		}
	})

	step(t, "install CRDs with kubectl", func(t *testing.T) {
		kubectl(t, "apply", "-k", filepath.Join(root, "config", "crd"))
		kubectl(t, "wait", "--for=condition=Established", "--timeout=30s",
			"crd/mcpservers.mcp.switchboard.dev", "crd/mcpegresspolicies.mcp.switchboard.dev", "crd/mcptoolsets.mcp.switchboard.dev")
	})

	upstreams := map[string]*countingUpstream{
		"sessionless":   startCountingUpstream(t, true),
		"with-sessions": startCountingUpstream(t, false),
	}
	agent := ""
	step(t, "apply the servers and let the agent use them", func(t *testing.T) {
		kubectlApply(t, replicaManifests(upstreams["sessionless"].url, upstreams["with-sessions"].url))
		agent = agentToken(t)
		testutil.Eventually(t, 10*time.Second, "kubectl auth can-i to see the Role", func() error {
			for _, name := range replicaServers {
				if got := canI(name, agentUser); got != "yes" {
					return fmt.Errorf("can-i use %s as the agent: %q, want yes", name, got)
				}
			}
			return nil
		})
	})

	addrs := make([]string, 2)
	for i := range addrs {
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
	}
	startReplica := func(n int) *managerProcess {
		probeAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
		metricsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
		m := startManager(t, bin, filepath.Join(work, fmt.Sprintf("replica-%d.log", n+1)), probeAddr, []string{
			"--kubeconfig", kubeconfigPath,
			"--leader-elect",
			"--leader-election-namespace", leaseNamespace,
			"--catalog-auth=tokenreview",
			"--catalog-bind-address", addrs[n],
			"--health-probe-bind-address", probeAddr,
			"--metrics-bind-address", metricsAddr,
			"--default-egress=all", // the servers are on loopback
			"--zap-log-level=debug",
		})
		replicas = append(replicas, m)
		return m
	}

	// The first replica starts alone, so it is the one that leads.
	first := startReplica(0)
	var firstHolder string
	step(t, "the first replica leads and makes the servers Ready", func(t *testing.T) {
		kubectl(t, "wait", "-n", ns, "--for=condition=Ready", "--timeout=60s", "mcpserver/sessionless", "mcpserver/with-sessions")
		firstHolder = leaseHolder(t)
		if firstHolder == "" {
			t.Fatal("the servers are Ready but no replica holds the leader Lease")
		}
		if !leads(t, first) {
			t.Errorf("the first replica's log does not say it acquired the Lease")
		}
	})

	second := startReplica(1)
	step(t, "both replicas serve the gateway and only the first leads", func(t *testing.T) {
		for i := range replicas {
			for _, name := range replicaServers {
				endpoint := "http://" + addrs[i] + "/mcp/namespaces/" + ns + "/servers/" + name
				// The second replica serves a server once its standby reconciler has
				// given its connector the server's config.
				testutil.Eventually(t, waitTimeout, fmt.Sprintf("replica %d to serve %s", i+1, name), func() error {
					return callOnce(endpoint, agent, "warm-up through replica "+strconv.Itoa(i+1))
				})
			}
		}
		if got := leaseHolder(t); got != firstHolder {
			t.Errorf("the leader Lease moved from %q to %q when the second replica started", firstHolder, got)
		}
		if leads(t, second) {
			t.Errorf("the second replica acquired the leader Lease while the first runs")
		}
	})

	lb := startBalancer(t, addrs...)
	clients := make(map[string]*sessionlessClient, len(replicaServers))
	step(t, "a 2026-07-28 client discovers each server through the balancer", func(t *testing.T) {
		for _, name := range replicaServers {
			clients[name] = connectSessionless(t, "http://"+lb.addr+"/mcp/namespaces/"+ns+"/servers/"+name, agent)
		}
	})
	t.Cleanup(func() {
		for _, c := range clients {
			_ = c.cs.Close()
		}
	})

	step(t, "killing a replica fails only the call in flight", func(t *testing.T) {
		// phase says where the kill is: 0 before it, 1 signalled, 2 the replica gone.
		var phase atomic.Int32
		killed := make(chan error, 1)
		gone := make(chan struct{})
		var proxiedAtKill []int64
		var calls []replicaCall
		for i := range replicaCalls {
			if i == killAt+1 {
				// The kill lands during call killAt or just after it; every later call
				// starts once the replica is gone, however long reaping it takes.
				<-gone
			}
			if i == killAt {
				proxiedAtKill, _ = lb.counts()
				// Concurrently with call i, so that the kill lands on a call in flight
				// (or between two), as a node failure does.
				go func() {
					phase.Store(1)
					err := first.cmd.Process.Signal(syscall.SIGKILL)
					if err == nil {
						<-first.exited
					}
					phase.Store(2)
					close(gone)
					killed <- err
				}()
			}
			name := replicaServers[i%len(replicaServers)]
			c := replicaCall{n: i, server: name, startPhase: phase.Load()}
			c.err = clients[name].echo(fmt.Sprintf("call %d to %s", i, name))
			c.endPhase = phase.Load()
			calls = append(calls, c)
		}
		if err := <-killed; err != nil {
			t.Fatalf("killing the first replica: %v", err)
		}

		var failed []string
		after, afterOK := 0, 0
		for _, c := range calls {
			if c.startPhase == 2 {
				after++
				if c.err == nil {
					afterOK++
				}
			}
			if c.err == nil {
				continue
			}
			failed = append(failed, fmt.Sprintf("call %d to %s: %v", c.n, c.server, c.err))
			if !c.inFlightAtKill() {
				t.Errorf("call %d to %s failed, but it was not in flight at the kill (phases %d to %d): %v",
					c.n, c.server, c.startPhase, c.endPhase, c.err)
			}
		}
		t.Logf("%d sequential tools/call through 2 replicas, the leader SIGKILLed with call %d: %d failed %v; "+
			"%d calls started after the replica was gone, %d of them succeeded",
			len(calls), killAt, len(failed), failed, after, afterOK)
		if len(failed) > 1 {
			t.Errorf("%d calls failed; with sequential calls at most the one in flight at the kill may", len(failed))
		}
		if after < replicaCalls-killAt-2 {
			t.Errorf("only %d calls started after the kill, want at least %d: the loop did not go on past it", after, replicaCalls-killAt-2)
		}

		proxied, refused := lb.counts()
		t.Logf("balancer: connections to replica 1, 2 before the kill %v, in all %v; dials refused %v", proxiedAtKill, proxied, refused)
		if proxiedAtKill[0] < killAt/2 || proxiedAtKill[1] < killAt/2 {
			t.Errorf("before the kill the replicas took %v of the client's connections, want each at least %d: requests did not alternate",
				proxiedAtKill, killAt/2)
		}
		if refused[0] == 0 || proxied[1]-proxiedAtKill[1] < int64(after) {
			t.Errorf("after the kill the killed replica refused %d dials and the survivor took %d connections for %d calls: the calls did not all reach the survivor",
				refused[0], proxied[1]-proxiedAtKill[1], after)
		}
		for i, m := range replicas {
			// Each replica also audited one warm-up call per server. The count is a
			// floor, not an equality: the manager's production logger samples a message
			// past 100 a second, audit lines included.
			if n := auditedCalls(t, m); n <= len(replicaServers) {
				t.Errorf("replica %d audited %d sessionless tool calls, only its warm-up: it served none of the client's", i+1, n)
			} else {
				t.Logf("replica %d audited %d ok sessionless tool calls: %d warm-up, the rest of the %d connections the balancer gave it",
					i+1, n, len(replicaServers), proxied[i])
			}
		}
		for _, name := range replicaServers {
			clients[name].checkNeverReconnected(t, name)
		}
	})

	step(t, "the survivor takes the lead and goes on serving", func(t *testing.T) {
		// The Lease expires some 15 seconds after the kill; the client keeps calling
		// meanwhile, through the survivor that does not lead yet.
		deadline := time.Now().Add(2 * waitTimeout)
		waiting, failedWaiting := 0, 0
		var holder string
		for holder = leaseHolder(t); holder == firstHolder || holder == ""; holder = leaseHolder(t) {
			if time.Now().After(deadline) {
				t.Fatalf("the survivor did not take the leader Lease (still %q)", holder)
			}
			for range 10 {
				name := replicaServers[waiting%len(replicaServers)]
				if err := clients[name].echo(fmt.Sprintf("waiting call %d to %s", waiting, name)); err != nil {
					failedWaiting++
					t.Errorf("a call to %s while the survivor waits for the Lease failed: %v", name, err)
				}
				waiting++
			}
		}
		if !leads(t, second) {
			t.Errorf("the Lease moved to %q but the second replica's log does not say it acquired it", holder)
		}
		kubectl(t, "wait", "-n", ns, "--for=condition=Ready", "--timeout=60s", "mcpserver/sessionless", "mcpserver/with-sessions")
		failedAfter := 0
		for i := range takeoverCalls {
			name := replicaServers[i%len(replicaServers)]
			if err := clients[name].echo(fmt.Sprintf("call %d to %s after the takeover", i, name)); err != nil {
				failedAfter++
				t.Errorf("a call to %s after the survivor took the lead failed: %v", name, err)
			}
		}
		t.Logf("while the survivor waited for the Lease: %d calls, %d failed; after it took the lead: %d calls, %d failed",
			waiting, failedWaiting, takeoverCalls, failedAfter)
		for _, name := range replicaServers {
			clients[name].checkNeverReconnected(t, name)
		}
		for name, u := range upstreams {
			t.Logf("upstream %s received %v", name, u.counts())
		}
	})

	step(t, "the agent's token appears in no replica's log", func(t *testing.T) {
		for i, m := range replicas {
			text := readFile(t, m.logPath)
			if text == "" {
				t.Errorf("replica %d's log is empty: nothing was checked", i+1)
			}
			if strings.Contains(text, agent) {
				t.Errorf("the agent's token leaked into replica %d's log", i+1)
			}
		}
	})
	t.Logf("replica test in %s", time.Since(start).Round(time.Millisecond))
}

// replicaCall is one tools/call of the kill loop: where the kill was when it started and
// when it ended, and how it went.
type replicaCall struct {
	n                    int
	server               string
	startPhase, endPhase int32
	err                  error
}

// inFlightAtKill reports whether the call ran while the replica was being killed: it
// started before the replica was gone and ended after the kill was signalled.
func (c replicaCall) inFlightAtKill() bool { return c.startPhase < 2 && c.endPhase >= 1 }

// replicaManifests is what the user applies: the namespaces, the two servers and the
// Role that lets the agent use them.
func replicaManifests(sessionlessURL, withSessionsURL string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Namespace
metadata: {name: %[2]s}
---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPServer
metadata: {name: sessionless, namespace: %[1]s}
spec:
  description: An MCP server of the sessionless era (2026-07-28), go-sdk's stateless server.
  http:
    url: %[3]s/mcp
    protocol: StreamableHTTP
    allowInsecureHTTP: true
---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPServer
metadata: {name: with-sessions, namespace: %[1]s}
spec:
  description: An MCP server with sessions (2025-11-25), go-sdk's stateful server.
  http:
    url: %[4]s/mcp
    protocol: StreamableHTTP
    allowInsecureHTTP: true
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: replica-servers-user, namespace: %[1]s}
rules:
  - apiGroups: [mcp.switchboard.dev]
    resources: [mcpservers]
    resourceNames: [sessionless, with-sessions]
    verbs: [use]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: agent-uses-replica-servers, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: replica-servers-user}
subjects:
  - {kind: ServiceAccount, name: agent, namespace: %[1]s}
`, ns, leaseNamespace, sessionlessURL, withSessionsURL)
}

// leaseHolder returns the holder of the replicas' leader election Lease, "" for none.
func leaseHolder(t *testing.T) string {
	t.Helper()
	out, err := kubectlErr("get", "lease", leaseName, "-n", leaseNamespace, "-o", "jsonpath={.spec.holderIdentity}")
	if err != nil {
		if strings.Contains(err.Error(), "NotFound") {
			return ""
		}
		t.Fatalf("kubectl get lease: %v", err)
	}
	return strings.TrimSpace(out)
}

// leads reports whether a replica's log says it acquired the leader Lease.
func leads(t *testing.T, m *managerProcess) bool {
	t.Helper()
	return strings.Contains(readFile(t, m.logPath), `"msg":"Successfully acquired lease"`)
}

// auditedCalls counts the ok sessionless tool calls of the agent in a replica's audit
// log.
func auditedCalls(t *testing.T, m *managerProcess) int {
	t.Helper()
	n := 0
	for _, l := range auditLines(t, m.logPath) {
		if l.str("msg") == "Tool call" && l.str("caller") == agentUser && l.str("era") == sessionlessVersion && l.str("outcome") == "ok" {
			n++
		}
	}
	return n
}

// sessionlessClient is a go-sdk client that speaks MCP 2026-07-28 to one server through
// the gateway, with what its HTTP transport recorded.
type sessionlessClient struct {
	cs        *mcp.ClientSession
	transport *recordingTransport
}

// connectSessionless connects a 2026-07-28 client to endpoint: it discovers the server
// and then sends every request on its own, each on a new TCP connection so that a
// balancer in front alternates replicas request by request. The caller closes it.
func connectSessionless(t *testing.T, endpoint, token string) *sessionlessClient {
	t.Helper()
	rt := &recordingTransport{token: token, base: &http.Transport{DisableKeepAlives: true}, methods: map[string]int{}}
	client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-e2e-agent", Version: "v0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: &http.Client{Transport: rt},
		MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: sessionlessVersion})
	if err != nil {
		t.Fatalf("connecting a %s client to %s: %v", sessionlessVersion, endpoint, err)
	}
	if got := cs.InitializeResult().ProtocolVersion; got != sessionlessVersion {
		_ = cs.Close()
		t.Fatalf("the client settled on protocol version %q, want %s", got, sessionlessVersion)
	}
	return &sessionlessClient{cs: cs, transport: rt}
}

// echo calls the server's echo tool with text and checks the answer.
func (c *sessionlessClient) echo(text string) error {
	return echoOn(c.cs, text)
}

func echoOn(cs *mcp.ClientSession, text string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
	if err != nil {
		return err
	}
	if got := texts(res.Content); res.IsError || got != text {
		return fmt.Errorf("echo answered %q (tool error %v), want %q", got, res.IsError, text)
	}
	return nil
}

// checkNeverReconnected checks that the client discovered its server once, never
// initialized, and holds no session.
func (c *sessionlessClient) checkNeverReconnected(t *testing.T, name string) {
	t.Helper()
	methods, sessionIDs := c.transport.sent()
	if methods["server/discover"] != 1 || methods["initialize"] != 0 {
		t.Errorf("%s: the client sent server/discover %d times and initialize %d times, want 1 and 0 (it must never start over)",
			name, methods["server/discover"], methods["initialize"])
	}
	if sessionIDs != 0 || c.cs.ID() != "" {
		t.Errorf("%s: the client sent %d requests with a session id and holds session %q, want none", name, sessionIDs, c.cs.ID())
	}
	t.Logf("%s: the client sent %v", name, methods)
}

// callOnce connects a fresh 2026-07-28 client to endpoint, calls echo once and closes.
func callOnce(endpoint, token, text string) error {
	client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-e2e-warm-up", Version: "v0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: &http.Client{Transport: bearerTransport{token: token}},
		MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: sessionlessVersion})
	if err != nil {
		return err
	}
	defer cs.Close()
	return echoOn(cs, text)
}

// recordingTransport is a client's HTTP transport: a bearer token on every request, and a
// record of the JSON-RPC methods and session ids the client sent.
type recordingTransport struct {
	token string
	base  http.RoundTripper

	mu         sync.Mutex
	methods    map[string]int
	sessionIDs int
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+rt.token)
	var method string
	if r.Body != nil {
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if msg, err := jsonrpc.DecodeMessage(body); err == nil {
			if req, ok := msg.(*jsonrpc.Request); ok {
				method = req.Method
			}
		}
	}
	rt.mu.Lock()
	if method != "" {
		rt.methods[method]++
	}
	if r.Header.Get("Mcp-Session-Id") != "" {
		rt.sessionIDs++
	}
	rt.mu.Unlock()
	return rt.base.RoundTrip(r)
}

// sent returns how often each method was sent and how many requests carried a session
// id.
func (rt *recordingTransport) sent() (map[string]int, int) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return maps.Clone(rt.methods), rt.sessionIDs
}

// countingUpstream is an MCP server the test runs in process, go-sdk's stateless server
// (the sessionless era) or its stateful one (sessions), with an echo tool; it counts the
// JSON-RPC methods it receives.
type countingUpstream struct {
	url string

	mu      sync.Mutex
	methods map[string]int
}

// startCountingUpstream starts an upstream on loopback; it stops when the test ends.
func startCountingUpstream(t *testing.T, sessionless bool) *countingUpstream {
	t.Helper()
	server := mcp.NewServer(&mcp.Implementation{Name: "e2e-echo", Version: "v1"}, nil)
	type echoArgs struct {
		Text string `json:"text"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "Echoes its text."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: sessionless})
	u := &countingUpstream{methods: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if msg, err := jsonrpc.DecodeMessage(body); err == nil {
				if req, ok := msg.(*jsonrpc.Request); ok {
					u.mu.Lock()
					u.methods[req.Method]++
					u.mu.Unlock()
				}
			}
		}
		handler.ServeHTTP(w, r)
	}))
	// The replicas' streams would keep Close waiting: cut them first.
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	u.url = srv.URL
	return u
}

// counts returns how often the upstream received each method.
func (u *countingUpstream) counts() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.methods)
}
