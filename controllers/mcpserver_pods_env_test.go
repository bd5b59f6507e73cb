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
func podsOf(g Gomega, ns, server string) []corev1.Pod {
	var pods corev1.PodList
	g.Expect(k8sClient.List(context.Background(), &pods, client.InNamespace(ns),
		client.MatchingLabels{"mcp.switchboard.dev/server": "mcp-" + server})).To(Succeed())
	live := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	slices.SortFunc(live, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return live
}

// newPodOf waits for a pod of the server's current template (the given image) and
// returns it.
func newPodOf(g Gomega, ns, server, image string) corev1.Pod {
	var pod corev1.Pod
	g.Eventually(func(g Gomega) {
		pods := podsOf(g, ns, server)
		pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.Spec.Containers[0].Image != image })
		g.Expect(pods).To(HaveLen(1))
		pod = pods[0]
	}, eventually, poll).Should(Succeed())
	return pod
}

// kubeletReports sets the pod's status as a kubelet that bound it would: scheduled, the
// bridge installed, and the server container in state server.
func kubeletReports(g Gomega, pod corev1.Pod, server corev1.ContainerStatus) {
	g.Eventually(func() error {
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
	}, eventually, poll).Should(Succeed())
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
func workloadIs(g Gomega, obj *mcpv1alpha1.MCPServer, reason string, says ...string) *metav1.Condition {
	var ready *metav1.Condition
	g.Eventually(func(g Gomega) {
		got := get(g, obj)
		w := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionWorkloadAvailable)
		g.Expect(w).NotTo(BeNil())
		g.Expect(w.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(w.Reason).To(Equal(reason), "WorkloadAvailable: %s", w.Message)
		for _, s := range says {
			g.Expect(w.Message).To(ContainSubstring(s))
		}
		ready = meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady)
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(reason))
		g.Expect(ready.Message).To(Equal(w.Message))
	}, eventually, poll).Should(Succeed())
	return ready
}

// eventsWith returns the server's Events of one reason.
func eventsWith(t *testing.T, obj *mcpv1alpha1.MCPServer, reason string) []eventsv1.Event {
	t.Helper()
	return slices.DeleteFunc(events(t, obj.Namespace, obj.Name), func(e eventsv1.Event) bool { return e.Reason != reason })
}

// announced waits for exactly one Event of the reason whose note says each of says.
func announced(t *testing.T, g Gomega, obj *mcpv1alpha1.MCPServer, eventType, reason string, says ...string) {
	t.Helper()
	g.Eventually(func(g Gomega) {
		got := eventsWith(t, obj, reason)
		g.Expect(got).To(HaveLen(1))
		g.Expect(got[0].Type).To(Equal(eventType))
		for _, s := range says {
			g.Expect(got[0].Note).To(ContainSubstring(s))
		}
	}, eventually, poll).Should(Succeed())
}

