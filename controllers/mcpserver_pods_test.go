package controllers

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// The objects of one stdio server's workload, as the Deployment and ReplicaSet
// controllers make them.
func testDeployment() *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "mcp-srv", UID: "deploy",
		Annotations: map[string]string{"deployment.kubernetes.io/revision": "2"},
	}}
}

func testReplicaSet(name string, revision string, conds ...appsv1.ReplicaSetCondition) appsv1.ReplicaSet {
	return appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID(name),
			Annotations:     map[string]string{"deployment.kubernetes.io/revision": revision},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "mcp-srv", UID: "deploy", Controller: ptr.To(true)}},
		},
		Status: appsv1.ReplicaSetStatus{Conditions: conds},
	}
}

// testPod is a pod of ReplicaSet rs created at minute created, with the install-bridge
// init container completed and the server container in state.
func testPod(name, rs string, created int, server corev1.ContainerStatus) corev1.Pod {
	pod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, created, 0, 0, time.UTC)),
			OwnerReferences:   []metav1.OwnerReference{{Kind: "ReplicaSet", Name: rs, UID: types.UID(rs), Controller: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "install-bridge", Image: "ghcr.io/switchboard-mcp/switchboard:1"}},
			Containers:     []corev1.Container{{Name: "server", Image: "ghcr.io/acme/server:1"}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
			InitContainerStatuses: []corev1.ContainerStatus{{
				Name: "install-bridge", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}},
			}},
		},
	}
	server.Name = "server"
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{server}
	return pod
}

func waiting(reason, message string) corev1.ContainerStatus {
	return corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}
}

func crashLooping(restarts int32, exitCode int32, containerID string) corev1.ContainerStatus {
	st := waiting("CrashLoopBackOff", "back-off 40s restarting failed container=server pod=mcp-srv-2-a")
	st.RestartCount = restarts
	st.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: exitCode, Reason: "Error", ContainerID: containerID}
	return st
}

func deleting(pod corev1.Pod) corev1.Pod {
	pod.DeletionTimestamp = ptr.To(metav1.NewTime(time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)))
	return pod
}

