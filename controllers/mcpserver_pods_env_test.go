package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/controllers"
	"github.com/switchboard-mcp/switchboard/egress"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// The tests here run the Deployment and ReplicaSet controllers of kube-controller-manager,
// so the operator's Deployment gets real ReplicaSets and pods, and the API server's own
// admission (Pod Security) decides what may run. No kubelet runs: each test reports, in
// a pod's status, what a kubelet would, and gives the log lines a kubelet would serve.

// fakeLogs serves the log lines a kubelet would, and records every read.
type fakeLogs struct {
	mu    sync.Mutex
	logs  map[string]string // "pod/container/previous" -> log
	reads []string          // "pod/container/previous", one per read
	opts  []corev1.PodLogOptions
}

func logKey(pod, container string, previous bool) string {
	return fmt.Sprintf("%s/%s/%t", pod, container, previous)
}

func (f *fakeLogs) set(pod, container string, previous bool, log string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.logs == nil {
		f.logs = map[string]string{}
	}
	f.logs[logKey(pod, container, previous)] = log
}

func (f *fakeLogs) TailLogs(_ context.Context, _, pod string, opts *corev1.PodLogOptions) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := logKey(pod, opts.Container, opts.Previous)
	f.reads = append(f.reads, key)
	f.opts = append(f.opts, *opts)
	log, ok := f.logs[key]
	if !ok {
		return nil, fmt.Errorf("previous terminated container %q in pod %q not found", opts.Container, pod)
	}
	return []byte(log), nil
}

// readsOf counts the reads of one log.
func (f *fakeLogs) readsOf(pod, container string, previous bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.reads {
		if r == logKey(pod, container, previous) {
			n++
		}
	}
	return n
}

// withPodLogs gives the pod runtime (withPodRuntime, before it) a log reader.
func withPodLogs(logs controllers.PodLogReader) operatorOption {
	return func(r *controllers.MCPServerReconciler, _ ctrl.Manager) {
		r.Stdio.(*controllers.PodRuntime).Logs = logs
	}
}

// podsOf returns the pods of a server's Deployment that are not being deleted, oldest
// first.
func podsOf(ns, server string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := k8sClient.List(context.Background(), &pods, client.InNamespace(ns),
		client.MatchingLabels{"mcp.switchboard.dev/server": "mcp-" + server}); err != nil {
		return nil, err
	}
	live := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	slices.SortFunc(live, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return live, nil
}

// podNames are the names of pods.
func podNames(pods []corev1.Pod) []string {
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}

// awaitPod waits until exactly one of the server's pods is one that mine says is, and
// returns it.
func awaitPod(t testing.TB, ns, server, what string, mine func(corev1.Pod) bool) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	testutil.Eventually(t, eventually, what, func() error {
		pods, err := podsOf(ns, server)
		if err != nil {
			return err
		}
		all := podNames(pods)
		if pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return !mine(p) }); len(pods) != 1 {
			return fmt.Errorf("%d such pods among %q", len(pods), all)
		}
		pod = pods[0]
		return nil
	})
	return pod
}

// newPodOf waits for a pod of the server's current template (the given image) and
// returns it.
func newPodOf(t testing.TB, ns, server, image string) corev1.Pod {
	t.Helper()
	return awaitPod(t, ns, server, "a pod of "+server+" with image "+image, func(p corev1.Pod) bool { return p.Spec.Containers[0].Image == image })
}

// kubeletReports sets the pod's status as a kubelet that bound it would: scheduled, the
// bridge installed, and the server container in state server.
func kubeletReports(t testing.TB, pod corev1.Pod, server corev1.ContainerStatus) {
	t.Helper()
	testutil.Eventually(t, eventually, "the status of pod "+pod.Name+" updated", func() error {
		cur := &corev1.Pod{}
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(&pod), cur); err != nil {
			return err
		}
		now := metav1.Now()
		ready := corev1.ConditionFalse
		if server.Ready {
			ready = corev1.ConditionTrue
		}
		server.Name, server.Image = "server", cur.Spec.Containers[0].Image
		cur.Status = corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: ready, LastTransitionTime: now},
			},
			InitContainerStatuses: []corev1.ContainerStatus{{
				Name: "install-bridge", Image: cur.Spec.InitContainers[0].Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}},
			}},
			ContainerStatuses: []corev1.ContainerStatus{server},
		}
		return k8sClient.Status().Update(context.Background(), cur)
	})
}

