package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=get;list;watch

// Bounds of what the pods of a stdio server's Deployment put into its status. Kubelet
// and admission messages, and log lines above all, are text the operator does not
// control: they are cut short, made one line and stripped of control characters.
const (
	// maxPodMessage bounds the whole WorkloadAvailable message derived from the pods.
	maxPodMessage = 512
	// maxReported bounds one message the kubelet, the scheduler or admission reported.
	maxReported = 256
	// maxLogTail bounds the log lines quoted, of which the last are kept.
	maxLogTail = 256
	// logTailLines and logTailBytes bound the pods/log request: the last lines of a
	// container's log, and no more bytes of them than this.
	logTailLines = 10
	logTailBytes = 16 << 10
	// logReadTimeout bounds one pods/log request, which the API server forwards to the
	// kubelet.
	logReadTimeout = 5 * time.Second
)

// PodLogReader reads the end of a container's log: the pods/log subresource in a
// cluster, something else in tests (envtest runs no kubelet to serve logs).
type PodLogReader interface {
	// TailLogs returns what the log of a container of the pod holds, as opts (container,
	// previous instance, tail lines, byte limit) select it.
	TailLogs(ctx context.Context, namespace, pod string, opts *corev1.PodLogOptions) ([]byte, error)
}

// PodLogs reads container logs through the API server's pods/log subresource.
type PodLogs struct {
	// Client is the core/v1 client of the manager.
	Client corev1client.PodsGetter
}

// TailLogs reads the log opts select, and never more than its LimitBytes.
func (l PodLogs) TailLogs(ctx context.Context, namespace, pod string, opts *corev1.PodLogOptions) ([]byte, error) {
	stream, err := l.Client.Pods(namespace).GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = stream.Close() }()
	limit := int64(logTailBytes)
	if opts.LimitBytes != nil {
		limit = *opts.LimitBytes
	}
	return io.ReadAll(io.LimitReader(stream, limit))
}

// podFinding is what the pods of a Deployment that has no available replica say about
// why: the WorkloadAvailable reason and message, and the container whose last log lines
// explain it.
type podFinding struct {
	reason  string
	message string
	// logs names the container instance whose log tail goes into the message; nil when
	// none does.
	logs *logSource
}

// logSource is one instance of one container. Its log does not change once it has
// exited, so it is read once (see PodRuntime.logTail).
type logSource struct {
	namespace, pod string
	uid            types.UID
	container      string
	// containerID names the instance; restarts tells it apart when the kubelet gave no ID.
	containerID string
	restarts    int32
	// previous asks for the instance before the container's last restart (the kubelet's
	// lastState), not its current one.
	previous bool
}

// instance is what tells one container instance from another: the pod, the container,
// and the instance's ID or else the restart count.
func (s logSource) instance() string {
	if s.containerID != "" {
		return string(s.uid) + "/" + s.container + "/" + s.containerID
	}
	return fmt.Sprintf("%s/%s/%d/%t", s.uid, s.container, s.restarts, s.previous)
}

// cachedTail is the log tail last read for one server.
type cachedTail struct {
	instance string
	text     string
}

// explainUnavailable says why the Deployment d has no available replica, from its
// current ReplicaSet and that ReplicaSet's newest pod, with the log tail of a container
// that exited; nil when the pods say nothing more than d does.
func (p *PodRuntime) explainUnavailable(ctx context.Context, key connector.Key, d *appsv1.Deployment) (*podFinding, error) {
	replicaSets, pods, err := p.workloadOf(ctx, d)
	if err != nil {
		return nil, err
	}
	return p.withLogTail(ctx, key, diagnosePods(d, replicaSets, pods)), nil
}

// explainRollout says why the current pod template of the Deployment d, which has an
// available replica, has not rolled out, as explainUnavailable says it for a Deployment
// without one; nil when it has rolled out. replicaSets and pods are d's, from workloadOf.
func (p *PodRuntime) explainRollout(ctx context.Context, key connector.Key, d *appsv1.Deployment, replicaSets []appsv1.ReplicaSet, pods []corev1.Pod) *podFinding {
	if d.Status.ObservedGeneration < d.Generation {
		// The Deployment controller has not yet seen the new template: what runs is not
		// the pods to explain.
		return diagnoseRollout(d, nil, nil)
	}
	return p.withLogTail(ctx, key, diagnoseRollout(d, replicaSets, pods))
}