// TestDiagnosePods: what the current ReplicaSet and its newest pod say about a
// Deployment without an available replica, for each thing the kubelet, the scheduler or
// admission can report; older ReplicaSets' pods and pods being deleted say nothing but
// that they are replaced.
func TestDiagnosePods(t *testing.T) {
	old := testReplicaSet("mcp-srv-1", "1")
	current := testReplicaSet("mcp-srv-2", "2")
	rejected := testReplicaSet("mcp-srv-2", "2", appsv1.ReplicaSetCondition{
		Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate",
		Message: `pods "mcp-srv-2-x" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or containers "install-bridge", "server" must set securityContext.runAsNonRoot=true)`,
	})
	running := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, Started: ptr.To(true)}
	exitedNow := corev1.ContainerStatus{RestartCount: 0, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", ContainerID: "containerd://b"}}}
	unschedulable := testPod("mcp-srv-2-a", "mcp-srv-2", 5, corev1.ContainerStatus{})
	unschedulable.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
		Message: "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available.",
	}}}
	initPull := testPod("mcp-srv-2-a", "mcp-srv-2", 5, waiting("PodInitializing", ""))
	initPull.Status.InitContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "ImagePullBackOff", Message: `Back-off pulling image "ghcr.io/switchboard-mcp/switchboard:1"`,
	}}
	initExited := testPod("mcp-srv-2-a", "mcp-srv-2", 5, waiting("PodInitializing", ""))
	initExited.Status.InitContainerStatuses[0] = corev1.ContainerStatus{
		Name: "install-bridge", RestartCount: 2,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", ContainerID: "containerd://i"}},
	}
	initRunning := testPod("mcp-srv-2-a", "mcp-srv-2", 5, waiting("PodInitializing", ""))
	initRunning.Status.InitContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}

	cases := []struct {
		name        string
		replicaSets []appsv1.ReplicaSet
		pods        []corev1.Pod
		reason      string // "" means no finding
		message     []string
		logs        *logSource
	}{
		{
			name:        "image not there",
			replicaSets: []appsv1.ReplicaSet{current},
			pods: []corev1.Pod{testPod("mcp-srv-2-a", "mcp-srv-2", 5, waiting("ErrImagePull",
				`rpc error: code = NotFound desc = failed to pull and unpack image "ghcr.io/acme/server:1": not found`))},
			reason:  mcpv1alpha1.ReasonImagePullFailed,
			message: []string{`Pod mcp-srv-2-a: container server cannot pull image "ghcr.io/acme/server:1": ErrImagePull: rpc error: code = NotFound`},
		},
		{
			name:        "image runs as root where runAsNonRoot is set",
			replicaSets: []appsv1.ReplicaSet{current},
			pods: []corev1.Pod{testPod("mcp-srv-2-a", "mcp-srv-2", 5, waiting("CreateContainerConfigError",
				"container has runAsNonRoot and image will run as root (pod: \"mcp-srv-2-a_ns(1)\", container: server)"))},
			reason:  mcpv1alpha1.ReasonContainerConfigInvalid,
			message: []string{"container server cannot be created: CreateContainerConfigError: container has runAsNonRoot and image will run as root"},
		},
		{
			name:        "runtime cannot start the container",
			replicaSets: []appsv1.ReplicaSet{current},
			pods: []corev1.Pod{testPod("mcp-srv-2-a", "mcp-srv-2", 5, corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 128, Reason: "StartError",
				Message: "failed to create containerd task: exec: \"/switchboard-bridge/switchboard\": stat /switchboard-bridge/switchboard: no such file or directory\n",
			}}})},
			reason:  mcpv1alpha1.ReasonContainerStartFailed,
			message: []string{"container server cannot be started: StartError: failed to create containerd task: exec:", "no such file or directory"},
		},
		{
			name:        "server crash-looping",
			replicaSets: []appsv1.ReplicaSet{current},
			pods:        []corev1.Pod{testPod("mcp-srv-2-a", "mcp-srv-2", 5, crashLooping(3, 1, "containerd://a3"))},
			reason:      mcpv1alpha1.ReasonServerExited,
			message:     []string{"Pod mcp-srv-2-a: container server exited with code 1 (Error), restarted 3 times"},
			logs:        &logSource{namespace: "ns", pod: "mcp-srv-2-a", uid: "uid-mcp-srv-2-a", container: "server", containerID: "containerd://a3", restarts: 3, previous: true},
		},
		{
			name:        "restarted server running but not ready keeps its reason",
			replicaSets: []appsv1.ReplicaSet{current},
			pods: []corev1.Pod{testPod("mcp-srv-2-a", "mcp-srv-2", 5, func() corev1.ContainerStatus {
				st := crashLooping(4, 2, "containerd://a4")
				st.State = running.State
				return st
			}())},
			reason:  mcpv1alpha1.ReasonServerExited,
			message: []string{"exited with code 2 (Error), restarted 4 times"},
			logs:    &logSource{namespace: "ns", pod: "mcp-srv-2-a", uid: "uid-mcp-srv-2-a", container: "server", containerID: "containerd://a4", restarts: 4, previous: true},
		},
		{
			name:        "server exited, not yet restarted",
			replicaSets: []appsv1.ReplicaSet{current},
			pods:        []corev1.Pod{testPod("mcp-srv-2-a", "mcp-srv-2", 5, exitedNow)},
			reason:      mcpv1alpha1.ReasonServerExited,
			message:     []string{"container server exited with code 1 (Error)"},
			logs:        &logSource{namespace: "ns", pod: "mcp-srv-2-a", uid: "uid-mcp-srv-2-a", container: "server", containerID: "containerd://b"},
		},
		{
			name:        "bridge image not there",
			replicaSets: []appsv1.ReplicaSet{current},
			pods:        []corev1.Pod{initPull},
			reason:      mcpv1alpha1.ReasonImagePullFailed,
			message:     []string{`init container install-bridge cannot pull image "ghcr.io/switchboard-mcp/switchboard:1": ImagePullBackOff`},
		},
		{
			name:        "bridge install failing",
			replicaSets: []appsv1.ReplicaSet{current},
			pods:        []corev1.Pod{initExited},
			reason:      mcpv1alpha1.ReasonBridgeInstallFailed,
			message:     []string{"init container install-bridge exited with code 1 (Error), restarted 2 times"},
			logs:        &logSource{namespace: "ns", pod: "mcp-srv-2-a", uid: "uid-mcp-srv-2-a", container: "install-bridge", containerID: "containerd://i", restarts: 2, previous: true},
		},
		{
			name:        "bridge being installed",
			replicaSets: []appsv1.ReplicaSet{current},
			pods:        []corev1.Pod{initRunning},
			reason:      mcpv1alpha1.ReasonWorkloadUnavailable,
			message:     []string{"Pod mcp-srv-2-a: init container install-bridge is running"},
		},
		{
			name:        "refused by admission",
			replicaSets: []appsv1.ReplicaSet{old, rejected},
			reason:      mcpv1alpha1.ReasonPodRejected,
			message:     []string{`ReplicaSet mcp-srv-2 cannot create a pod: pods "mcp-srv-2-x" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true`},
		},
		{
			name:        "no node fits",
			replicaSets: []appsv1.ReplicaSet{current},
			pods:        []corev1.Pod{unschedulable},
			reason:      mcpv1alpha1.ReasonUnschedulable,
			message:     []string{"Pod mcp-srv-2-a cannot be scheduled: 0/3 nodes are available: 3 Insufficient cpu."},
		},
		{
			name:        "fixed manifest: the old ReplicaSet's crash loop is not the new pod's",
			replicaSets: []appsv1.ReplicaSet{old, current},
			pods: []corev1.Pod{
				testPod("mcp-srv-1-a", "mcp-srv-1", 1, crashLooping(7, 1, "containerd://old")),
				testPod("mcp-srv-2-a", "mcp-srv-2", 5, waiting("ContainerCreating", "")),
			},
			reason:  mcpv1alpha1.ReasonWorkloadUnavailable,
			message: []string{"Pod mcp-srv-2-a: container server is waiting: ContainerCreating"},
		},
		{
			name:        "deleted pod being replaced",
			replicaSets: []appsv1.ReplicaSet{current},
			pods: []corev1.Pod{
				deleting(testPod("mcp-srv-2-a", "mcp-srv-2", 5, corev1.ContainerStatus{Ready: true, State: running.State})),
				testPod("mcp-srv-2-b", "mcp-srv-2", 9, running),
			},
			reason:  mcpv1alpha1.ReasonWorkloadUnavailable,
			message: []string{"Pod mcp-srv-2-b: container server is running, not ready", "; it replaces pod mcp-srv-2-a, which is being deleted"},
		},
		{
			name:        "deleted pod not yet replaced",
			replicaSets: []appsv1.ReplicaSet{current},
			pods:        []corev1.Pod{deleting(testPod("mcp-srv-2-a", "mcp-srv-2", 5, crashLooping(2, 1, "containerd://x")))},
			reason:      mcpv1alpha1.ReasonWorkloadUnavailable,
			message:     []string{"Pod mcp-srv-2-a is being deleted; no replacement is created yet"},
		},
		{
			name:        "the newest pod is the one that counts",
			replicaSets: []appsv1.ReplicaSet{current},
			pods: []corev1.Pod{
				testPod("mcp-srv-2-a", "mcp-srv-2", 5, crashLooping(2, 1, "containerd://x")),
				testPod("mcp-srv-2-b", "mcp-srv-2", 9, waiting("ErrImagePull", "not found")),
			},
			reason:  mcpv1alpha1.ReasonImagePullFailed,
			message: []string{"Pod mcp-srv-2-b:"},
		},
		{
			name:        "a pod that is not the ReplicaSet's is not looked at",
			replicaSets: []appsv1.ReplicaSet{current},
			pods: []corev1.Pod{func() corev1.Pod {
				p := testPod("impostor", "mcp-srv-2", 5, waiting("ErrImagePull", "planted"))
				p.OwnerReferences[0].UID = "someone-else"
				return p
			}()},
		},
		{
			name: "ReplicaSet not in the cache yet",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := diagnosePods(testDeployment(), tc.replicaSets, tc.pods)
			if tc.reason == "" {
				if f != nil {
					t.Fatalf("finding %+v, want none", f)
				}
				return
			}
			if f == nil {
				t.Fatal("no finding")
			}
			if f.reason != tc.reason {
				t.Errorf("reason %s, want %s (message %q)", f.reason, tc.reason, f.message)
			}
			for _, m := range tc.message {
				if !strings.Contains(f.message, m) {
					t.Errorf("message %q does not say %q", f.message, m)
				}
			}
			if strings.ContainsAny(f.message, "\n\r\t") || len(f.message) > maxPodMessage {
				t.Errorf("message %q is not one bounded line", f.message)
			}
			switch {
			case tc.logs == nil && f.logs != nil:
				t.Errorf("logs of %+v read, want none", *f.logs)
			case tc.logs != nil && (f.logs == nil || *f.logs != *tc.logs):
				t.Errorf("logs of %+v, want %+v", f.logs, *tc.logs)
			}
		})
	}
}