func serverWaiting(reason, message string) corev1.ContainerStatus {
	return corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}
}

func serverCrashLooping(restarts, exitCode int32, containerID string) corev1.ContainerStatus {
	st := serverWaiting("CrashLoopBackOff", "back-off 10s restarting failed container=server")
	st.RestartCount = restarts
	st.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: exitCode, Reason: "Error", ContainerID: containerID}
	return st
}

var serverReady = corev1.ContainerStatus{
	Ready: true, Started: ptr.To(true),
	State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
}

// workloadIs waits for the server's WorkloadAvailable and Ready conditions to carry
// reason, with a message saying each of says, and returns the Ready condition.
func workloadIs(t testing.TB, obj *mcpv1alpha1.MCPServer, reason string, says ...string) *metav1.Condition {
	t.Helper()
	var ready *metav1.Condition
	testutil.Eventually(t, eventually, "WorkloadAvailable and Ready to be False "+reason, func() error {
		got, err := fetch(obj)
		if err != nil {
			return err
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionWorkloadAvailable, metav1.ConditionFalse, reason, says...); err != nil {
			return err
		}
		w := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionWorkloadAvailable)
		ready = meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != reason || ready.Message != w.Message {
			return fmt.Errorf("Ready is %+v, want False %s with the message of WorkloadAvailable %q", ready, reason, w.Message)
		}
		return nil
	})
	return ready
}

// eventsWith returns the server's Events of one reason.
func eventsWith(t *testing.T, obj *mcpv1alpha1.MCPServer, reason string) []eventsv1.Event {
	t.Helper()
	return slices.DeleteFunc(events(t, obj.Namespace, obj.Name), func(e eventsv1.Event) bool { return e.Reason != reason })
}

// announced waits for exactly one Event of the reason whose note says each of says.
func announced(t *testing.T, obj *mcpv1alpha1.MCPServer, eventType, reason string, says ...string) {
	t.Helper()
	testutil.Eventually(t, eventually, "one "+eventType+" Event "+reason, func() error {
		got := eventsWith(t, obj, reason)
		if len(got) != 1 || got[0].Type != eventType {
			return fmt.Errorf("the %s Events so far: %+v", reason, got)
		}
		for _, s := range says {
			if !strings.Contains(got[0].Note, s) {
				return fmt.Errorf("the Event's note %q does not say %q", got[0].Note, s)
			}
		}
		return nil
	})
}

// availableAgain waits for WorkloadAvailable=True and a Ready reason that is no longer the
// workload's (no kubelet serves the bridge here, so the session never connects).
func availableAgain(t testing.TB, obj *mcpv1alpha1.MCPServer) {
	t.Helper()
	testutil.Eventually(t, eventually, "the workload available again", func() error {
		got, err := fetch(obj)
		if err != nil {
			return err
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionWorkloadAvailable, metav1.ConditionTrue, ""); err != nil {
			return err
		}
		if _, reason := condition(got, mcpv1alpha1.ConditionReady); !slices.Contains([]string{"Connecting", "DNSFailure", "ConnectionRefused", "Timeout"}, reason) {
			return fmt.Errorf("Ready's reason is %q, still the workload's", reason)
		}
		return nil
	})
}

