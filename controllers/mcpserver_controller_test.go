package controllers_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
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

// eventually bounds every wait on the operator.
const eventually = 20 * time.Second

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

// fetch reads obj as the API server has it now.
func fetch(obj *mcpv1alpha1.MCPServer) (*mcpv1alpha1.MCPServer, error) {
	out := &mcpv1alpha1.MCPServer{}
	return out, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), out)
}

// readyIs reads obj and says how its Ready condition is not want with reason (any reason
// when reason is "").
func readyIs(obj *mcpv1alpha1.MCPServer, want metav1.ConditionStatus, reason string) (*mcpv1alpha1.MCPServer, error) {
	got, err := fetch(obj)
	if err != nil {
		return nil, err
	}
	if st, r := condition(got, mcpv1alpha1.ConditionReady); st != want || reason != "" && r != reason {
		return got, fmt.Errorf("Ready is %s %s, want %s %s; conditions: %+v", st, r, want, reason, got.Status.Conditions)
	}
	return got, nil
}

// awaitReady waits until obj's Ready condition is want with reason (any reason when
// reason is "") and returns obj as it was then.
func awaitReady(t testing.TB, obj *mcpv1alpha1.MCPServer, want metav1.ConditionStatus, reason string) *mcpv1alpha1.MCPServer {
	t.Helper()
	var got *mcpv1alpha1.MCPServer
	testutil.Eventually(t, eventually, fmt.Sprintf("%s to be Ready=%s %s", obj.Name, want, reason), func() (err error) {
		got, err = readyIs(obj, want, reason)
		return err
	})
	return got
}

// awaitEvent waits until the named object has an Event with reason.
func awaitEvent(t *testing.T, namespace, name, reason string) {
	t.Helper()
	testutil.Eventually(t, eventually, "an Event "+reason+" about "+name, func() error {
		if reasons := eventReasons(t, namespace, name); !slices.Contains(reasons, reason) {
			return fmt.Errorf("the Events so far: %q", reasons)
		}
		return nil
	})
}

// awaitReconciled waits until status has observed obj's current generation.
func awaitReconciled(t testing.TB, obj *mcpv1alpha1.MCPServer) {
	t.Helper()
	testutil.Eventually(t, eventually, "the generation of "+obj.Name+" reconciled", func() error {
		got, err := fetch(obj)
		if err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("observedGeneration %d of %d", got.Status.ObservedGeneration, got.Generation)
		}
		return nil
	})
}

// conditionIs says how obj's condition condType is not want with reason (any reason when
// reason is "") and a message that says each of says.
func conditionIs(obj *mcpv1alpha1.MCPServer, condType string, want metav1.ConditionStatus, reason string, says ...string) error {
	return conditionIn(obj.Status.Conditions, condType, want, reason, says...)
}

// conditionIn is conditionIs for any kind's conditions.
func conditionIn(conditions []metav1.Condition, condType string, want metav1.ConditionStatus, reason string, says ...string) error {
	c := meta.FindStatusCondition(conditions, condType)
	if c == nil || c.Status != want || reason != "" && c.Reason != reason {
		return fmt.Errorf("%s is %+v, want %s %s", condType, c, want, reason)
	}
	for _, s := range says {
		if !strings.Contains(c.Message, s) {
			return fmt.Errorf("the %s message %q does not say %q", condType, c.Message, s)
		}
	}
	return nil
}

// kstatusIs says what kstatus makes of obj when it is not want.
func kstatusIs(t testing.TB, obj runtime.Object, want status.Status) error {
	if got := testutil.KStatus(t, obj); got != want {
		return fmt.Errorf("kstatus %s, want %s", got, want)
	}
	return nil
}

// toolNames are the names of the tools status lists.
func toolNames(obj *mcpv1alpha1.MCPServer) []string {
	names := make([]string, 0, len(obj.Status.Tools))
	for _, tool := range obj.Status.Tools {
		names = append(names, tool.Name)
	}
	return names
}

