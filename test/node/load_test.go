//go:build node && linux

package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// sessionlessVersion is the protocol revision the load's client speaks: every call is a
// request of its own, which any replica can serve.
const sessionlessVersion = "2026-07-28"

// gatewayEndpoint is a server's gateway endpoint on the catalogue Service's cluster IP,
// which kube-proxy balances over the ready manager pods for this host's connections too.
func gatewayEndpoint(t testing.TB, in install, namespace, server string) string {
	t.Helper()
	ip := strings.TrimSpace(kubectl(t, "get", "service", in.catalogService, "-n", systemNamespace, "-o", "jsonpath={.spec.clusterIP}"))
	return fmt.Sprintf("http://%s/mcp/namespaces/%s/servers/%s", ip, namespace, server)
}

// agentToken is a token for the agents' ServiceAccount with the gateway's audience.
func agentToken(t testing.TB) string {
	t.Helper()
	return strings.TrimSpace(kubectl(t, "create", "token", "agent", "-n", "agents", "--audience", "switchboard", "--duration", "1h"))
}

type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// webServer is server-everything serving Streamable HTTP as a pod behind the Service
// web in namespace, and the MCPEgressPolicy that lets the namespace's servers reach it.
func webServer(t testing.TB, namespace string) string {
	web := imageNamed(t, "server-everything")
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web, namespace: %[1]s, labels: {app: web}}
spec:
  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: web
      image: %[2]s
      command: %[3]s
      env: [{name: PORT, value: "%[4]d"}]
      readinessProbe: {tcpSocket: {port: %[4]d}}
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: %[1]s}
spec:
  selector: {app: web}
  ports: [{port: %[4]d}]
---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPEgressPolicy
metadata: {name: cluster-web, namespace: %[1]s}
spec:
  serverSelector: {}
  egress:
    - to: [{host: web.%[1]s.svc}, {ipBlock: {cidr: 10.96.0.0/16}}]
      ports: [{port: %[4]d}]
