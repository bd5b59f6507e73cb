package controllers_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

const (
	// eventually bounds every wait on the operator.
	eventually = 20 * time.Second
	poll       = 50 * time.Millisecond
)

// mcpServer is a real go-sdk MCP server on a loopback port that can be stopped and
// started again on the same address, and that records the Authorization headers it
// receives.
type mcpServer struct {
	t      testing.TB
	server *mcp.Server
	addr   string

	mu         sync.Mutex
	http       *http.Server
	authHeader []string
}

func newMCPServer(t testing.TB, tools int) *mcpServer {
	t.Helper()
	s := &mcpServer{t: t, server: mcp.NewServer(&mcp.Implementation{Name: "fixture", Version: "1.0.0", Title: "Fixture"}, nil)}
	for i := range tools {
		s.addTool(fmt.Sprintf("tool_%04d", i))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	s.serve(l)
	t.Cleanup(s.stop)
	return s
}

func (s *mcpServer) url() string { return "http://" + s.addr + "/mcp" }

func (s *mcpServer) addTool(name string) {
	mcp.AddTool(s.server, &mcp.Tool{Name: name, Description: "Tool " + name},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{}, nil, nil
		})
}

func (s *mcpServer) serve(l net.Listener) {
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.server }, nil)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if v := r.Header.Get("Authorization"); v != "" {
				s.mu.Lock()
				s.authHeader = append(s.authHeader, v)
				s.mu.Unlock()
			}
			handler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	s.mu.Lock()
	s.http = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// stop closes the listener and every connection, like a server that died.
func (s *mcpServer) stop() {
	s.mu.Lock()
	srv := s.http
	s.http = nil
	s.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// start serves again on the same address.
func (s *mcpServer) start() {
	s.t.Helper()
	var l net.Listener
	var err error
	for range 50 { // the port may linger briefly after Close
		if l, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	s.serve(l)
}

func (s *mcpServer) lastAuthorization() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.authHeader) == 0 {
		return ""
	}
	return s.authHeader[len(s.authHeader)-1]
}

// httpServer returns an MCPServer pointing at url over plain http on loopback.
func httpServer(namespace, name, url string) *mcpv1alpha1.MCPServer {
	return &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: mcpv1alpha1.MCPServerSpec{
			HTTP: &mcpv1alpha1.HTTPServerSpec{URL: url, AllowInsecureHTTP: true},
		},
	}
}

func get(g Gomega, obj *mcpv1alpha1.MCPServer) *mcpv1alpha1.MCPServer {
	out := &mcpv1alpha1.MCPServer{}
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), out)).To(Succeed())
	return out
}

// condition returns the status and reason of one condition, or "" when absent.
func condition(obj *mcpv1alpha1.MCPServer, condType string) (metav1.ConditionStatus, string) {
	c := meta.FindStatusCondition(obj.Status.Conditions, condType)
	if c == nil {
		return "", ""
	}
	return c.Status, c.Reason
}

func readyIs(g Gomega, obj *mcpv1alpha1.MCPServer, want metav1.ConditionStatus, reason string) *mcpv1alpha1.MCPServer {
	got := get(g, obj)
	st, r := condition(got, mcpv1alpha1.ConditionReady)
	g.Expect(st).To(Equal(want), "Ready condition: %+v", got.Status.Conditions)
	if reason != "" {
		g.Expect(r).To(Equal(reason), "Ready condition: %+v", got.Status.Conditions)
	}
	return got
}