// TestDiagnoseRollout: a Deployment with an available replica has rolled out only once
// the Deployment controller has seen its pod template, every desired replica runs it and
// its ReplicaSet has an available replica; until then the new ReplicaSet's newest pod
// says why not, and a pod merely on its way is RollingOut, not WorkloadUnavailable.
func TestDiagnoseRollout(t *testing.T) {
	old := testReplicaSet("mcp-srv-1", "1")
	old.Status.AvailableReplicas = 1
	current := testReplicaSet("mcp-srv-2", "2")
	currentAvailable := testReplicaSet("mcp-srv-2", "2")
	currentAvailable.Status.AvailableReplicas = 1
	serving := testPod("mcp-srv-1-a", "mcp-srv-1", 1, corev1.ContainerStatus{Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	deployment := func(generation, observed int64, updated int32) *appsv1.Deployment {
		d := testDeployment()
		d.Generation = generation
		d.Spec.Replicas = ptr.To[int32](1)
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: 1 + updated, UpdatedReplicas: updated, AvailableReplicas: 1}
		return d
	}
	cases := []struct {
		name        string
		deployment  *appsv1.Deployment
		replicaSets []appsv1.ReplicaSet
		pods        []corev1.Pod
		reason      string // "" means rolled out
		message     []string
	}{
		{
			name:        "rolled out",
			deployment:  deployment(2, 2, 1),
			replicaSets: []appsv1.ReplicaSet{old, currentAvailable},
			pods:        []corev1.Pod{testPod("mcp-srv-2-a", "mcp-srv-2", 5, corev1.ContainerStatus{Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})},
		},
		{
			name:        "new template not yet seen by the Deployment controller",
			deployment:  deployment(3, 2, 1),
			replicaSets: []appsv1.ReplicaSet{old, currentAvailable},
			reason:      mcpv1alpha1.ReasonRollingOut,
			message:     []string{"Deployment mcp-srv has not yet started rolling out its new pod template"},
		},
		{
			name:        "new image cannot be pulled",
			deployment:  deployment(2, 2, 1),
			replicaSets: []appsv1.ReplicaSet{old, current},
			pods: []corev1.Pod{serving, testPod("mcp-srv-2-a", "mcp-srv-2", 5, waiting("ErrImagePull",
				`failed to pull and unpack image "ghcr.io/acme/server:1": not found`))},
			reason:  mcpv1alpha1.ReasonImagePullFailed,
			message: []string{`Pod mcp-srv-2-a: container server cannot pull image "ghcr.io/acme/server:1": ErrImagePull:`},
		},
		{
			name:        "new server exits at once",
			deployment:  deployment(2, 2, 1),
			replicaSets: []appsv1.ReplicaSet{old, current},
			pods:        []corev1.Pod{serving, testPod("mcp-srv-2-a", "mcp-srv-2", 5, crashLooping(2, 1, "containerd://n2"))},
			reason:      mcpv1alpha1.ReasonServerExited,
			message:     []string{"Pod mcp-srv-2-a: container server exited with code 1 (Error), restarted 2 times"},
		},
		{
			name:        "new pod on its way",
			deployment:  deployment(2, 2, 1),
			replicaSets: []appsv1.ReplicaSet{old, current},
			pods:        []corev1.Pod{serving, testPod("mcp-srv-2-a", "mcp-srv-2", 5, waiting("ContainerCreating", ""))},
			reason:      mcpv1alpha1.ReasonRollingOut,
			message:     []string{"Pod mcp-srv-2-a: container server is waiting: ContainerCreating"},
		},
		{
			name:        "new pod refused by admission",
			deployment:  deployment(2, 2, 0),
			replicaSets: []appsv1.ReplicaSet{old, testReplicaSet("mcp-srv-2", "2", appsv1.ReplicaSetCondition{Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: "exceeded quota"})},
			pods:        []corev1.Pod{serving},
			reason:      mcpv1alpha1.ReasonPodRejected,
			message:     []string{"ReplicaSet mcp-srv-2 cannot create a pod: exceeded quota"},
		},
		{
			name:        "new ReplicaSet not in the cache yet",
			deployment:  deployment(2, 2, 0),
			replicaSets: []appsv1.ReplicaSet{old},
			pods:        []corev1.Pod{serving},
			reason:      mcpv1alpha1.ReasonRollingOut,
			message:     []string{"Deployment mcp-srv is rolling out its new pod template"},
		},
		{
			name:        "new ReplicaSet available, not every replica updated",
			deployment:  deployment(2, 2, 0),
			replicaSets: []appsv1.ReplicaSet{old, currentAvailable},
			pods:        []corev1.Pod{serving, testPod("mcp-srv-2-a", "mcp-srv-2", 5, corev1.ContainerStatus{Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})},
			reason:      mcpv1alpha1.ReasonRollingOut,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := diagnoseRollout(tc.deployment, tc.replicaSets, tc.pods)
			if tc.reason == "" {
				if f != nil {
					t.Fatalf("finding %+v, want the rollout done", f)
				}
				return
			}
			if f == nil {
				t.Fatal("rollout done, want it pending")
			}
			if f.reason != tc.reason {
				t.Errorf("reason %s, want %s (message %q)", f.reason, tc.reason, f.message)
			}
			for _, m := range tc.message {
				if !strings.Contains(f.message, m) {
					t.Errorf("message %q does not say %q", f.message, m)
				}
			}
		})
	}
}