// workloadOf lists the ReplicaSets and pods of the Deployment d from the cache.
func (p *PodRuntime) workloadOf(ctx context.Context, d *appsv1.Deployment) ([]appsv1.ReplicaSet, []corev1.Pod, error) {
	replicaSets, err := p.replicaSetsOf(ctx, d)
	if err != nil {
		return nil, nil, err
	}
	var pods corev1.PodList
	if err := p.Client.List(ctx, &pods, client.InNamespace(d.Namespace), client.MatchingLabels{serverLabel: d.Name}); err != nil {
		return nil, nil, fmt.Errorf("listing the pods of Deployment %s: %w", d.Name, err)
	}
	return replicaSets, pods.Items, nil
}

// replicaSetsOf lists the ReplicaSets of the server Deployment d from the cache.
func (p *PodRuntime) replicaSetsOf(ctx context.Context, d *appsv1.Deployment) ([]appsv1.ReplicaSet, error) {
	var replicaSets appsv1.ReplicaSetList
	if err := p.Client.List(ctx, &replicaSets, client.InNamespace(d.Namespace), client.MatchingLabels{serverLabel: d.Name}); err != nil {
		return nil, fmt.Errorf("listing the ReplicaSets of Deployment %s: %w", d.Name, err)
	}
	return replicaSets.Items, nil
}

// withLogTail adds to the finding f the log tail of the container it names, and bounds
// its message; nil stays nil.
func (p *PodRuntime) withLogTail(ctx context.Context, key connector.Key, f *podFinding) *podFinding {
	if f == nil {
		return nil
	}
	if f.logs != nil {
		if tail := p.logTail(ctx, key, *f.logs); tail != "" {
			f.message += "; last log lines: " + tail
		}
	}
	f.message = connector.TruncateUTF8(f.message, maxPodMessage)
	return f
}

// diagnoseRollout is the pure part of explainRollout: nil when the Deployment d has
// rolled out its current pod template (the Deployment controller has seen it, every
// desired replica runs it, and its ReplicaSet has an available replica); else what the
// newest pod of that ReplicaSet says, as diagnosePods says it, with reason RollingOut
// while nothing has failed.
func diagnoseRollout(d *appsv1.Deployment, replicaSets []appsv1.ReplicaSet, pods []corev1.Pod) *podFinding {
	rollingOut := func(message string) *podFinding {
		return &podFinding{reason: mcpv1alpha1.ReasonRollingOut, message: message}
	}
	if d.Status.ObservedGeneration < d.Generation {
		return rollingOut("Deployment " + d.Name + " has not yet started rolling out its new pod template")
	}
	desired := int32(1)
	if d.Spec.Replicas != nil {
		desired = *d.Spec.Replicas
	}
	rs := currentReplicaSet(d, replicaSets)
	if d.Status.UpdatedReplicas >= desired && rs != nil && rs.Status.AvailableReplicas > 0 {
		return nil
	}
	f := diagnosePods(d, replicaSets, pods)
	switch {
	case f == nil:
		return rollingOut("Deployment " + d.Name + " is rolling out its new pod template")
	case f.reason == mcpv1alpha1.ReasonWorkloadUnavailable:
		// The workload is available: its new pod is on its way, not missing.
		f.reason = mcpv1alpha1.ReasonRollingOut
	}
	return f
}

// logTail returns the last log lines of the container instance src, made one bounded
// line. It reads them once per instance: a server whose container keeps restarting
// costs one pods/log request per restart, not one per reconcile. A failed read is not
// retried for the same instance either; the message then goes without the lines.
func (p *PodRuntime) logTail(ctx context.Context, key connector.Key, src logSource) string {
	if p.Logs == nil {
		return ""
	}
	if cached, ok := p.tails.Load(key); ok && cached.(*cachedTail).instance == src.instance() {
		return cached.(*cachedTail).text
	}
	ctx, cancel := context.WithTimeout(ctx, logReadTimeout)
	defer cancel()
	raw, err := p.Logs.TailLogs(ctx, src.namespace, src.pod, &corev1.PodLogOptions{
		Container:  src.container,
		Previous:   src.previous,
		TailLines:  ptr.To[int64](logTailLines),
		LimitBytes: ptr.To[int64](logTailBytes),
	})
	text := ""
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Could not read the log of a stdio server's container",
			"pod", src.pod, "container", src.container, "previous", src.previous, "error", err.Error())
	} else {
		text = quoteLog(raw, maxLogTail)
	}
	p.tails.Store(key, &cachedTail{instance: src.instance(), text: text})
	return text
}