// TestStdioPodThatCannotRunSaysWhy walks one server through what a kubelet reports about
// a pod that cannot run (an image that is not there, a command the image lacks, a server
// that keeps exiting), then fixes the manifest: each failure is Ready=False with the
// kubelet's reason and message and one Event, the log tail is read once per container
// instance, and the server recovers by itself.
func TestStdioPodThatCannotRunSaysWhy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	logs := &fakeLogs{}
	startOperator(t, ns, withPodRuntime(), withPodLogs(logs))
	env.StartControllerManager(t, "deployment", "replicaset")

	obj := stdioServer(ns, "failing")
	obj.Spec.Stdio.Image = "ghcr.io/acme/missing:1"
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	pod := newPodOf(t, ns, "failing", "ghcr.io/acme/missing:1")
	workloadIs(t, obj, mcpv1alpha1.ReasonWorkloadUnavailable, "Pod "+pod.Name+" is pending")

	// An image that is not there.
	kubeletReports(t, pod, serverWaiting("ErrImagePull",
		`failed to pull and unpack image "ghcr.io/acme/missing:1": failed to resolve reference "ghcr.io/acme/missing:1": ghcr.io/acme/missing:1: not found`))
	workloadIs(t, obj, mcpv1alpha1.ReasonImagePullFailed,
		"Pod "+pod.Name+`: container server cannot pull image "ghcr.io/acme/missing:1": ErrImagePull:`, "not found")
	announced(t, obj, corev1.EventTypeWarning, mcpv1alpha1.ReasonImagePullFailed, "ghcr.io/acme/missing:1", "not found")
	// The kubelet backs off: the same failure, not a new one to announce.
	kubeletReports(t, pod, serverWaiting("ImagePullBackOff", `Back-off pulling image "ghcr.io/acme/missing:1"`))
	workloadIs(t, obj, mcpv1alpha1.ReasonImagePullFailed, "ImagePullBackOff")

	// The image is there, without the command: the bridge says so and exits.
	logs.set(pod.Name, "server", true,
		`{"level":"error","ts":"2026-01-01T00:00:00Z","logger":"bridge","msg":"Cannot run the MCP server","command":"node","error":"mcp server command \"node\": executable file not found in $PATH"}`+"\n")
	kubeletReports(t, pod, serverCrashLooping(1, 1, "containerd://one"))
	ready := workloadIs(t, obj, mcpv1alpha1.ReasonServerExited,
		"Pod "+pod.Name+": container server exited with code 1 (Error), restarted 1 times",
		`last log lines: Cannot run the MCP server: mcp server command "node": executable file not found in $PATH`)
	g.Expect(ready.Message).NotTo(ContainSubstring("\n"))
	announced(t, obj, corev1.EventTypeWarning, mcpv1alpha1.ReasonServerExited, `mcp server command "node": executable file not found`)
	g.Expect(logs.opts).NotTo(BeEmpty())
	for _, o := range logs.opts {
		g.Expect(o.Container).To(Equal("server"))
		g.Expect(o.TailLines).To(HaveValue(BeNumerically(">", 0)))
		g.Expect(o.LimitBytes).To(HaveValue(BeNumerically(">", 0)))
	}

	// More reconciles of the same crashed instance read its log no more.
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Description = "reconcile again" })
	testutil.Eventually(t, eventually, "the new generation reconciled", func() error {
		got, err := fetch(obj)
		if err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("observedGeneration %d of %d", got.Status.ObservedGeneration, got.Generation)
		}
		return nil
	})
	g.Expect(logs.readsOf(pod.Name, "server", true)).To(Equal(1), "one log read per container instance")

	// It is restarted and exits again, saying something else: one more read.
	logs.set(pod.Name, "server", true,
		`{"level":"info","logger":"bridge","msg":"MCP server stderr","pid":9,"line":"Error: Cannot find module '/app/dist/index.js'"}`+"\n"+
			`{"level":"error","logger":"bridge","msg":"Cannot run the MCP server","command":"node","error":"mcp server command \"node\": exited 87ms after it started: exit status 1"}`+"\n")
	kubeletReports(t, pod, serverCrashLooping(2, 1, "containerd://two"))
	workloadIs(t, obj, mcpv1alpha1.ReasonServerExited, "restarted 2 times",
		"MCP server stderr: Error: Cannot find module '/app/dist/index.js' | Cannot run the MCP server: mcp server command \"node\": exited 87ms after it started: exit status 1")
	g.Expect(logs.readsOf(pod.Name, "server", true)).To(Equal(2))
	g.Expect(eventsWith(t, obj, mcpv1alpha1.ReasonServerExited)).To(HaveLen(1), "a crash loop is one reason, announced once")

	// The manifest is fixed: a new ReplicaSet's pod runs, and the old pod's crash loop is
	// not what the server waits for.
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Stdio.Image = "ghcr.io/acme/server:2" })
	fixed := newPodOf(t, ns, "failing", "ghcr.io/acme/server:2")
	workloadIs(t, obj, mcpv1alpha1.ReasonWorkloadUnavailable, "Pod "+fixed.Name+" is pending")
	kubeletReports(t, fixed, serverReady)
	availableAgain(t, obj)
	announced(t, obj, corev1.EventTypeNormal, "WorkloadAvailable", "has 1 available replica(s); it had none for")
}