`, namespace, web.Ref, yamlList(httpCommand(web)), targetPort)
}

// webURL is the MCP endpoint of namespace's web Service.
func webURL(namespace string) string {
	return fmt.Sprintf("http://web.%s.svc:%d/mcp", namespace, targetPort)
}

// httpCommand is a server-everything image's command with the stdio mode swapped for
// Streamable HTTP (on $PORT).
func httpCommand(img image) []string {
	return append(slices.Clone(img.Command[:len(img.Command)-1]), "streamableHttp")
}

// refusalRecorder keeps the bodies of the gateway's error answers, which the client's
// errors reduce to a status text, so that a failed call says why it was refused.
type refusalRecorder struct {
	base http.RoundTripper

	mu     sync.Mutex
	bodies map[string]int
}

func (rr *refusalRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := rr.base.RoundTrip(r)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.bodies[fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))]++
	return resp, nil
}

// callLoad is clients calling a tool through the gateway Service in a loop, each call on
// a new connection so that kube-proxy picks a pod per call, with what failed.
type callLoad struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	calls    atomic.Int64
	refusals *refusalRecorder

	mu     sync.Mutex
	failed []string
}

// startLoad starts clients 2026-07-28 clients calling echo on endpoint until stop.
func startLoad(t *testing.T, endpoint, token string, clients int) *callLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	load := &callLoad{cancel: cancel, refusals: &refusalRecorder{base: &http.Transport{DisableKeepAlives: true}, bodies: map[string]int{}}}
	for i := range clients {
		connectCtx, connectCancel := context.WithTimeout(ctx, 30*time.Second)
		cs, err := connectSessionless(connectCtx, endpoint, token, load.refusals)
		connectCancel()
		if err != nil {
			cancel()
			t.Fatalf("connecting a %s client to %s: %v", sessionlessVersion, endpoint, err)
		}
		load.wg.Add(1)
		go func() {
			defer load.wg.Done()
			defer cs.Close()
			for n := 0; ctx.Err() == nil; n++ {
				text := fmt.Sprintf("client %d call %d", i, n)
				callCtx, callCancel := context.WithTimeout(ctx, 30*time.Second)
				res, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": text}})
				callCancel()
				if ctx.Err() != nil {
					return // stopped mid-call: not a failure of the system under test
				}
				load.calls.Add(1)
				switch {
				case err != nil:
					load.fail(fmt.Sprintf("%s at %s: %v", text, time.Now().Format(time.TimeOnly), err))
				case res.IsError || !strings.Contains(contentText(res.Content), text):
					load.fail(fmt.Sprintf("%s at %s: answered %q (tool error %v)", text, time.Now().Format(time.TimeOnly), contentText(res.Content), res.IsError))
				}
			}
		}()
	}
	return load
}

func (l *callLoad) fail(what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed = append(l.failed, what)
}

// stop stops the clients and returns the number of calls made and those that failed,
// the gateway's refusals (status and body, with their counts) first.
func (l *callLoad) stop() (int64, []string) {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refusals.mu.Lock()
	defer l.refusals.mu.Unlock()
	var failed []string
	for body, n := range l.refusals.bodies {
		failed = append(failed, fmt.Sprintf("%d refusals: %s", n, body))
	}
	return l.calls.Load(), append(failed, l.failed...)
}

// reportFailed fails the test with the first failed calls and how many more there were.
func reportFailed(t *testing.T, failed []string) {
	t.Helper()
	const shown = 20
	for i, f := range failed {
		if i == shown {
			t.Errorf("... and %d more", len(failed)-shown)
			break
		}
		t.Errorf("failed: %s", f)
	}
}

func contentText(content []mcp.Content) string {
	var b strings.Builder
	for _, c := range content {
		if text, ok := c.(*mcp.TextContent); ok {
			b.WriteString(text.Text)
		}
	}
	return b.String()
}

// readyWatch records every Ready condition of a server that is not True while it runs.
type readyWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	flips   []string
	initial *mcpv1alpha1.MCPServer
}

func watchReady(t *testing.T, namespace, name string) *readyWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &readyWatch{cancel: cancel, done: make(chan struct{})}
	var first mcpv1alpha1.MCPServer
	getJSON(t, &first, "mcpserver", name, "-n", namespace)
	w.initial = &first
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			var s mcpv1alpha1.MCPServer
			text, err := kubectlErr("get", "mcpserver", name, "-n", namespace, "-o", "json")
			if err == nil && jsonDecode(text, &s) == nil {
				ready := apimeta.FindStatusCondition(s.Status.Conditions, mcpv1alpha1.ConditionReady)
				if ready == nil || ready.Status != "True" {
					w.mu.Lock()
					w.flips = append(w.flips, fmt.Sprintf("%+v", ready))
					w.mu.Unlock()
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return w
}

// stop returns the non-True Ready conditions seen, and whether Ready's last transition
// moved (a flip and back between two polls).
func (w *readyWatch) stop(t *testing.T, namespace, name string) []string {
	w.cancel()
	<-w.done
	var s mcpv1alpha1.MCPServer
	getJSON(t, &s, "mcpserver", name, "-n", namespace)
	before := apimeta.FindStatusCondition(w.initial.Status.Conditions, mcpv1alpha1.ConditionReady)
	after := apimeta.FindStatusCondition(s.Status.Conditions, mcpv1alpha1.ConditionReady)
	w.mu.Lock()
	defer w.mu.Unlock()
	flips := w.flips
	if before != nil && after != nil && !before.LastTransitionTime.Equal(&after.LastTransitionTime) {
		flips = append(flips, fmt.Sprintf("Ready's lastTransitionTime moved from %s to %s", before.LastTransitionTime, after.LastTransitionTime))
	}
	return flips
}

// testFailover deletes the pod that holds the Lease under a client's calls: the other
// replica takes the Lease within the lease duration plus 5 s, the calls go on, and the
// server's Ready condition never flips.
func testFailover(t *testing.T, in install, namespace, server string) {
	endpoint := gatewayEndpoint(t, in, namespace, server)
	token := agentToken(t)
	leader, err := leaseHolder()
	if err != nil {
		t.Fatal(err)
	}
	watch := watchReady(t, namespace, server)
	load := startLoad(t, endpoint, token, 2)
	time.Sleep(2 * time.Second) // calls before the failover

	deleted := time.Now()
	kubectl(t, "delete", "pod", leader, "-n", systemNamespace, "--wait=false")
	const shardLease = 15 * time.Second // the chart's sharding.leaseDuration
	testutil.Eventually(t, shardLease+5*time.Second, "another replica to hold the Lease", func() error {
		holder, err := leaseHolder()
		if err != nil {
			return err
		}
		if holder == leader {
			return fmt.Errorf("still held by the deleted pod %s", leader)
		}
		return nil
	})
	t.Logf("the Lease moved %s after the leader was deleted", time.Since(deleted).Round(time.Millisecond))
	// The survivor serves the server: a call started now succeeds.
	if err := callOnce(endpoint, token, "after the failover"); err != nil {
		t.Errorf("a call after the failover: %v", err)
	}
	time.Sleep(3 * time.Second)
	calls, failed := load.stop()
	t.Logf("%d calls during the failover, %d failed", calls, len(failed))
	reportFailed(t, failed)
	if flips := watch.stop(t, namespace, server); len(flips) > 0 {
		t.Errorf("Ready flipped during the failover: %v", flips)
	}
	checkReplicas(t, in)
}

// testUpgrade upgrades the release to a rebuilt image while clients call a tool through
// the gateway Service: readiness, graceful shutdown and the PodDisruptionBudget must lose
// no call.
//
// The calls go to a remote Streamable HTTP server: a stdio server's pod rolls too when the
// manager's image changes (its bridge comes from that image), and a session on a bridge
// that stops ends with the calls on it, which is not what this step measures.
func testUpgrade(t *testing.T, in install) {
	const namespace, server = "upgrade", "remote"
	rebuilt := imageNamed(t, "switchboard-rebuilt")
	repository, tag := splitRef(rebuilt.Ref)
	kubectlApply(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
%[2]s
---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPServer
metadata: {name: %[3]s, namespace: %[1]s}
spec:
  http: {url: %[4]q, allowInsecureHTTP: true}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: use-%[3]s, namespace: %[1]s}
rules:
  - {apiGroups: [mcp.switchboard.dev], resources: [mcpservers], resourceNames: [%[3]s], verbs: [use]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: agent-uses-%[3]s, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: use-%[3]s}
subjects: [{kind: ServiceAccount, name: agent, namespace: agents}]
`, namespace, webServer(t, namespace), server, webURL(namespace)))
	waitServerReady(t, namespace, server)
	endpoint := gatewayEndpoint(t, in, namespace, server)
	load := startLoad(t, endpoint, agentToken(t), 2)
	time.Sleep(2 * time.Second)
	helm(t, "upgrade", "switchboard", "charts/switchboard", "-n", systemNamespace,
		"--reuse-values", "--set", "image.repository="+repository, "--set-string", "image.tag="+tag)
	kubectl(t, "-n", systemNamespace, "rollout", "status", "deployment/"+in.deployment, "--timeout=3m")
	time.Sleep(3 * time.Second)
	calls, failed := load.stop()
	t.Logf("helm upgrade under load: %d calls, %d failed", calls, len(failed))
	reportFailed(t, failed)
	var pods corev1.PodList
	getJSON(t, &pods, "pods", "-n", systemNamespace, "-l", in.selector)
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil && pod.Spec.Containers[0].Image != rebuilt.Ref {
			t.Errorf("after the upgrade pod %s runs %s, want %s", pod.Name, pod.Spec.Containers[0].Image, rebuilt.Ref)
		}
	}
	checkReplicas(t, in)
}

// connectSessionless connects a 2026-07-28 client to endpoint with the caller's token
// on every request over base.
func connectSessionless(ctx context.Context, endpoint, token string, base http.RoundTripper) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-node-test", Version: "v0"}, nil)
	return client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: &http.Client{Transport: bearerTransport{token: token, base: base}},
		MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: sessionlessVersion})
}

// callOnce connects a fresh 2026-07-28 client, calls echo once and closes.
func callOnce(endpoint, token, text string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := connectSessionless(ctx, endpoint, token, http.DefaultTransport)
	if err != nil {
		return err
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": text}})
	if err != nil {
		return err
	}
	if res.IsError || !strings.Contains(contentText(res.Content), text) {
		return fmt.Errorf("echo answered %q", contentText(res.Content))
	}
	return nil
}