func TestApplyBecomesReadyWithTools(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 3)

	obj := httpServer(ns, "fixture", srv.url())
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())

	ready := awaitReady(t, obj, metav1.ConditionTrue, "")

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
	// The finalizer that closes the session on deletion is there.
	testutil.Eventually(t, eventually, "the session finalizer", func() error {
		got, err := fetch(obj)
		if err != nil {
			return err
		}
		if !slices.Contains(got.Finalizers, "mcp.switchboard.dev/session") {
			return fmt.Errorf("finalizers %q", got.Finalizers)
		}
		return nil
	})
	awaitEvent(t, ns, "fixture", "Connected")
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
	testutil.Eventually(t, eventually, "ConnectionRefused, in progress for kstatus", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, "ConnectionRefused")
		if err != nil {
			return err
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionReconciling, metav1.ConditionTrue, ""); err != nil {
			return err
		}
		return kstatusIs(t, got, status.InProgressStatus)
	})
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
	awaitReady(t, obj, metav1.ConditionTrue, "")

	added := time.Now()
	srv.addTool("brand_new_tool")
	testutil.Eventually(t, 5*time.Second, "the new tool in status", func() error {
		got, err := fetch(obj)
		if err != nil {
			return err
		}
		if got.Status.ToolCount != 3 || !slices.Contains(toolNames(got), "brand_new_tool") {
			return fmt.Errorf("toolCount %d, tools %q", got.Status.ToolCount, toolNames(got))
		}
		return nil
	})
	t.Logf("new tool in status %v after it was added on the server", time.Since(added).Round(time.Millisecond))
	awaitEvent(t, ns, "growing", "ToolsChanged")
}

func TestServerOutageAndRecovery(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 1)
	obj := httpServer(ns, "flaky", srv.url())
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())
	awaitReady(t, obj, metav1.ConditionTrue, "")

	srv.stop()
	testutil.Eventually(t, eventually, "not Ready, the connection refused", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, "")
		if err != nil {
			return err
		}
		return conditionIs(got, mcpv1alpha1.ConditionConnected, metav1.ConditionFalse, "ConnectionRefused")
	})
	awaitEvent(t, ns, "flaky", "ConnectionLost")

	srv.start()
	awaitReady(t, obj, metav1.ConditionTrue, "")
	awaitEvent(t, ns, "flaky", "Recovered")
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
	testutil.Eventually(t, eventually, "SecretNotFound naming the Secret, failed for kstatus", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, "SecretNotFound")
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady); !strings.Contains(c.Message, `"api-token"`) {
			return fmt.Errorf("the Ready message %q does not name the Secret", c.Message)
		}
		return kstatusIs(t, got, status.FailedStatus)
	})
	g.Expect(srv.lastAuthorization()).To(BeEmpty(), "no request without the credentials")
	awaitEvent(t, ns, "with-token", "SecretNotFound")

	// Creating the Secret heals the server without touching the MCPServer.
	const first, second = "Bearer first-secret-value-4242", "Bearer rotated-secret-value-9797"
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-token"},
		Data:       map[string][]byte{"token": []byte(first + "\n")},
	}
	g.Expect(k8sClient.Create(ctx, secret)).To(Succeed())
	awaitReady(t, obj, metav1.ConditionTrue, "")
	g.Expect(srv.lastAuthorization()).To(Equal(first))

	// Rotating the token reconnects with the new value.
	secret.Data["token"] = []byte(second)
	g.Expect(k8sClient.Update(ctx, secret)).To(Succeed())
	testutil.Eventually(t, eventually, "a request with the rotated token", func() error {
		if got := srv.lastAuthorization(); got != second {
			return fmt.Errorf("the last request had %d bytes of Authorization, not the rotated token", len(got))
		}
		return nil
	})
	awaitReady(t, obj, metav1.ConditionTrue, "")
	// The live session's metrics, every name, label and value, for the leak check below.
	families, err := op.metrics.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(families).NotTo(BeEmpty())
	metricText := fmt.Sprint(families)
	g.Expect(metricText).To(ContainSubstring(`value:"with-token"`), "the text holds the server's labels")

	// A missing key names the key, not a value.
	secret.Data = map[string][]byte{"other": []byte("x")}
	g.Expect(k8sClient.Update(ctx, secret)).To(Succeed())
	testutil.Eventually(t, eventually, "SecretNotFound naming the key", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, "SecretNotFound")
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady); !strings.Contains(c.Message, `no key "token"`) {
			return fmt.Errorf("the Ready message %q does not name the key", c.Message)
		}
		return nil
	})

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

	testutil.Eventually(t, eventually, "the filtered server Ready with its 89 tools", func() error {
		got, err := readyIs(filtered, metav1.ConditionTrue, "")
		if err != nil {
			return err
		}
		// tool_0000..tool_0099, minus tool_0010..tool_0019 and tool_0099.
		names := toolNames(got)
		if got.Status.ToolCount != 89 || len(names) != 89 || slices.Contains(names, "tool_0015") || slices.Contains(names, "tool_0100") || got.Status.ToolsTruncated {
			return fmt.Errorf("toolCount %d, truncated %v, tools %q", got.Status.ToolCount, got.Status.ToolsTruncated, names)
		}
		return nil
	})

	testutil.Eventually(t, eventually, "the unfiltered server Ready with 1000 tools, 256 in status", func() error {
		got, err := readyIs(everything, metav1.ConditionTrue, "")
		if err != nil {
			return err
		}
		if got.Status.ToolCount != 1000 || len(got.Status.Tools) != 256 || !got.Status.ToolsTruncated {
			return fmt.Errorf("toolCount %d, %d tools in status, truncated %v", got.Status.ToolCount, len(got.Status.Tools), got.Status.ToolsTruncated)
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(got)
		if err != nil {
			return err
		}
		if size := len(fmt.Sprint(u)); size >= 256<<10 {
			return fmt.Errorf("the object is %d bytes, not far below etcd's limit", size)
		}
		return nil
	})
}