// TestStdioPodRefusedInARestrictedNamespace runs a server in a namespace whose Pod
// Security level is restricted: the API server refuses a pod that may run as root, and
// says why; with runAsNonRoot, an image that runs as root is the kubelet's refusal; with
// a user, the server runs.
func TestStdioPodRefusedInARestrictedNamespace(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "mcps-restricted-",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	g.Expect(k8sClient.Create(ctx, namespace)).To(Succeed())
	ns := namespace.Name
	startOperator(t, ns, withPodRuntime(), withPodLogs(&fakeLogs{}))
	env.StartControllerManager(t, "deployment", "replicaset")

	obj := stdioServer(ns, "rooted")
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	workloadIs(t, obj, mcpv1alpha1.ReasonPodRejected,
		"cannot create a pod:", `violates PodSecurity "restricted:latest"`, "runAsNonRoot != true")
	announced(t, obj, corev1.EventTypeWarning, mcpv1alpha1.ReasonPodRejected, `violates PodSecurity "restricted:latest"`)

	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) {
		o.Spec.Stdio.SecurityContext = &mcpv1alpha1.StdioSecurityContext{RunAsNonRoot: ptr.To(true)}
	})
	pod := awaitPod(t, ns, "rooted", "admission to let a pod that must not run as root in", func(corev1.Pod) bool { return true })
	kubeletReports(t, pod, serverWaiting("CreateContainerConfigError",
		`container has runAsNonRoot and image will run as root (pod: "`+pod.Name+"_"+ns+`(`+string(pod.UID)+`)", container: server)`))
	workloadIs(t, obj, mcpv1alpha1.ReasonContainerConfigInvalid,
		"Pod "+pod.Name+": container server cannot be created: CreateContainerConfigError: container has runAsNonRoot and image will run as root")
	announced(t, obj, corev1.EventTypeWarning, mcpv1alpha1.ReasonContainerConfigInvalid, "image will run as root")

	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Stdio.SecurityContext.RunAsUser = ptr.To[int64](1000) })
	fixed := awaitPod(t, ns, "rooted", "a pod that runs as a user", func(p corev1.Pod) bool { return p.Spec.Containers[0].SecurityContext.RunAsUser != nil })
	kubeletReports(t, fixed, serverReady)
	availableAgain(t, obj)
	announced(t, obj, corev1.EventTypeNormal, "WorkloadAvailable", "has 1 available replica(s); it had none for")
}