func TestApplyBecomesReadyWithTools(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 3)

	obj := httpServer(ns, "fixture", srv.url())
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())

	var ready *mcpv1alpha1.MCPServer
	g.Eventually(func(g Gomega) { ready = readyIs(g, obj, metav1.ConditionTrue, "") }, eventually, poll).Should(Succeed())

	st := ready.Status
	g.Expect(st.ObservedGeneration).To(Equal(ready.Generation))
	g.Expect(st.Transport).To(Equal(mcpv1alpha1.TransportStreamableHTTP))
	g.Expect(st.Endpoint).To(Equal(srv.url()))
	g.Expect(st.ProtocolVersion).NotTo(BeEmpty())
	g.Expect(st.ServerInfo).To(Equal(&mcpv1alpha1.ServerInfo{Name: "fixture", Version: "1.0.0", Title: "Fixture"}))
	g.Expect(st.Capabilities.Tools).To(BeTrue())
	g.Expect(st.ToolCount).To(BeEquivalentTo(3))
	g.Expect(st.ToolsDigest).To(HavePrefix("sha256:"))
	g.Expect(st.ToolsTruncated).To(BeFalse())
	names := []string{}
	for _, tool := range st.Tools {
		names = append(names, tool.Name)
	}
	g.Expect(names).To(Equal([]string{"tool_0000", "tool_0001", "tool_0002"}))
	for _, c := range []string{mcpv1alpha1.ConditionConnected, mcpv1alpha1.ConditionToolsDiscovered, mcpv1alpha1.ConditionEgressAllowed} {
		s, _ := condition(ready, c)
		g.Expect(s).To(Equal(metav1.ConditionTrue), "condition %s", c)
	}
	for _, c := range []string{mcpv1alpha1.ConditionReconciling, mcpv1alpha1.ConditionStalled} {
		g.Expect(meta.FindStatusCondition(st.Conditions, c)).To(BeNil(), "%s must be absent when Ready", c)
	}
	g.Expect(testutil.KStatus(t, ready)).To(Equal(status.CurrentStatus))
	// The finalizer that closes the session on deletion follows the Ready status.
	g.Eventually(func(g Gomega) []string { return get(g, obj).Finalizers }, eventually, poll).Should(ContainElement("mcp.switchboard.dev/session"))
	g.Eventually(func() []string { return eventReasons(t, ns, "fixture") }, eventually, poll).Should(ContainElement("Connected"))
}

func TestConnectingIsInProgressForKstatus(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	startOperator(t, ns)
	// Nothing listens here: the operator keeps retrying.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String() + "/mcp"
	_ = l.Close()

	obj := httpServer(ns, "nobody-home", url)
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionFalse, "ConnectionRefused")
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, mcpv1alpha1.ConditionReconciling)).To(BeTrue())
		g.Expect(testutil.KStatus(t, got)).To(Equal(status.InProgressStatus))
	}, eventually, poll).Should(Succeed())
}

func TestToolAddedOnServerShowsUpThroughListChanged(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 2)
	obj := httpServer(ns, "growing", srv.url())
	// Probe rarely, so only tools/list_changed can bring the new tool in time.
	obj.Spec.HealthCheck = &mcpv1alpha1.HealthCheck{Interval: &metav1.Duration{Duration: time.Hour}, FailureThreshold: 3}
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())
	g.Eventually(func(g Gomega) { readyIs(g, obj, metav1.ConditionTrue, "") }, eventually, poll).Should(Succeed())

	added := time.Now()
	srv.addTool("brand_new_tool")
	g.Eventually(func(g Gomega) {
		got := get(g, obj)
		g.Expect(got.Status.ToolCount).To(BeEquivalentTo(3))
		g.Expect(got.Status.Tools).To(ContainElement(HaveField("Name", "brand_new_tool")))
	}, 5*time.Second, 20*time.Millisecond).Should(Succeed())
	t.Logf("new tool in status %v after it was added on the server", time.Since(added).Round(time.Millisecond))
	g.Eventually(func() []string { return eventReasons(t, ns, "growing") }, eventually, poll).Should(ContainElement("ToolsChanged"))
}

func TestServerOutageAndRecovery(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 1)
	obj := httpServer(ns, "flaky", srv.url())
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())
	g.Eventually(func(g Gomega) { readyIs(g, obj, metav1.ConditionTrue, "") }, eventually, poll).Should(Succeed())

	srv.stop()
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionFalse, "")
		st, reason := condition(got, mcpv1alpha1.ConditionConnected)
		g.Expect(st).To(Equal(metav1.ConditionFalse))
		g.Expect(reason).To(Equal("ConnectionRefused"))
	}, eventually, poll).Should(Succeed())
	g.Eventually(func() []string { return eventReasons(t, ns, "flaky") }, eventually, poll).Should(ContainElement("ConnectionLost"))

	srv.start()
	g.Eventually(func(g Gomega) { readyIs(g, obj, metav1.ConditionTrue, "") }, eventually, poll).Should(Succeed())
	g.Eventually(func() []string { return eventReasons(t, ns, "flaky") }, eventually, poll).Should(ContainElement("Recovered"))
}