// diagnosePods is the pure part of explainUnavailable: what d's current ReplicaSet and
// its newest pod that is not being deleted say. Pods of older ReplicaSets, and pods being
// deleted, are named only as the pods a new one replaces: what they went through is no
// longer what keeps the server from running.
func diagnosePods(d *appsv1.Deployment, replicaSets []appsv1.ReplicaSet, pods []corev1.Pod) *podFinding {
	owned := map[types.UID]bool{}
	for i := range replicaSets {
		if controlledBy(&replicaSets[i], d.UID) {
			owned[replicaSets[i].UID] = true
		}
	}
	rs := currentReplicaSet(d, replicaSets)
	var newest *corev1.Pod
	var replaced []string
	for i := range pods {
		pod := &pods[i]
		owner := metav1.GetControllerOf(pod)
		if owner == nil || !owned[owner.UID] {
			continue
		}
		if !pod.DeletionTimestamp.IsZero() {
			replaced = append(replaced, pod.Name)
			continue
		}
		if rs == nil || owner.UID != rs.UID {
			continue
		}
		if newest == nil || newest.CreationTimestamp.Before(&pod.CreationTimestamp) ||
			newest.CreationTimestamp.Equal(&pod.CreationTimestamp) && newest.Name < pod.Name {
			newest = pod
		}
	}
	slices.Sort(replaced)

	if newest == nil {
		if c := replicaFailure(rs, d); c != nil {
			return &podFinding{reason: mcpv1alpha1.ReasonPodRejected, message: c.source + " cannot create a pod: " + oneLine(c.message, maxReported)}
		}
		if len(replaced) > 0 {
			return &podFinding{reason: mcpv1alpha1.ReasonWorkloadUnavailable,
				message: capitalize(podsBeingDeleted(replaced, false)) + "; no replacement is created yet"}
		}
		return nil
	}
	f := diagnosePod(newest)
	if f.reason == mcpv1alpha1.ReasonWorkloadUnavailable && len(replaced) > 0 {
		f.message += "; it replaces " + podsBeingDeleted(replaced, true)
	}
	return f
}

// podsBeingDeleted says that the named pods are being deleted, as a clause of its own
// or (relative) after the pods they are replaced by.
func podsBeingDeleted(names []string, relative bool) string {
	subject, verb := "pod "+names[0], "is"
	if len(names) > 1 {
		subject, verb = "pods "+strings.Join(names, ", "), "are"
	}
	if relative {
		return subject + ", which " + verb + " being deleted"
	}
	return subject + " " + verb + " being deleted"
}

// deploymentRevision is the annotation the Deployment controller numbers its
// ReplicaSets' versions with.
const deploymentRevision = "deployment.kubernetes.io/revision"

// currentReplicaSet returns the ReplicaSet of d's current pod template: the one whose
// revision is d's, else (d's revision not yet known) the newest of d's ReplicaSets; nil
// when there is none yet.
func currentReplicaSet(d *appsv1.Deployment, replicaSets []appsv1.ReplicaSet) *appsv1.ReplicaSet {
	want := d.Annotations[deploymentRevision]
	var current *appsv1.ReplicaSet
	var currentRevision int64 = -1
	for i := range replicaSets {
		rs := &replicaSets[i]
		if !controlledBy(rs, d.UID) {
			continue
		}
		if want != "" {
			if rs.Annotations[deploymentRevision] == want {
				return rs
			}
			continue
		}
		n, err := strconv.ParseInt(rs.Annotations[deploymentRevision], 10, 64)
		if err != nil {
			n = 0
		}
		if current == nil || n > currentRevision || n == currentRevision && current.CreationTimestamp.Before(&rs.CreationTimestamp) {
			current, currentRevision = rs, n
		}
	}
	return current
}

// servingRevision names the version of Deployment d that serves: the revision of its
// newest ReplicaSet with an available pod, the previous version's while a new one rolls
// out. Empty when the cache shows none yet.
func servingRevision(d *appsv1.Deployment, replicaSets []appsv1.ReplicaSet) string {
	serving, servingRevision := "", int64(-1)
	for i := range replicaSets {
		rs := &replicaSets[i]
		if !controlledBy(rs, d.UID) || rs.Status.AvailableReplicas == 0 {
			continue
		}
		n, err := strconv.ParseInt(rs.Annotations[deploymentRevision], 10, 64)
		if err != nil {
			continue
		}
		if n > servingRevision {
			serving, servingRevision = rs.Annotations[deploymentRevision], n
		}
	}
	return serving
}

// controlledBy reports whether obj's controller is the object with the given UID.
func controlledBy(obj metav1.Object, uid types.UID) bool {
	owner := metav1.GetControllerOf(obj)
	return owner != nil && owner.UID == uid
}