// TestProgressDeadlineExceeded: only the Deployment controller's verdict on the current
// pod template counts.
func TestProgressDeadlineExceeded(t *testing.T) {
	exceeded := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}
	progressing := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated"}
	cases := []struct {
		name                 string
		generation, observed int64
		conds                []appsv1.DeploymentCondition
		want                 bool
	}{
		{"exceeded", 2, 2, []appsv1.DeploymentCondition{exceeded}, true},
		{"progressing", 2, 2, []appsv1.DeploymentCondition{progressing}, false},
		{"an earlier template's verdict", 3, 2, []appsv1.DeploymentCondition{exceeded}, false},
		{"no condition yet", 1, 0, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := testDeployment()
			d.Generation, d.Status.ObservedGeneration, d.Status.Conditions = tc.generation, tc.observed, tc.conds
			if got := progressDeadlineExceeded(d); got != tc.want {
				t.Errorf("progressDeadlineExceeded = %t, want %t", got, tc.want)
			}
		})
	}
}

// TestQuoteLog: the end of a container's log becomes one bounded line, the bridge's JSON
// lines read as what they say, and nothing a server writes can break the line or hide
// text from whoever reads the condition.
func TestQuoteLog(t *testing.T) {
	cases := []struct {
		name string
		log  string
		want string
	}{
		{
			name: "the bridge's lines",
			log: `{"level":"info","ts":"2026-01-01T00:00:00Z","logger":"bridge","msg":"Serving MCP over Streamable HTTP","address":":8080"}` + "\n" +
				`{"level":"info","ts":"2026-01-01T00:00:00Z","logger":"bridge","msg":"MCP server stderr","pid":7,"line":"Error: Cannot find module '/app/dist/index.js'"}` + "\n" +
				`{"level":"error","ts":"2026-01-01T00:00:00Z","logger":"bridge","msg":"Cannot run the MCP server","command":"node","error":"mcp server command \"node\": exited 212ms after it started: exit status 1"}` + "\n",
			want: `Serving MCP over Streamable HTTP | MCP server stderr: Error: Cannot find module '/app/dist/index.js' | ` +
				`Cannot run the MCP server: mcp server command "node": exited 212ms after it started: exit status 1`,
		},
		{
			name: "plain lines, colours and control characters",
			log:  "\x1b[31mfatal:\x1b[0m cannot open\tconfig\r\nbye\u202Eevil\u200b\x00!\n",
			want: "fatal: cannot open config | bye evil !",
		},
		{
			// A crashing server may print the URL it was called back on: the query
			// string (a code, a token) never reaches status or an Event.
			name: "URL query strings",
			log:  "fetching https://idp.example/cb?code=s3cr3t-code&state=x failed\n" + `{"level":"error","msg":"Cannot run the MCP server","error":"Get \"http://10.0.0.1/x?token=s3cr3t-token\": EOF"}` + "\n",
			want: `fetching https://idp.example/cb failed | Cannot run the MCP server: Get "http://10.0.0.1/x": EOF`,
		},
		{
			name: "the last lines that fit",
			log:  strings.Repeat("a", 200) + "\n" + strings.Repeat("b", 100) + "\n" + strings.Repeat("c", 100) + "\n",
			want: strings.Repeat("b", 100) + " | " + strings.Repeat("c", 100),
		},
		{
			name: "one line too long keeps its end",
			log:  strings.Repeat("x", 1000) + "the end\n",
			want: "…" + strings.Repeat("x", maxLogTail-len("…")-len("the end")) + "the end",
		},
		{
			name: "invalid UTF-8",
			log:  "caf\xe9\n",
			want: "caf\uFFFD",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := quoteLog([]byte(tc.log), maxLogTail)
			if got != tc.want {
				t.Errorf("quoteLog = %q, want %q", got, tc.want)
			}
			if len(got) > maxLogTail {
				t.Errorf("%d bytes, want at most %d", len(got), maxLogTail)
			}
		})
	}
}