func TestSuspendResumeAndDelete(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 1)
	obj := httpServer(ns, "pausable", srv.url())
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	awaitReady(t, obj, metav1.ConditionTrue, "")

	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Suspend = true })
	testutil.Eventually(t, eventually, "Suspended and disconnected", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, "Suspended")
		if err != nil {
			return err
		}
		return conditionIs(got, mcpv1alpha1.ConditionConnected, metav1.ConditionFalse, "")
	})

	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Suspend = false })
	awaitReady(t, obj, metav1.ConditionTrue, "")

	// Deleting while the server is gone still completes at once.
	srv.stop()
	g.Expect(k8sClient.Delete(ctx, obj)).To(Succeed())
	testutil.Eventually(t, eventually, "the deletion to complete while the server is gone", func() error {
		got, err := fetch(obj)
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		if err == nil {
			return fmt.Errorf("still there, finalizers %q", got.Finalizers)
		}
		return nil
	})
}

func TestManagerRestartPicksServersUpAgain(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	first := startOperator(t, ns)
	srv := newMCPServer(t, 2)
	obj := httpServer(ns, "survivor", srv.url())
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())
	awaitReady(t, obj, metav1.ConditionTrue, "")
	first.stop()

	// A tool appears while no operator runs; the new manager must find it.
	srv.addTool("added_while_down")
	startOperator(t, ns)
	testutil.Eventually(t, eventually, "Ready with the tool added while no operator ran", func() error {
		got, err := readyIs(obj, metav1.ConditionTrue, "")
		if err != nil {
			return err
		}
		if got.Status.ToolCount != 3 {
			return fmt.Errorf("toolCount %d, want 3", got.Status.ToolCount)
		}
		return nil
	})
}

func TestHealthyServerWritesNothing(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	startOperator(t, ns)
	srv := newMCPServer(t, 2)
	obj := httpServer(ns, "quiet", srv.url())
	g.Expect(k8sClient.Create(context.Background(), obj)).To(Succeed())
	awaitReady(t, obj, metav1.ConditionTrue, "")
	// Let the first few probes settle, then watch ten probe intervals.
	time.Sleep(2 * probeInterval)
	ready := get(g, obj)
	time.Sleep(10 * probeInterval)
	after := get(g, obj)
	g.Expect(after.ResourceVersion).To(Equal(ready.ResourceVersion), "a healthy server's probes must not write status")
}