func TestSecretBackedHeaders(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	op := startOperator(t, ns)
	srv := newMCPServer(t, 1)

	// The Secret does not exist yet: no connection attempt, a clear reason.
	obj := httpServer(ns, "with-token", srv.url())
	obj.Spec.HTTP.Headers = []mcpv1alpha1.HTTPHeader{{
		Name:      "Authorization",
		ValueFrom: &mcpv1alpha1.HeaderValueSource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "api-token", Key: "token"}},
	}}
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionFalse, "SecretNotFound")
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady)
		g.Expect(c.Message).To(ContainSubstring(`"api-token"`))
		g.Expect(testutil.KStatus(t, got)).To(Equal(status.FailedStatus))
	}, eventually, poll).Should(Succeed())
	g.Expect(srv.lastAuthorization()).To(BeEmpty(), "no request without the credentials")
	g.Eventually(func() []string { return eventReasons(t, ns, "with-token") }, eventually, poll).Should(ContainElement("SecretNotFound"))

	// Creating the Secret heals the server without touching the MCPServer.
	const first, second = "Bearer first-secret-value-4242", "Bearer rotated-secret-value-9797"
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-token"},
		Data:       map[string][]byte{"token": []byte(first + "\n")},
	}
	g.Expect(k8sClient.Create(ctx, secret)).To(Succeed())
	g.Eventually(func(g Gomega) { readyIs(g, obj, metav1.ConditionTrue, "") }, eventually, poll).Should(Succeed())
	g.Expect(srv.lastAuthorization()).To(Equal(first))

	// Rotating the token reconnects with the new value.
	secret.Data["token"] = []byte(second)
	g.Expect(k8sClient.Update(ctx, secret)).To(Succeed())
	g.Eventually(srv.lastAuthorization, eventually, poll).Should(Equal(second))
	g.Eventually(func(g Gomega) { readyIs(g, obj, metav1.ConditionTrue, "") }, eventually, poll).Should(Succeed())
	// The live session's metrics, every name, label and value, for the leak check below.
	families, err := op.metrics.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(families).NotTo(BeEmpty())
	metricText := fmt.Sprint(families)
	g.Expect(metricText).To(ContainSubstring(`value:"with-token"`), "the text holds the server's labels")

	// A missing key names the key, not a value.
	secret.Data = map[string][]byte{"other": []byte("x")}
	g.Expect(k8sClient.Update(ctx, secret)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionFalse, "SecretNotFound")
		g.Expect(meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady).Message).To(ContainSubstring(`no key "token"`))
	}, eventually, poll).Should(Succeed())

	// No leak: neither value appears in status, Events or any log line.
	got := get(g, obj)
	statusText := fmt.Sprintf("%+v", got.Status)
	var eventText strings.Builder
	for _, e := range events(t, ns, "with-token") {
		fmt.Fprintf(&eventText, "%s %s\n", e.Reason, e.Note)
	}
	logs := op.logs.String()
	g.Expect(logs).NotTo(BeEmpty())

	for _, value := range []string{"first-secret-value-4242", "rotated-secret-value-9797"} {
		g.Expect(statusText).NotTo(ContainSubstring(value))
		g.Expect(eventText.String()).NotTo(ContainSubstring(value))
		g.Expect(logs).NotTo(ContainSubstring(value))
		g.Expect(metricText).NotTo(ContainSubstring(value))
	}
}