// TestStdioPodDeletedComesBack deletes the running pod of a server: while its replacement
// starts, the status names both; once it runs, an Event records what happened in between.
func TestStdioPodDeletedComesBack(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns, withPodRuntime(), withPodLogs(&fakeLogs{}))
	env.StartControllerManager(t, "deployment", "replicaset")

	obj := stdioServer(ns, "phoenix")
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	first := newPodOf(t, ns, "phoenix", obj.Spec.Stdio.Image)
	// Bound to a node, as the scheduler would: its deletion then waits for that node's
	// kubelet, which never comes, so it stays being deleted.
	g.Expect(k8sClient.SubResource("binding").Create(ctx, &first, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: first.Name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "node-1"},
	})).To(Succeed())
	// The first pod is seen waiting before it runs, as a kubelet's pod is: otherwise a
	// busy controller may first look once it already runs, and nothing was unavailable.
	kubeletReports(t, first, serverWaiting("ContainerCreating", ""))
	workloadIs(t, obj, mcpv1alpha1.ReasonWorkloadUnavailable, "Pod "+first.Name+": container server is waiting: ContainerCreating")
	kubeletReports(t, first, serverReady)
	availableAgain(t, obj)
	testutil.Eventually(t, eventually, "one Event WorkloadAvailable", func() error {
		if got := eventsWith(t, obj, "WorkloadAvailable"); len(got) != 1 {
			return fmt.Errorf("the WorkloadAvailable Events so far: %+v", got)
		}
		return nil
	})

	g.Expect(k8sClient.Delete(ctx, &first)).To(Succeed())
	second := newPodOf(t, ns, "phoenix", obj.Spec.Stdio.Image)
	g.Expect(second.Name).NotTo(Equal(first.Name))
	kubeletReports(t, second, serverWaiting("ContainerCreating", ""))
	workloadIs(t, obj, mcpv1alpha1.ReasonWorkloadUnavailable,
		"Pod "+second.Name+": container server is waiting: ContainerCreating; it replaces pod "+first.Name+", which is being deleted")

	// What happened is on record: the outage began with the pod being deleted...
	announced(t, obj, corev1.EventTypeWarning, mcpv1alpha1.ReasonWorkloadUnavailable, first.Name, "being deleted")

	// ... and ended once its replacement ran.
	kubeletReports(t, second, serverReady)
	availableAgain(t, obj)
	testutil.Eventually(t, eventually, "a second Event WorkloadAvailable, naming the replacement and the outage", func() error {
		got := eventsWith(t, obj, "WorkloadAvailable")
		if len(got) == 2 && slices.ContainsFunc(got, func(e eventsv1.Event) bool {
			return strings.Contains(e.Note, "it had none for") && strings.Contains(e.Note, "Pod "+second.Name)
		}) {
			return nil
		}
		return fmt.Errorf("the WorkloadAvailable Events so far: %+v", got)
	})
	g.Expect(strings.Join(eventReasons(t, ns, obj.Name), ",")).NotTo(ContainSubstring(mcpv1alpha1.ReasonServerExited))
}

// bridgeAt is the pod runtime with its bridge's endpoint replaced by url: no kubelet runs
// here to serve the Service, so an MCP server on loopback stands for the bridge of
// whichever pod the Service sends the session to.
type bridgeAt struct {
	*controllers.PodRuntime
	url string
}

func (b bridgeAt) Ensure(ctx context.Context, obj *mcpv1alpha1.MCPServer, rules *egress.ServerRules) (controllers.WorkloadStatus, error) {
	st, err := b.PodRuntime.Ensure(ctx, obj, rules)
	st.Endpoint = b.url
	return st, err
}

// withBridgeAt makes the pod runtime (withPodRuntime, before it) reach its bridge at url.
func withBridgeAt(url string) operatorOption {
	return func(r *controllers.MCPServerReconciler, _ ctrl.Manager) {
		r.Stdio = bridgeAt{PodRuntime: r.Stdio.(*controllers.PodRuntime), url: url}
	}
}