// patchSpec changes obj's spec with a merge patch, retrying on conflicts.
func patchSpec(t testing.TB, obj *mcpv1alpha1.MCPServer, mutate func(*mcpv1alpha1.MCPServer)) {
	t.Helper()
	testutil.Eventually(t, eventually, "the spec of "+obj.Name+" patched", func() error {
		cur := &mcpv1alpha1.MCPServer{}
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		before := cur.DeepCopy()
		mutate(cur)
		return k8sClient.Patch(context.Background(), cur, client.MergeFrom(before))
	})
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
	testutil.Eventually(t, eventually, "Connecting, in progress for kstatus", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, mcpv1alpha1.ReasonConnecting)
		if err != nil {
			return err
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionReconciling, metav1.ConditionTrue, ""); err != nil {
			return err
		}
		return kstatusIs(t, got, status.InProgressStatus)
	})

	close(release)
	testutil.Eventually(t, eventually, "Ready with 2 tools, current for kstatus", func() error {
		got, err := readyIs(obj, metav1.ConditionTrue, "")
		if err != nil {
			return err
		}
		if got.Status.ToolCount != 2 {
			return fmt.Errorf("toolCount %d, want 2", got.Status.ToolCount)
		}
		return kstatusIs(t, got, status.CurrentStatus)
	})
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
	testutil.Eventually(t, eventually, "Stalled on ToolsChanged, naming both digests", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, mcpv1alpha1.ReasonToolsChanged)
		if err != nil {
			return err
		}
		for _, err := range []error{
			conditionIs(got, mcpv1alpha1.ConditionToolsPinned, metav1.ConditionFalse, mcpv1alpha1.ReasonToolsChanged),
			conditionIs(got, mcpv1alpha1.ConditionStalled, metav1.ConditionTrue, ""),
			kstatusIs(t, got, status.FailedStatus),
		} {
			if err != nil {
				return err
			}
		}
		digest = got.Status.ToolsDigest
		if !strings.HasPrefix(digest, "sha256:") {
			return fmt.Errorf("toolsDigest %q", digest)
		}
		if msg := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionToolsPinned).Message; !strings.Contains(msg, digest) || !strings.Contains(msg, wrong) {
			return fmt.Errorf("the ToolsPinned message %q does not name both digests", msg)
		}
		return nil
	})
	testutil.Eventually(t, eventually, "a Warning ToolsChanged naming the pinned digest", func() error {
		var warnings []string
		for _, e := range events(t, ns, "pinned") {
			if e.Type == corev1.EventTypeWarning {
				if e.Reason == "ToolsChanged" && strings.Contains(e.Note, wrong) {
					return nil
				}
				warnings = append(warnings, e.Reason+": "+e.Note)
			}
		}
		return fmt.Errorf("the Warnings so far: %q", warnings)
	})

	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Tools.PinnedDigest = digest })
	testutil.Eventually(t, eventually, "Ready with the tools matching the pin", func() error {
		got, err := readyIs(obj, metav1.ConditionTrue, "")
		if err != nil {
			return err
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionToolsPinned, metav1.ConditionTrue, mcpv1alpha1.ReasonToolsMatchPinned); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionStalled); c != nil {
			return fmt.Errorf("Stalled is %+v, want it absent", c)
		}
		return kstatusIs(t, got, status.CurrentStatus)
	})
	awaitEvent(t, ns, "pinned", "ToolsPinned")

	// A tool the server adds later leaves the pin again.
	srv.addTool("added_after_review")
	testutil.Eventually(t, eventually, "Stalled on ToolsChanged again with a new digest", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, mcpv1alpha1.ReasonToolsChanged)
		if err != nil {
			return err
		}
		if got.Status.ToolsDigest == digest {
			return fmt.Errorf("toolsDigest is still the pinned %s", digest)
		}
		return conditionIs(got, mcpv1alpha1.ConditionStalled, metav1.ConditionTrue, "")
	})
}