func TestToolFiltersAndBoundedStatus(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 1000)

	filtered := httpServer(ns, "filtered", srv.url())
	filtered.Spec.Tools = &mcpv1alpha1.ToolFilter{Allow: []string{"tool_00??"}, Deny: []string{"tool_001?", "tool_0099"}}
	g.Expect(k8sClient.Create(context.Background(), filtered)).To(Succeed())

	everything := httpServer(ns, "everything", srv.url())
	g.Expect(k8sClient.Create(context.Background(), everything)).To(Succeed())

	g.Eventually(func(g Gomega) {
		got := readyIs(g, filtered, metav1.ConditionTrue, "")
		// tool_0000..tool_0099, minus tool_0010..tool_0019 and tool_0099.
		g.Expect(got.Status.ToolCount).To(BeEquivalentTo(89))
		g.Expect(got.Status.Tools).To(HaveLen(89))
		g.Expect(got.Status.Tools).NotTo(ContainElement(HaveField("Name", "tool_0015")))
		g.Expect(got.Status.Tools).NotTo(ContainElement(HaveField("Name", "tool_0100")))
		g.Expect(got.Status.ToolsTruncated).To(BeFalse())
	}, eventually, poll).Should(Succeed())

	g.Eventually(func(g Gomega) {
		got := readyIs(g, everything, metav1.ConditionTrue, "")
		g.Expect(got.Status.ToolCount).To(BeEquivalentTo(1000))
		g.Expect(got.Status.Tools).To(HaveLen(256))
		g.Expect(got.Status.ToolsTruncated).To(BeTrue())
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(got)
		g.Expect(err).NotTo(HaveOccurred())
		size := len(fmt.Sprint(u))
		g.Expect(size).To(BeNumerically("<", 256<<10), "object stays far below etcd's limit")
	}, eventually, poll).Should(Succeed())
}

func TestSuspendResumeAndDelete(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 1)
	obj := httpServer(ns, "pausable", srv.url())
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	g.Eventually(func(g Gomega) { readyIs(g, obj, metav1.ConditionTrue, "") }, eventually, poll).Should(Succeed())

	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Suspend = true })
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionFalse, "Suspended")
		st, _ := condition(got, mcpv1alpha1.ConditionConnected)
		g.Expect(st).To(Equal(metav1.ConditionFalse))
	}, eventually, poll).Should(Succeed())

	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Suspend = false })
	g.Eventually(func(g Gomega) { readyIs(g, obj, metav1.ConditionTrue, "") }, eventually, poll).Should(Succeed())

	// Deleting while the server is gone still completes at once.
	srv.stop()
	g.Expect(k8sClient.Delete(ctx, obj)).To(Succeed())
	g.Eventually(func() bool {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), &mcpv1alpha1.MCPServer{})
		return err != nil && client.IgnoreNotFound(err) == nil
	}, eventually, poll).Should(BeTrue(), "the finalizer must not hold deletion when the server is gone")
}

func TestManagerRestartPicksServersUpAgain(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	first := startOperator(t, ns)
	srv := newMCPServer(t, 2)
	obj := httpServer(ns, "survivor", srv.url())
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())
	g.Eventually(func(g Gomega) { readyIs(g, obj, metav1.ConditionTrue, "") }, eventually, poll).Should(Succeed())
	first.stop()

	// A tool appears while no operator runs; the new manager must find it.
	srv.addTool("added_while_down")
	startOperator(t, ns)
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionTrue, "")
		g.Expect(got.Status.ToolCount).To(BeEquivalentTo(3))
	}, eventually, poll).Should(Succeed())
}

func TestHealthyServerWritesNothing(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 2)
	obj := httpServer(ns, "quiet", srv.url())
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())
	var ready *mcpv1alpha1.MCPServer
	g.Eventually(func(g Gomega) { ready = readyIs(g, obj, metav1.ConditionTrue, "") }, eventually, poll).Should(Succeed())
	// Let the first few probes settle, then watch ten probe intervals.
	time.Sleep(2 * probeInterval)
	ready = get(g, obj)
	time.Sleep(10 * probeInterval)
	after := get(g, obj)
	g.Expect(after.ResourceVersion).To(Equal(ready.ResourceVersion), "a healthy server's probes must not write status")
}

// patchSpec changes obj's spec with a merge patch, retrying on conflicts.
func patchSpec(g Gomega, obj *mcpv1alpha1.MCPServer, mutate func(*mcpv1alpha1.MCPServer)) {
	g.Eventually(func() error {
		cur := &mcpv1alpha1.MCPServer{}
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		before := cur.DeepCopy()
		mutate(cur)
		return k8sClient.Patch(context.Background(), cur, client.MergeFrom(before))
	}, eventually, poll).Should(Succeed())
}