// TestStdioRolloutThatCannotRunIsNotDone edits a Ready stdio server to an image whose
// pod cannot be pulled: the Deployment keeps the previous pod serving, and the server
// keeps serving through it (Ready, for the gateway), but does not claim that the new
// generation runs: a GitOps tool waiting with kstatus sees it in progress, with the
// kubelet's reason, and a Warning Event says it once. Fixed, it is Current again.
func TestStdioRolloutThatCannotRunIsNotDone(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	bridge := newMCPServer(t, 2)
	startOperator(t, ns, withPodRuntime(), withPodLogs(&fakeLogs{}), withBridgeAt(bridge.url()))
	env.StartControllerManager(t, "deployment", "replicaset")

	obj := stdioServer(ns, "rolling")
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	serving := newPodOf(t, ns, "rolling", obj.Spec.Stdio.Image)
	kubeletReports(t, serving, serverReady)
	current := func() (*mcpv1alpha1.MCPServer, error) {
		got, err := readyIs(obj, metav1.ConditionTrue, "")
		if err != nil {
			return nil, err
		}
		if err := kstatusIs(t, got, status.CurrentStatus); err != nil {
			return nil, fmt.Errorf("%w; conditions %+v", err, got.Status.Conditions)
		}
		if got.Status.ObservedGeneration != got.Generation || got.Status.ToolCount != 2 {
			return nil, fmt.Errorf("observedGeneration %d of %d, toolCount %d", got.Status.ObservedGeneration, got.Generation, got.Status.ToolCount)
		}
		return got, nil
	}
	testutil.Eventually(t, eventually, "Current for kstatus, Ready with 2 tools", func() error { _, err := current(); return err })
	since := meta.FindStatusCondition(get(g, obj).Status.Conditions, mcpv1alpha1.ConditionReady).LastTransitionTime

	// An image that cannot be pulled: the new ReplicaSet's pod waits for it, and the
	// Deployment keeps the previous pod, which stays ready.
	const broken = "ghcr.io/acme/server:broken"
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Stdio.Image = broken })
	pod := newPodOf(t, ns, "rolling", broken)
	kubeletReports(t, pod, serverWaiting("ErrImagePull",
		`failed to pull and unpack image "`+broken+`": failed to resolve reference "`+broken+`": not found`))
	testutil.Eventually(t, eventually, "in progress for kstatus, the previous version serving", func() error {
		got, err := fetch(obj)
		if err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("observedGeneration %d of %d", got.Status.ObservedGeneration, got.Generation)
		}
		if err := kstatusIs(t, got, status.InProgressStatus); err != nil {
			return fmt.Errorf("%w; conditions %+v", err, got.Status.Conditions)
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionReconciling, metav1.ConditionTrue, mcpv1alpha1.ReasonImagePullFailed,
			"previous version keeps serving", "Pod "+pod.Name+`: container server cannot pull image "`+broken+`": ErrImagePull:`); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionStalled); c != nil {
			return fmt.Errorf("Stalled is %+v, want it absent", c)
		}

		// The previous version still serves: the gateway takes calls for a server that is
		// Ready at its current generation.
		if err := conditionIs(got, mcpv1alpha1.ConditionReady, metav1.ConditionTrue, "", "previous version keeps serving", "cannot pull image"); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady)
		if ready.ObservedGeneration != got.Generation {
			return fmt.Errorf("Ready observed generation %d of %d", ready.ObservedGeneration, got.Generation)
		}
		if !ready.LastTransitionTime.Equal(&since) {
			return fmt.Errorf("Ready changed at %s, after %s: the session was dropped", ready.LastTransitionTime, since)
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionWorkloadAvailable, metav1.ConditionTrue, ""); err != nil {
			return err
		}
		return conditionIs(got, mcpv1alpha1.ConditionConnected, metav1.ConditionTrue, "")
	})
	if pods, err := podsOf(ns, "rolling"); err != nil || !slices.Contains(podNames(pods), serving.Name) {
		t.Errorf("the previous pod %s does not keep running: pods %q, %v", serving.Name, podNames(pods), err)
	}
	announced(t, obj, corev1.EventTypeWarning, mcpv1alpha1.ReasonImagePullFailed, broken, "not found")
	// The kubelet backs off: the same failure, not a new one to announce.
	kubeletReports(t, pod, serverWaiting("ImagePullBackOff", `Back-off pulling image "`+broken+`"`))
	testutil.Eventually(t, eventually, "Reconciling to say ImagePullBackOff", func() error {
		got, err := fetch(obj)
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReconciling); c == nil || !strings.Contains(c.Message, "ImagePullBackOff") {
			return fmt.Errorf("Reconciling is %+v", c)
		}
		return nil
	})
	g.Expect(eventsWith(t, obj, mcpv1alpha1.ReasonImagePullFailed)).To(HaveLen(1))

	// Fixed: the new pod runs, replaces the previous one, and the server is Current.
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Stdio.Image = "ghcr.io/acme/server:2" })
	fixed := newPodOf(t, ns, "rolling", "ghcr.io/acme/server:2")
	kubeletReports(t, fixed, serverReady)
	testutil.Eventually(t, eventually, "Current again with only the fixed pod", func() error {
		got, err := current()
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReconciling); c != nil {
			return fmt.Errorf("Reconciling is %+v, want it absent", c)
		}
		pods, err := podsOf(ns, "rolling")
		if err != nil {
			return err
		}
		if names := podNames(pods); !slices.Equal(names, []string{fixed.Name}) {
			return fmt.Errorf("pods %q, want only %s", names, fixed.Name)
		}
		return nil
	})
}