// failureCondition is a ReplicaFailure condition and whose it is.
type failureCondition struct {
	source, message string
}

// replicaFailure returns the ReplicaFailure condition of the current ReplicaSet, which
// carries why the API server refused its pod (admission, quota), or else d's copy of it;
// nil when neither has one.
func replicaFailure(rs *appsv1.ReplicaSet, d *appsv1.Deployment) *failureCondition {
	if rs != nil {
		for _, c := range rs.Status.Conditions {
			if c.Type == appsv1.ReplicaSetReplicaFailure && c.Status == corev1.ConditionTrue {
				return &failureCondition{"ReplicaSet " + rs.Name, c.Message}
			}
		}
		return nil
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue {
			return &failureCondition{"Deployment " + d.Name, c.Message}
		}
	}
	return nil
}

// Container waiting reasons of the kubelet, by what they mean for the server.
var (
	pullFailures   = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable", "SignatureValidationFailed"}
	configFailures = []string{"CreateContainerConfigError"}
	startFailures  = []string{"CreateContainerError", "RunContainerError", "StartError", "ContainerCannotRun", "PreCreateHookError", "PreStartHookError", "PostStartHookError"}
)

// diagnosePod says why one pod does not run its server: it is failed or not scheduled,
// an init container or the server container cannot be pulled, created or started, or
// exited; or else what it is waiting for.
func diagnosePod(pod *corev1.Pod) *podFinding {
	subject := "Pod " + pod.Name
	progress := func(message string) *podFinding {
		return &podFinding{reason: mcpv1alpha1.ReasonWorkloadUnavailable, message: subject + message}
	}
	if pod.Status.Phase == corev1.PodFailed {
		return progress(" failed: " + oneLine(reasonAndMessage(pod.Status.Reason, pod.Status.Message), maxReported))
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			if c.Reason == corev1.PodReasonUnschedulable {
				return &podFinding{reason: mcpv1alpha1.ReasonUnschedulable, message: subject + " cannot be scheduled: " + oneLine(c.Message, maxReported)}
			}
			return progress(" is not scheduled yet: " + oneLine(reasonAndMessage(c.Reason, c.Message), maxReported))
		}
	}
	for _, spec := range pod.Spec.InitContainers {
		st := containerStatus(pod.Status.InitContainerStatuses, spec.Name)
		if st == nil {
			return progress(" is pending")
		}
		if f := diagnoseContainer(pod, &spec, st, true); f != nil {
			return f
		}
		if st.State.Terminated == nil || st.State.Terminated.ExitCode != 0 {
			return progress(": init container " + st.Name + " " + containerProgress(st))
		}
	}
	for _, spec := range pod.Spec.Containers {
		st := containerStatus(pod.Status.ContainerStatuses, spec.Name)
		if st == nil {
			return progress(" is pending")
		}
		if f := diagnoseContainer(pod, &spec, st, false); f != nil {
			return f
		}
		if !st.Ready {
			return progress(": container " + st.Name + " " + containerProgress(st))
		}
	}
	return progress(" is ready; waiting for the Deployment to count it available")
}

// containerStatus returns the status of the named container, or nil.
func containerStatus(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}