// TestWorkloadEvents: a new reason the workload cannot run for is announced once, with
// the reason and the kubelet's message, and so is the start of an outage; the same reason
// again, or the pod of a new server being started, is not; the workload available again
// says for how long it was not, and what it waited for.
func TestWorkloadEvents(t *testing.T) {
	at := func(minute int) metav1.Time { return metav1.NewTime(time.Date(2026, 1, 1, 0, minute, 0, 0, time.UTC)) }
	workload := func(st metav1.ConditionStatus, reason, message string, since int) *mcpv1alpha1.MCPServer {
		obj := stdioObject()
		obj.Status.Conditions = []metav1.Condition{{
			Type: mcpv1alpha1.ConditionWorkloadAvailable, Status: st, Reason: reason, Message: message, LastTransitionTime: at(since),
		}}
		return obj
	}
	pulling := workload(metav1.ConditionFalse, mcpv1alpha1.ReasonImagePullFailed, `Pod a: container server cannot pull image "x": ErrImagePull: not found`, 1)
	exiting := workload(metav1.ConditionFalse, mcpv1alpha1.ReasonServerExited, "Pod a: container server exited with code 1 (Error)", 1)
	starting := workload(metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadUnavailable, "Pod b: container server is waiting: ContainerCreating; it replaces pod a, which is being deleted", 3)
	available := workload(metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded, "Deployment mcp-srv has 1 available replica(s)", 5)
	cases := []struct {
		name          string
		before, after *mcpv1alpha1.MCPServer
		want          []string
	}{
		{name: "first failure", before: stdioObject(), after: pulling, want: []string{`Warning ImagePullFailed Pod a: container server cannot pull image "x": ErrImagePull: not found`}},
		{name: "same failure again", before: pulling, after: pulling},
		{name: "another failure", before: pulling, after: exiting, want: []string{"Warning ServerExited Pod a: container server exited with code 1 (Error)"}},
		{name: "a new server's pod starting", before: stdioObject(), after: starting},
		{name: "an available server's pod replaced", before: available, after: starting, want: []string{
			"Warning WorkloadUnavailable Pod b: container server is waiting: ContainerCreating; it replaces pod a, which is being deleted",
		}},
		{name: "still replaced", before: starting, after: starting},
		{name: "available again", before: starting, after: available, want: []string{
			"Normal WorkloadAvailable Deployment mcp-srv has 1 available replica(s); it had none for 2m0s: WorkloadUnavailable: Pod b: container server is waiting: ContainerCreating; it replaces pod a, which is being deleted",
		}},
		{name: "fixed", before: exiting, after: available, want: []string{
			"Normal WorkloadAvailable Deployment mcp-srv has 1 available replica(s); it had none for 4m0s: ServerExited: Pod a: container server exited with code 1 (Error)",
		}},
		{name: "still available", before: available, after: available},
	}
	// A Ready server whose new version does not run while the previous one serves.
	rollout := func(condType, reason, message string) *mcpv1alpha1.MCPServer {
		obj := workload(metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded, "Deployment mcp-srv has 1 available replica(s); its current pod template has not rolled out", 5)
		obj.Status.Conditions = append(obj.Status.Conditions,
			metav1.Condition{Type: mcpv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: mcpv1alpha1.ReasonSucceeded},
			metav1.Condition{Type: condType, Status: metav1.ConditionTrue, Reason: reason, Message: message})
		return obj
	}
	readyServing := func() *mcpv1alpha1.MCPServer {
		obj := workload(metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded, "Deployment mcp-srv has 1 available replica(s)", 5)
		obj.Status.Conditions = append(obj.Status.Conditions,
			metav1.Condition{Type: mcpv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: mcpv1alpha1.ReasonSucceeded})
		return obj
	}()
	rolling := rollout(mcpv1alpha1.ConditionReconciling, mcpv1alpha1.ReasonRollingOut, "The previous version keeps serving while the new one rolls out: Pod b is pending")
	newPulling := rollout(mcpv1alpha1.ConditionReconciling, mcpv1alpha1.ReasonImagePullFailed, `The previous version keeps serving; the new one cannot run: Pod b: container server cannot pull image "x": ErrImagePull: not found`)
	newBackingOff := rollout(mcpv1alpha1.ConditionReconciling, mcpv1alpha1.ReasonImagePullFailed, `The previous version keeps serving; the new one cannot run: Pod b: container server cannot pull image "x": ImagePullBackOff`)
	newStalled := rollout(mcpv1alpha1.ConditionStalled, mcpv1alpha1.ReasonImagePullFailed, `The previous version keeps serving; the new one cannot run: Pod b: container server cannot pull image "x": ImagePullBackOff; Deployment mcp-srv made no progress for 600s (ProgressDeadlineExceeded)`)
	cases = append(cases, []struct {
		name          string
		before, after *mcpv1alpha1.MCPServer
		want          []string
	}{
		{name: "new version rolling out", before: readyServing, after: rolling},
		{name: "new version cannot be pulled", before: rolling, after: newPulling, want: []string{
			`Warning ImagePullFailed The previous version keeps serving; the new one cannot run: Pod b: container server cannot pull image "x": ErrImagePull: not found`,
		}},
		{name: "new version still cannot be pulled", before: newPulling, after: newBackingOff},
		{name: "new version past its progress deadline", before: newBackingOff, after: newStalled, want: []string{
			`Warning ImagePullFailed The previous version keeps serving; the new one cannot run: Pod b: container server cannot pull image "x": ImagePullBackOff; Deployment mcp-srv made no progress for 600s (ProgressDeadlineExceeded)`,
		}},
		{name: "fixed, the new version rolling out", before: newStalled, after: rolling},
		{name: "rolled out", before: rolling, after: readyServing},
	}...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			r := &MCPServerReconciler{Recorder: rec}
			r.recordWorkloadTransitions(tc.before, tc.after)
			close(rec.Events)
			var got []string
			for e := range rec.Events {
				got = append(got, e)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("events %q, want %q", got, tc.want)
			}
		})
	}
}