func eventReasons(t *testing.T, namespace, name string) []string {
	var reasons []string
	for _, e := range events(t, namespace, name) {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// TestSlowServerIsInProgressUntilReady holds the server's answers back for longer than
// the reconciler waits for a first connect: a GitOps tool must see the server in
// progress, not missing a status, until it is Ready.
func TestSlowServerIsInProgressUntilReady(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 2)
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.server }, nil)
	release := make(chan struct{})
	gate := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			mcpHandler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gate.Serve(l) }()
	t.Cleanup(func() { _ = gate.Close() })

	obj := httpServer(ns, "slow", "http://"+l.Addr().String()+"/mcp")
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionFalse, mcpv1alpha1.ReasonConnecting)
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, mcpv1alpha1.ConditionReconciling)).To(BeTrue())
		g.Expect(testutil.KStatus(t, got)).To(Equal(status.InProgressStatus))
	}, eventually, poll).Should(Succeed())

	close(release)
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionTrue, "")
		g.Expect(got.Status.ToolCount).To(BeEquivalentTo(2))
		g.Expect(testutil.KStatus(t, got)).To(Equal(status.CurrentStatus))
	}, eventually, poll).Should(Succeed())
}

// TestPinnedToolsNeedAReviewedDigest pins a digest that is not the server's: the server
// is Stalled on ToolsChanged, with a Warning, until the digest status shows is pinned.
func TestPinnedToolsNeedAReviewedDigest(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 2)
	obj := httpServer(ns, "pinned", srv.url())
	const wrong = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	obj.Spec.Tools = &mcpv1alpha1.ToolFilter{PinnedDigest: wrong}
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())

	var digest string
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionFalse, mcpv1alpha1.ReasonToolsChanged)
		st, reason := condition(got, mcpv1alpha1.ConditionToolsPinned)
		g.Expect(st).To(Equal(metav1.ConditionFalse))
		g.Expect(reason).To(Equal(mcpv1alpha1.ReasonToolsChanged))
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, mcpv1alpha1.ConditionStalled)).To(BeTrue())
		g.Expect(testutil.KStatus(t, got)).To(Equal(status.FailedStatus))
		digest = got.Status.ToolsDigest
		g.Expect(digest).To(HavePrefix("sha256:"))
		g.Expect(meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionToolsPinned).Message).
			To(And(ContainSubstring(digest), ContainSubstring(wrong)))
	}, eventually, poll).Should(Succeed())
	g.Eventually(func() []string {
		var warnings []string
		for _, e := range events(t, ns, "pinned") {
			if e.Type == corev1.EventTypeWarning {
				warnings = append(warnings, e.Reason+": "+e.Note)
			}
		}
		return warnings
	}, eventually, poll).Should(ContainElement(And(HavePrefix("ToolsChanged: "), ContainSubstring(wrong))))

	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Tools.PinnedDigest = digest })
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionTrue, "")
		st, reason := condition(got, mcpv1alpha1.ConditionToolsPinned)
		g.Expect(st).To(Equal(metav1.ConditionTrue))
		g.Expect(reason).To(Equal(mcpv1alpha1.ReasonToolsMatchPinned))
		g.Expect(meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionStalled)).To(BeNil())
		g.Expect(testutil.KStatus(t, got)).To(Equal(status.CurrentStatus))
	}, eventually, poll).Should(Succeed())
	g.Eventually(func() []string { return eventReasons(t, ns, "pinned") }, eventually, poll).Should(ContainElement("ToolsPinned"))

	// A tool the server adds later leaves the pin again.
	srv.addTool("added_after_review")
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionFalse, mcpv1alpha1.ReasonToolsChanged)
		g.Expect(got.Status.ToolsDigest).NotTo(Equal(digest))
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, mcpv1alpha1.ConditionStalled)).To(BeTrue())
	}, eventually, poll).Should(Succeed())
}