// diagnoseContainer returns what keeps one container (an init container when init) from
// running: an image it cannot pull, a configuration or start error, or an exit; nil when
// it is being created, runs, or (an init container) completed.
func diagnoseContainer(pod *corev1.Pod, spec *corev1.Container, st *corev1.ContainerStatus, init bool) *podFinding {
	name, exitReason := "Pod "+pod.Name+": container "+st.Name, mcpv1alpha1.ReasonServerExited
	if init {
		name, exitReason = "Pod "+pod.Name+": init container "+st.Name, mcpv1alpha1.ReasonBridgeInstallFailed
	}
	if w := st.State.Waiting; w != nil {
		reported := oneLine(reasonAndMessage(w.Reason, w.Message), maxReported)
		switch {
		case slices.Contains(pullFailures, w.Reason):
			return &podFinding{reason: mcpv1alpha1.ReasonImagePullFailed,
				message: fmt.Sprintf("%s cannot pull image %q: %s", name, oneLine(spec.Image, maxReported), reported)}
		case slices.Contains(configFailures, w.Reason):
			return &podFinding{reason: mcpv1alpha1.ReasonContainerConfigInvalid, message: name + " cannot be created: " + reported}
		case slices.Contains(startFailures, w.Reason):
			return &podFinding{reason: mcpv1alpha1.ReasonContainerStartFailed, message: name + " cannot be started: " + reported}
		}
	}
	// The instance that exited: the current one, or the one before the last restart
	// (while the kubelet backs off, and while the restarted instance is not ready yet,
	// so that a crash loop keeps one reason).
	exited, previous := st.State.Terminated, false
	if exited == nil && !st.Ready && st.RestartCount > 0 {
		exited, previous = st.LastTerminationState.Terminated, true
	}
	if exited == nil || init && !previous && exited.ExitCode == 0 {
		return nil
	}
	if slices.Contains(startFailures, exited.Reason) {
		return &podFinding{reason: mcpv1alpha1.ReasonContainerStartFailed,
			message: name + " cannot be started: " + oneLine(reasonAndMessage(exited.Reason, exited.Message), maxReported)}
	}
	message := fmt.Sprintf("%s exited with code %d", name, exited.ExitCode)
	if exited.Reason != "" {
		message += " (" + oneLine(exited.Reason, 64) + ")"
	}
	if st.RestartCount > 0 {
		message += fmt.Sprintf(", restarted %d times", st.RestartCount)
	}
	if exited.Message != "" {
		message += "; it said: " + oneLine(exited.Message, maxReported/2)
	}
	return &podFinding{reason: exitReason, message: message, logs: &logSource{
		namespace: pod.Namespace, pod: pod.Name, uid: pod.UID, container: st.Name,
		containerID: exited.ContainerID, restarts: st.RestartCount, previous: previous,
	}}
}

// containerProgress says what a container that is neither failed nor ready is doing.
func containerProgress(st *corev1.ContainerStatus) string {
	switch {
	case st.State.Waiting != nil:
		return "is waiting: " + oneLine(reasonAndMessage(st.State.Waiting.Reason, st.State.Waiting.Message), maxReported)
	case st.State.Running != nil && st.Started != nil && !*st.Started:
		return "is starting"
	case st.State.Running != nil:
		return "is running, not ready yet"
	default:
		return "has not started"
	}
}

// reasonAndMessage joins the parts that are not empty with ": ", as in "ErrImagePull: not found".
func reasonAndMessage(parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), ": ")
}

// ansiEscape matches terminal escape sequences (colours, cursor movement), which servers
// write to their logs and which mean nothing in a condition message.
var ansiEscape = regexp.MustCompile(`\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])`)

// oneLine makes text that the operator does not control fit a condition message: valid
// UTF-8, escape sequences removed, control and format characters (line breaks, bidi
// overrides, zero-width characters) replaced by spaces, runs of spaces collapsed, the
// query strings of URLs dropped (a server's log may quote a token in one), cut to max
// bytes.
func oneLine(s string, max int) string {
	s = connector.ScrubQueries(ansiEscape.ReplaceAllString(strings.ToValidUTF8(s, "\uFFFD"), ""))
	var b strings.Builder
	space := false
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
		if b.Len() > max+utf8.UTFMax {
			break
		}
	}
	return connector.TruncateUTF8(b.String(), max)
}

// quoteLog makes the end of a container's log one line of at most max bytes: each log
// line made one line (see oneLine), the bridge's JSON lines shortened to their message,
// error and the server's stderr line, lines joined by " | ", and as many of the last
// ones kept as fit.
func quoteLog(raw []byte, max int) string {
	var lines []string
	for line := range bytes.Lines(raw) {
		// Whole lines here (the read is bounded): a line too long keeps its end below.
		if l := oneLine(logLineText(line), 3*len(line)); l != "" { // U+FFFD for a bad byte
			lines = append(lines, l)
		}
	}
	out := ""
	for i := len(lines) - 1; i >= 0; i-- {
		next := lines[i]
		if out != "" {
			next += " | " + out
		}
		if len(next) > max {
			if out == "" { // the last line alone is too long: keep its end
				out = "…" + tailUTF8(lines[i], max-len("…"))
			}
			break
		}
		out = next
	}
	return out
}

// logLineText returns what one log line says: for a JSON line of the bridge (zap), its
// msg, then the server's stderr line or the error it carries; any other line as it is.
func logLineText(line []byte) string {
	var entry struct {
		Msg   *string `json:"msg"`
		Line  string  `json:"line"`
		Error string  `json:"error"`
	}
	if json.Unmarshal(line, &entry) != nil || entry.Msg == nil {
		return string(line)
	}
	return reasonAndMessage(*entry.Msg, entry.Line, entry.Error)
}

// tailUTF8 returns the last max bytes of s at most, starting on a rune boundary.
func tailUTF8(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[len(s)-max:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}