// TestServingRevision: the connector keeps one session per serving version of a stdio
// server's workload, so the version must stay the previous one while a new one rolls
// out, and turn to the new one as soon as it has an available pod: a fixed server is
// then connected at once instead of after the broken version's reconnect backoff.
func TestServingRevision(t *testing.T) {
	available := func(rs appsv1.ReplicaSet) appsv1.ReplicaSet {
		rs.Status.AvailableReplicas = 1
		return rs
	}
	foreign := available(testReplicaSet("other-9", "9"))
	foreign.OwnerReferences[0].UID = "another-deployment"
	cases := []struct {
		name        string
		replicaSets []appsv1.ReplicaSet
		want        string
	}{
		{"nothing available yet", []appsv1.ReplicaSet{testReplicaSet("mcp-srv-1", "1")}, ""},
		{"first version serves", []appsv1.ReplicaSet{available(testReplicaSet("mcp-srv-1", "1"))}, "1"},
		{"new version rolling out", []appsv1.ReplicaSet{available(testReplicaSet("mcp-srv-1", "1")), testReplicaSet("mcp-srv-2", "2")}, "1"},
		{"new version serves beside the old", []appsv1.ReplicaSet{available(testReplicaSet("mcp-srv-1", "1")), available(testReplicaSet("mcp-srv-2", "2"))}, "2"},
		{"revision 10 is newer than 9", []appsv1.ReplicaSet{available(testReplicaSet("mcp-srv-10", "10")), available(testReplicaSet("mcp-srv-9", "9"))}, "10"},
		{"another Deployment's ReplicaSet is not ours", []appsv1.ReplicaSet{available(testReplicaSet("mcp-srv-1", "1")), foreign}, "1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := servingRevision(testDeployment(), tc.replicaSets); got != tc.want {
				t.Errorf("serving revision %q, want %q", got, tc.want)
			}
		})
	}
}