// availableAgain waits for WorkloadAvailable=True and a Ready reason that is no longer the
// workload's (no kubelet serves the bridge here, so the session never connects).
func availableAgain(g Gomega, obj *mcpv1alpha1.MCPServer) {
	g.Eventually(func(g Gomega) {
		got := get(g, obj)
		st, _ := condition(got, mcpv1alpha1.ConditionWorkloadAvailable)
		g.Expect(st).To(Equal(metav1.ConditionTrue))
		_, reason := condition(got, mcpv1alpha1.ConditionReady)
		g.Expect(reason).To(BeElementOf("Connecting", "DNSFailure", "ConnectionRefused", "Timeout"))
	}, eventually, poll).Should(Succeed())
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
	pod := newPodOf(g, ns, "failing", "ghcr.io/acme/missing:1")
	workloadIs(g, obj, mcpv1alpha1.ReasonWorkloadUnavailable, "Pod "+pod.Name+" is pending")

	// An image that is not there.
	kubeletReports(g, pod, serverWaiting("ErrImagePull",
		`failed to pull and unpack image "ghcr.io/acme/missing:1": failed to resolve reference "ghcr.io/acme/missing:1": ghcr.io/acme/missing:1: not found`))
	workloadIs(g, obj, mcpv1alpha1.ReasonImagePullFailed,
		"Pod "+pod.Name+`: container server cannot pull image "ghcr.io/acme/missing:1": ErrImagePull:`, "not found")
	announced(t, g, obj, corev1.EventTypeWarning, mcpv1alpha1.ReasonImagePullFailed, "ghcr.io/acme/missing:1", "not found")
	// The kubelet backs off: the same failure, not a new one to announce.
	kubeletReports(g, pod, serverWaiting("ImagePullBackOff", `Back-off pulling image "ghcr.io/acme/missing:1"`))
	workloadIs(g, obj, mcpv1alpha1.ReasonImagePullFailed, "ImagePullBackOff")

	// The image is there, without the command: the bridge says so and exits.
	logs.set(pod.Name, "server", true,
		`{"level":"error","ts":"2026-01-01T00:00:00Z","logger":"bridge","msg":"Cannot run the MCP server","command":"node","error":"mcp server command \"node\": executable file not found in $PATH"}`+"\n")
	kubeletReports(g, pod, serverCrashLooping(1, 1, "containerd://one"))
	ready := workloadIs(g, obj, mcpv1alpha1.ReasonServerExited,
		"Pod "+pod.Name+": container server exited with code 1 (Error), restarted 1 times",
		`last log lines: Cannot run the MCP server: mcp server command "node": executable file not found in $PATH`)
	g.Expect(ready.Message).NotTo(ContainSubstring("\n"))
	announced(t, g, obj, corev1.EventTypeWarning, mcpv1alpha1.ReasonServerExited, `mcp server command "node": executable file not found`)
	g.Expect(logs.opts).NotTo(BeEmpty())
	for _, o := range logs.opts {
		g.Expect(o.Container).To(Equal("server"))
		g.Expect(o.TailLines).To(HaveValue(BeNumerically(">", 0)))
		g.Expect(o.LimitBytes).To(HaveValue(BeNumerically(">", 0)))
	}

	// More reconciles of the same crashed instance read its log no more.
	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Description = "reconcile again" })
	g.Eventually(func(g Gomega) {
		got := get(g, obj)
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
	}, eventually, poll).Should(Succeed())
	g.Expect(logs.readsOf(pod.Name, "server", true)).To(Equal(1), "one log read per container instance")

	// It is restarted and exits again, saying something else: one more read.
	logs.set(pod.Name, "server", true,
		`{"level":"info","logger":"bridge","msg":"MCP server stderr","pid":9,"line":"Error: Cannot find module '/app/dist/index.js'"}`+"\n"+
			`{"level":"error","logger":"bridge","msg":"Cannot run the MCP server","command":"node","error":"mcp server command \"node\": exited 87ms after it started: exit status 1"}`+"\n")
	kubeletReports(g, pod, serverCrashLooping(2, 1, "containerd://two"))
	workloadIs(g, obj, mcpv1alpha1.ReasonServerExited, "restarted 2 times",
		"MCP server stderr: Error: Cannot find module '/app/dist/index.js' | Cannot run the MCP server: mcp server command \"node\": exited 87ms after it started: exit status 1")
	g.Expect(logs.readsOf(pod.Name, "server", true)).To(Equal(2))
	g.Expect(eventsWith(t, obj, mcpv1alpha1.ReasonServerExited)).To(HaveLen(1), "a crash loop is one reason, announced once")

	// The manifest is fixed: a new ReplicaSet's pod runs, and the old pod's crash loop is
	// not what the server waits for.
	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Stdio.Image = "ghcr.io/acme/server:2" })
	fixed := newPodOf(g, ns, "failing", "ghcr.io/acme/server:2")
	workloadIs(g, obj, mcpv1alpha1.ReasonWorkloadUnavailable, "Pod "+fixed.Name+" is pending")
	kubeletReports(g, fixed, serverReady)
	availableAgain(g, obj)
	announced(t, g, obj, corev1.EventTypeNormal, "WorkloadAvailable", "has 1 available replica(s); it had none for")
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
	workloadIs(g, obj, mcpv1alpha1.ReasonPodRejected,
		"cannot create a pod:", `violates PodSecurity "restricted:latest"`, "runAsNonRoot != true")
	announced(t, g, obj, corev1.EventTypeWarning, mcpv1alpha1.ReasonPodRejected, `violates PodSecurity "restricted:latest"`)

	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) {
		o.Spec.Stdio.SecurityContext = &mcpv1alpha1.StdioSecurityContext{RunAsNonRoot: ptr.To(true)}
	})
	var pod corev1.Pod
	g.Eventually(func(g Gomega) {
		pods := podsOf(g, ns, "rooted")
		g.Expect(pods).To(HaveLen(1))
		pod = pods[0]
	}, eventually, poll).Should(Succeed(), "admission lets a pod that must not run as root in")
	kubeletReports(g, pod, serverWaiting("CreateContainerConfigError",
		`container has runAsNonRoot and image will run as root (pod: "`+pod.Name+"_"+ns+`(`+string(pod.UID)+`)", container: server)`))
	workloadIs(g, obj, mcpv1alpha1.ReasonContainerConfigInvalid,
		"Pod "+pod.Name+": container server cannot be created: CreateContainerConfigError: container has runAsNonRoot and image will run as root")
	announced(t, g, obj, corev1.EventTypeWarning, mcpv1alpha1.ReasonContainerConfigInvalid, "image will run as root")

	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Stdio.SecurityContext.RunAsUser = ptr.To[int64](1000) })
	var fixed corev1.Pod
	g.Eventually(func(g Gomega) {
		pods := podsOf(g, ns, "rooted")
		pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.Spec.Containers[0].SecurityContext.RunAsUser == nil })
		g.Expect(pods).To(HaveLen(1))
		fixed = pods[0]
	}, eventually, poll).Should(Succeed())
	kubeletReports(g, fixed, serverReady)
	availableAgain(g, obj)
	announced(t, g, obj, corev1.EventTypeNormal, "WorkloadAvailable", "has 1 available replica(s); it had none for")
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
	first := newPodOf(g, ns, "phoenix", obj.Spec.Stdio.Image)
	// Bound to a node, as the scheduler would: its deletion then waits for that node's
	// kubelet, which never comes, so it stays being deleted.
	g.Expect(k8sClient.SubResource("binding").Create(ctx, &first, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: first.Name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "node-1"},
	})).To(Succeed())
	kubeletReports(g, first, serverReady)
	availableAgain(g, obj)
	g.Eventually(func() []eventsv1.Event { return eventsWith(t, obj, "WorkloadAvailable") }, eventually, poll).Should(HaveLen(1))

	g.Expect(k8sClient.Delete(ctx, &first)).To(Succeed())
	second := newPodOf(g, ns, "phoenix", obj.Spec.Stdio.Image)
	g.Expect(second.Name).NotTo(Equal(first.Name))
	kubeletReports(g, second, serverWaiting("ContainerCreating", ""))
	workloadIs(g, obj, mcpv1alpha1.ReasonWorkloadUnavailable,
		"Pod "+second.Name+": container server is waiting: ContainerCreating; it replaces pod "+first.Name+", which is being deleted")

	// What happened is on record: the outage began with the pod being deleted...
	announced(t, g, obj, corev1.EventTypeWarning, mcpv1alpha1.ReasonWorkloadUnavailable, first.Name, "being deleted")

	// ... and ended once its replacement ran.
	kubeletReports(g, second, serverReady)
	availableAgain(g, obj)
	g.Eventually(func(g Gomega) {
		got := eventsWith(t, obj, "WorkloadAvailable")
		g.Expect(got).To(HaveLen(2))
		g.Expect([]string{got[0].Note, got[1].Note}).To(ContainElement(And(
			ContainSubstring("it had none for"), ContainSubstring("Pod "+second.Name))))
	}, eventually, poll).Should(Succeed())
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
	serving := newPodOf(g, ns, "rolling", obj.Spec.Stdio.Image)
	kubeletReports(g, serving, serverReady)
	current := func(g Gomega) {
		got := get(g, obj)
		g.Expect(testutil.KStatus(t, got)).To(Equal(status.CurrentStatus), "conditions %+v", got.Status.Conditions)
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		st, _ := condition(got, mcpv1alpha1.ConditionReady)
		g.Expect(st).To(Equal(metav1.ConditionTrue))
		g.Expect(got.Status.ToolCount).To(BeEquivalentTo(2))
	}
	g.Eventually(current, eventually, poll).Should(Succeed())
	since := meta.FindStatusCondition(get(g, obj).Status.Conditions, mcpv1alpha1.ConditionReady).LastTransitionTime

	// An image that cannot be pulled: the new ReplicaSet's pod waits for it, and the
	// Deployment keeps the previous pod, which stays ready.
	const broken = "ghcr.io/acme/server:broken"
	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Stdio.Image = broken })
	pod := newPodOf(g, ns, "rolling", broken)
	kubeletReports(g, pod, serverWaiting("ErrImagePull",
		`failed to pull and unpack image "`+broken+`": failed to resolve reference "`+broken+`": not found`))
	g.Eventually(func(g Gomega) {
		got := get(g, obj)
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(testutil.KStatus(t, got)).To(Equal(status.InProgressStatus), "conditions %+v", got.Status.Conditions)
		rec := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReconciling)
		g.Expect(rec).NotTo(BeNil())
		g.Expect(rec.Reason).To(Equal(mcpv1alpha1.ReasonImagePullFailed))
		g.Expect(rec.Message).To(ContainSubstring("previous version keeps serving"))
		g.Expect(rec.Message).To(ContainSubstring("Pod " + pod.Name + `: container server cannot pull image "` + broken + `": ErrImagePull:`))
		g.Expect(meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionStalled)).To(BeNil())

		// The previous version still serves: the gateway takes calls for a server that is
		// Ready at its current generation.
		ready := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady)
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(ready.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(ready.LastTransitionTime).To(Equal(since), "Ready never went False: the session was never dropped")
		g.Expect(ready.Message).To(ContainSubstring("previous version keeps serving"))
		g.Expect(ready.Message).To(ContainSubstring("cannot pull image"))
		st, _ := condition(got, mcpv1alpha1.ConditionWorkloadAvailable)
		g.Expect(st).To(Equal(metav1.ConditionTrue))
		st, _ = condition(got, mcpv1alpha1.ConditionConnected)
		g.Expect(st).To(Equal(metav1.ConditionTrue))
	}, eventually, poll).Should(Succeed())
	g.Expect(podsOf(g, ns, "rolling")).To(ContainElement(HaveField("Name", serving.Name)), "the previous pod keeps running")
	announced(t, g, obj, corev1.EventTypeWarning, mcpv1alpha1.ReasonImagePullFailed, broken, "not found")
	// The kubelet backs off: the same failure, not a new one to announce.
	kubeletReports(g, pod, serverWaiting("ImagePullBackOff", `Back-off pulling image "`+broken+`"`))
	g.Eventually(func(g Gomega) {
		c := meta.FindStatusCondition(get(g, obj).Status.Conditions, mcpv1alpha1.ConditionReconciling)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Message).To(ContainSubstring("ImagePullBackOff"))
	}, eventually, poll).Should(Succeed())
	g.Expect(eventsWith(t, obj, mcpv1alpha1.ReasonImagePullFailed)).To(HaveLen(1))

	// Fixed: the new pod runs, replaces the previous one, and the server is Current.
	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Stdio.Image = "ghcr.io/acme/server:2" })
	fixed := newPodOf(g, ns, "rolling", "ghcr.io/acme/server:2")
	kubeletReports(g, fixed, serverReady)
	g.Eventually(func(g Gomega) {
		current(g)
		got := get(g, obj)
		g.Expect(meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReconciling)).To(BeNil())
		g.Expect(podsOf(g, ns, "rolling")).To(ConsistOf(HaveField("Name", fixed.Name)))
	}, eventually, poll).Should(Succeed())
}