// A replica that does not own a stdio server reads the serving version from the cache as
// the owner's Ensure reports it, so that its standby config equals the owner's and
// taking the server over does not replace the session the gateway's calls are on.
func TestServingInstanceIsTheOwnersInstance(t *testing.T) {
	deploy := testDeployment()
	rs := testReplicaSet("mcp-srv-3", "3")
	rs.Status.AvailableReplicas = 1
	for _, o := range []metav1.Object{deploy, &rs} {
		o.SetLabels(map[string]string{serverLabel: "mcp-srv"})
	}
	obj := &mcpv1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "srv"}}

	unavailable := &PodRuntime{Client: fake.NewClientBuilder().WithObjects(deploy.DeepCopy(), rs.DeepCopy()).Build()}
	if got, err := unavailable.ServingInstance(context.Background(), obj); err != nil || got != "" {
		t.Fatalf("a Deployment with no available replica: instance %q, %v; want none", got, err)
	}

	deploy.Status = appsv1.DeploymentStatus{AvailableReplicas: 1, Conditions: []appsv1.DeploymentCondition{
		{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue},
	}}
	available := &PodRuntime{Client: fake.NewClientBuilder().WithObjects(deploy, &rs).Build()}
	if got, err := available.ServingInstance(context.Background(), obj); err != nil || got != "3" {
		t.Fatalf("instance %q, %v; want the serving ReplicaSet's revision 3", got, err)
	}
	none := &PodRuntime{Client: fake.NewClientBuilder().Build()}
	if got, err := none.ServingInstance(context.Background(), obj); err != nil || got != "" {
		t.Fatalf("no Deployment: instance %q, %v; want none", got, err)
	}
}
