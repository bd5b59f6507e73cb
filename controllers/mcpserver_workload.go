package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/egress"
)

// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch;delete

// Workload labels and field ownership.
const (
	// serverLabel selects one server's pods; its value is the workload name.
	serverLabel = "mcp.switchboard.dev/server"
	// fieldOwner is the server-side apply field manager of everything the operator applies.
	fieldOwner = "switchboard"
)

// Bridge layout inside a stdio server pod.
const (
	bridgePort       = 8080
	bridgeVolume     = "switchboard-bridge"
	bridgeMountPath  = "/switchboard-bridge"
	bridgeBinaryPath = bridgeMountPath + "/switchboard"
)

// ManagedByLabel and ManagedByValue mark every object the operator creates for a stdio
// server; the manager restricts its cache of Deployments, Services and NetworkPolicies
// to objects carrying them.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "switchboard"
)

// WorkloadStatus is what a stdio runtime reports about one server's workload.
type WorkloadStatus struct {
	// Endpoint is the bridge's Streamable HTTP URL.
	Endpoint string
	// Available is true when the bridge can take sessions.
	Available bool
	// Instance names the version of the workload that serves (the newest ReplicaSet
	// with an available pod) when the runtime knows it; the connector starts a new
	// session when it changes (connector.Config.Instance).
	Instance string
	// Reason is why it is not available, an mcpv1alpha1 Reason (ImagePullFailed,
	// ServerExited, ...); empty means ReasonWorkloadUnavailable.
	Reason string
	// Message says why it is not available, or what runs it when it is.
	Message string
	// Rollout is set while the workload is Available but its current pod template has
	// not rolled out: pods of the previous version keep serving while the new version
	// does not run yet. Nil once the new version runs, and while nothing is available.
	Rollout *Rollout
	// ProgressDeadlineExceeded is true when the Deployment made no progress on its
	// current pod template within its progress deadline (its Progressing condition is
	// False with reason ProgressDeadlineExceeded): what keeps it from running does not
	// go away by waiting.
	ProgressDeadlineExceeded bool
	// HostPeersNotEnforced is true when the pod's NetworkPolicy had to leave out host
	// peers of the selecting egress policies.
	HostPeersNotEnforced bool
	// RequeueAfter is how soon to look at a server that is not Available again. Zero
	// means the runtime's watches bring the server back when its workload changes.
	RequeueAfter time.Duration
}

// Rollout is why a new version of an available workload does not run yet.
type Rollout struct {
	// Reason is an mcpv1alpha1 Reason: RollingOut while the new pod is being created
	// or started, or what keeps it from running (ImagePullFailed, ServerExited, ...).
	Reason string
	// Message names the new pod and what it waits for or failed with.
	Message string
}

// StdioRuntime runs stdio servers behind the Switchboard bridge: as a Deployment in the
// cluster, or as local processes for `switchboard dev` and tests. A runtime owns what it
// runs: it starts it, watches it and removes it.
type StdioRuntime interface {
	// Ensure makes the server's workload match its spec, with its own egress governed
	// by rules, and reports where the bridge listens and whether it is available.
	Ensure(ctx context.Context, obj *mcpv1alpha1.MCPServer, rules *egress.ServerRules) (WorkloadStatus, error)
	// Remove stops and removes whatever the runtime runs for the server: when the
	// server is suspended, deleted, or no longer a stdio server. It is cheap and does
	// nothing when nothing runs.
	Remove(ctx context.Context, key connector.Key) error
	// Watch adds the watches that bring a server back to the reconciler when its
	// workload changes, to the controller being built.
	Watch(b *builder.Builder) *builder.Builder
}

// PodRuntime runs each stdio server as a Deployment, a Service and a NetworkPolicy,
// owned by the MCPServer so that deleting it garbage-collects them.
type PodRuntime struct {
	// Client applies the workload objects and reads them back from the cache.
	Client client.Client
	// Scheme sets owner references.
	Scheme *runtime.Scheme
	// BridgeImage is the operator's own image, which holds the switchboard binary the
	// server container runs as the bridge.
	BridgeImage string
	// BridgeImageBinary is the switchboard binary's path inside BridgeImage. When set,
	// the image is mounted into the server pod as an image volume (Kubernetes 1.36 and
	// later) and the bridge runs from there; when empty, an init container copies the
	// binary into an emptyDir first, which costs every pod start about a second.
	BridgeImageBinary string
	// OperatorNamespace is where the manager runs; its pods may reach the bridge.
	OperatorNamespace string
	// DNS is where the cluster DNS runs, for the pod's NetworkPolicy.
	DNS egress.ClusterDNS
	// Logs reads the last log lines of a server container that exited, for the status;
	// nil leaves them out.
	Logs PodLogReader

	// tails holds, per server, the log tail last read (connector.Key -> *cachedTail), so
	// that a container instance's log is read once.
	tails sync.Map
}

// workloadName returns the name of the Deployment, Service and NetworkPolicy of the
// server called server: a DNS label (Service names must be), stable, and unique within
// the namespace.
func workloadName(server string) string {
	name := "mcp-" + server
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(server))
	return name[:54] + "-" + hex.EncodeToString(sum[:])[:8]
}

// bridgeCommand is the server container's command: the bridge, then the user's command.
// PerSession is the bridge's default and is left out, so that the Deployments of servers
// that do not set sessionMode stay as they were and their pods do not roll.
func bridgeCommand(stdio *mcpv1alpha1.StdioServerSpec, binary, listen string) []string {
	maxSessions := stdio.MaxSessions
	if maxSessions == 0 {
		maxSessions = 4
	}
	cmd := []string{binary, "bridge", "--listen", listen, "--max-sessions", strconv.Itoa(int(maxSessions))}
	if stdio.SessionMode == mcpv1alpha1.StdioSessionModeShared {
		cmd = append(cmd, "--session-mode", string(mcpv1alpha1.StdioSessionModeShared))
	}
	cmd = append(cmd, "--")
	return append(cmd, stdio.Command...)
}

// containerSecurityContext is the security context of both containers of a stdio server
// pod: no privilege escalation and no capabilities always, and the user and group the
// spec asks for. The init container that copies the bridge runs as that user too: then
// runAsNonRoot holds for every container of the pod (as Pod Security "restricted"
// demands, and as the user asked), and the copied binary belongs to the user that runs
// it. Any user can do the copy: the switchboard binary in the operator image is
// executable by everyone and an emptyDir is writable by everyone. Unset fields add
// nothing, so without a securityContext the containers run as their images' users,
// exactly as before the field existed.
func containerSecurityContext(sc *mcpv1alpha1.StdioSecurityContext) *corev1.SecurityContext {
	c := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if sc != nil {
		c.RunAsNonRoot, c.RunAsUser, c.RunAsGroup = sc.RunAsNonRoot, sc.RunAsUser, sc.RunAsGroup
	}
	return c
}

// podSecurityContext is the pod-level security context: the RuntimeDefault seccomp
// profile always, and the spec's fsGroup, which only the pod level has.
func podSecurityContext(sc *mcpv1alpha1.StdioSecurityContext) *corev1.PodSecurityContext {
	p := &corev1.PodSecurityContext{
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if sc != nil {
		p.FSGroup = sc.FSGroup
	}
	return p
}

// Ensure applies the server's Deployment, Service and NetworkPolicy with server-side
// apply and reports the Deployment's availability.
func (p *PodRuntime) Ensure(ctx context.Context, obj *mcpv1alpha1.MCPServer, rules *egress.ServerRules) (WorkloadStatus, error) {
	name := workloadName(obj.Name)
	labels := map[string]string{
		ManagedByLabel:               ManagedByValue,
		serverLabel:                  name,
		"app.kubernetes.io/name":     "mcp-server",
		"app.kubernetes.io/instance": obj.Name,
	}
	selector := map[string]string{serverLabel: name}

	rendered := rules.NetworkPolicy(egress.NetworkPolicyOptions{
		Name: name, Namespace: obj.Namespace, PodLabels: selector, DNS: p.DNS,
	})
	np := rendered.NetworkPolicy
	np.Labels = labels
	np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{p.bridgeIngress(obj.Namespace)}

	for _, desired := range []client.Object{p.deployment(obj, name, labels, selector), p.service(obj, name, labels, selector), np} {
		if err := p.apply(ctx, obj, desired); err != nil {
			return WorkloadStatus{}, err
		}
	}

	status := WorkloadStatus{
		Endpoint:             fmt.Sprintf("http://%s.%s.svc:%d/mcp", name, obj.Namespace, bridgePort),
		HostPeersNotEnforced: rendered.HostPeersNotEnforced,
	}
	deploy := &appsv1.Deployment{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: obj.Namespace, Name: name}, deploy); err != nil {
		if apierrors.IsNotFound(err) { // applied, not yet in the cache
			status.Message = "Deployment " + name + " is being created"
			return status, nil
		}
		return WorkloadStatus{}, err
	}
	status.Available, status.Message = deploymentAvailable(deploy)
	status.ProgressDeadlineExceeded = progressDeadlineExceeded(deploy)
	key := connector.Key{Namespace: obj.Namespace, Name: obj.Name}
	if status.Available {
		replicaSets, pods, err := p.workloadOf(ctx, deploy)
		if err != nil {
			return WorkloadStatus{}, err
		}
		status.Instance = servingRevision(deploy, replicaSets)
		// The pods that serve may be the previous version's: say what keeps the
		// current one from running, if anything does.
		rollout := p.explainRollout(ctx, key, deploy, replicaSets, pods)
		if rollout == nil {
			p.tails.Delete(key)
			return status, nil
		}
		if status.ProgressDeadlineExceeded {
			rollout.message = connector.TruncateUTF8(rollout.message+"; "+progressDeadlineNote(deploy), maxPodMessage)
		}
		status.Rollout = &Rollout{Reason: rollout.reason, Message: rollout.message}
		status.Message += "; its current pod template has not rolled out"
		return status, nil
	}
	if deploy.Status.ObservedGeneration < deploy.Generation {
		// Rolling out: the pods the Deployment controller has not yet replaced are not
		// the ones to explain.
		return status, nil
	}
	found, err := p.explainUnavailable(ctx, key, deploy)
	if err != nil {
		return WorkloadStatus{}, err
	}
	if found != nil {
		status.Reason, status.Message = found.reason, found.message
	}
	if status.ProgressDeadlineExceeded {
		status.Message = connector.TruncateUTF8(status.Message+"; "+progressDeadlineNote(deploy), maxPodMessage)
	}
	return status, nil
}

// ServingInstance is the version of the server's workload that serves, as Ensure
// reports it (WorkloadStatus.Instance), read from the cache by a replica that does not
// own the server. Its gateway's sessions must carry the owner's Instance: a config that
// differs only there would, on taking the server over, start a new session and end the
// calls in flight on the one it replaces.
func (p *PodRuntime) ServingInstance(ctx context.Context, obj *mcpv1alpha1.MCPServer) (string, error) {
	deploy := &appsv1.Deployment{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: obj.Namespace, Name: workloadName(obj.Name)}, deploy); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if available, _ := deploymentAvailable(deploy); !available {
		return "", nil
	}
	replicaSets, err := p.replicaSetsOf(ctx, deploy)
	if err != nil {
		return "", err
	}
	return servingRevision(deploy, replicaSets), nil
}

// Remove deletes the server's Deployment, Service and NetworkPolicy. It looks in the
// cache first, so a server that runs no workload costs no API request, and it deletes
// only objects the server controls. (Owner references would garbage-collect them once
// the MCPServer is deleted, but a server switched to http or suspended keeps existing.)
func (p *PodRuntime) Remove(ctx context.Context, key connector.Key) error {
	p.tails.Delete(key)
	name := workloadName(key.Name)
	for _, w := range []struct {
		kind string
		obj  client.Object
	}{{"Deployment", &appsv1.Deployment{}}, {"Service", &corev1.Service{}}, {"NetworkPolicy", &networkingv1.NetworkPolicy{}}} {
		if err := p.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, w.obj); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("reading %s %s: %w", w.kind, name, err)
		}
		if owner := metav1.GetControllerOf(w.obj); owner == nil || owner.Kind != "MCPServer" || owner.Name != key.Name {
			continue // not ours to delete
		}
		err := p.Client.Delete(ctx, w.obj,
			client.PropagationPolicy(metav1.DeletePropagationBackground),
			client.Preconditions{UID: ptr.To(w.obj.GetUID())})
		// NotFound: already gone. Conflict: a newer object of that name, not this one.
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting %s %s: %w", w.kind, name, err)
		}
	}
	return nil
}

// Watch makes a change to a server's Deployment (a pod becoming available, someone
// editing it), Service or NetworkPolicy reconcile the server like a spec change, and so
// does a change to its pods (what the kubelet and the scheduler report) and ReplicaSets
// (a pod the API server refused), which WorkloadStatus explains.
func (p *PodRuntime) Watch(b *builder.Builder) *builder.Builder {
	return b.Owns(&appsv1.Deployment{}).Owns(&corev1.Service{}).Owns(&networkingv1.NetworkPolicy{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(p.serverOfWorkload)).
		Watches(&appsv1.ReplicaSet{}, handler.EnqueueRequestsFromMapFunc(p.serverOfWorkload),
			builder.WithPredicates(replicaFailureChanged{}))
}

// replicaFailureChanged passes the ReplicaSet events a server's status depends on: one
// created or deleted (a rollout's new template), one whose ReplicaFailure condition
// changed (the API server refused, or admitted again, its pods), and one whose available
// replicas changed (a rollout's new pod became available: see explainRollout). Its other
// replica counts change with every pod, and the Deployment's status carries them.
type replicaFailureChanged struct {
	predicate.Funcs
}

// Update reports whether the ReplicaFailure condition or the available replicas changed.
func (replicaFailureChanged) Update(e event.UpdateEvent) bool {
	old, oldOK := e.ObjectOld.(*appsv1.ReplicaSet)
	updated, newOK := e.ObjectNew.(*appsv1.ReplicaSet)
	if !oldOK || !newOK {
		return true
	}
	failure := func(rs *appsv1.ReplicaSet) appsv1.ReplicaSetCondition {
		for _, c := range rs.Status.Conditions {
			if c.Type == appsv1.ReplicaSetReplicaFailure {
				return c
			}
		}
		return appsv1.ReplicaSetCondition{}
	}
	was, now := failure(old), failure(updated)
	return was.Status != now.Status || was.Reason != now.Reason || was.Message != now.Message ||
		old.Status.AvailableReplicas != updated.Status.AvailableReplicas
}

// serverOfWorkload maps a pod or ReplicaSet of a server's Deployment to the server: the
// controller of the Deployment its serverLabel names.
func (p *PodRuntime) serverOfWorkload(ctx context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[serverLabel]
	if name == "" {
		return nil
	}
	deploy := &appsv1.Deployment{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}, deploy); err != nil {
		return nil // gone, or not in the cache yet: its own event reconciles the server
	}
	owner := metav1.GetControllerOf(deploy)
	if owner == nil || owner.Kind != "MCPServer" || owner.APIVersion != mcpv1alpha1.GroupVersion.String() {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: owner.Name}}}
}

// deploymentAvailable reports whether the Deployment has an available replica, and says
// why not. The replica may be of an earlier pod template than the current one: during
// a rolling update the Deployment keeps the previous version's pods until the new
// version's are available, and they serve meanwhile (see explainRollout).
func deploymentAvailable(d *appsv1.Deployment) (bool, string) {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue && d.Status.AvailableReplicas > 0 {
			return true, fmt.Sprintf("Deployment %s has %d available replica(s)", d.Name, d.Status.AvailableReplicas)
		}
	}
	if d.Status.ObservedGeneration < d.Generation {
		return false, "Deployment " + d.Name + " is rolling out"
	}
	return false, "Deployment " + d.Name + " has no available replica"
}

// deploymentTimedOut is the reason of a Deployment's Progressing condition once its
// progress deadline passed (the Deployment controller's TimedOutReason).
const deploymentTimedOut = "ProgressDeadlineExceeded"

// progressDeadlineExceeded reports whether the Deployment gave up waiting for progress
// on its current pod template: its Progressing condition is False with reason
// ProgressDeadlineExceeded. A condition the Deployment controller wrote for an earlier
// generation does not count.
func progressDeadlineExceeded(d *appsv1.Deployment) bool {
	if d.Status.ObservedGeneration < d.Generation {
		return false
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing {
			return c.Status == corev1.ConditionFalse && c.Reason == deploymentTimedOut
		}
	}
	return false
}

// progressDeadlineNote says that the Deployment d exceeded its progress deadline.
func progressDeadlineNote(d *appsv1.Deployment) string {
	seconds := int32(600) // the API server's default
	if d.Spec.ProgressDeadlineSeconds != nil {
		seconds = *d.Spec.ProgressDeadlineSeconds
	}
	return fmt.Sprintf("Deployment %s made no progress for %ds (%s)", d.Name, seconds, deploymentTimedOut)
}

// apply server-side applies desired, owned by obj.
func (p *PodRuntime) apply(ctx context.Context, owner *mcpv1alpha1.MCPServer, desired client.Object) error {
	if err := controllerutil.SetControllerReference(owner, desired, p.Scheme); err != nil {
		return err
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(desired)
	if err != nil {
		return err
	}
	// Fields the operator does not own must not be in the apply configuration.
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	gvk, err := p.Client.GroupVersionKindFor(desired)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: u}
	obj.SetGroupVersionKind(gvk)
	if err := p.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", gvk.Kind, desired.GetName(), err)
	}
	return nil
}

// bridgeShutdownDelaySeconds is how long a stopping stdio server pod keeps serving before
// its bridge is told to stop: long enough for the endpoints controller and kube-proxy to
// take it out of its Service.
const bridgeShutdownDelaySeconds = 5

// bridgeStartupSeconds is how long the bridge has to listen once its container has
// started before the kubelet restarts the container. The bridge listens before it
// starts the server's command, so this does not bound a slow server's start.
const bridgeStartupSeconds = 30

// deployment renders the server's Deployment: the server container runs the user's
// image with the bridge in front of the user's command, the switchboard binary coming
// from the operator's image, mounted as an image volume or copied by an init container
// (BridgeImageBinary).
func (p *PodRuntime) deployment(obj *mcpv1alpha1.MCPServer, name string, labels, selector map[string]string) *appsv1.Deployment {
	stdio := obj.Spec.Stdio
	binary := bridgeBinaryPath
	if p.BridgeImageBinary != "" {
		binary = path.Join(bridgeMountPath, p.BridgeImageBinary)
	}
	server := corev1.Container{
		Name:    "server",
		Image:   stdio.Image,
		Command: bridgeCommand(stdio, binary, fmt.Sprintf(":%d", bridgePort)),
		Args:    stdio.Args,
		Env:     stdio.Env,
		Ports:   []corev1.ContainerPort{{Name: "mcp", ContainerPort: bridgePort, Protocol: corev1.ProtocolTCP}},
		// The kubelet reports a container started, and (with no readiness probe) its pod
		// Ready, once its postStart hook has returned: the hook waits for the bridge to
		// listen, so the pod joins its Service the moment the bridge can take sessions.
		// Probes could not do that: the first one runs up to a period after the
		// container starts, and a readiness probe the kubelet runs at once can still
		// miss the container it was started for and wait its whole period. A bridge
		// shutting down needs no probe either: its pod is terminating, which takes it
		// out of its Service, and the preStop sleep keeps it serving until then.
		Lifecycle: &corev1.Lifecycle{
			PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{
				binary, "await", "--timeout", fmt.Sprintf("%ds", bridgeStartupSeconds),
				fmt.Sprintf("http://127.0.0.1:%d/healthz", bridgePort),
			}}},
			// The bridge serves on while the pod leaves the Service's endpoints (a
			// rollout, an operator upgrade that brings a new bridge): SIGTERM, which ends
			// its sessions, comes after the sleep, and no new session is sent to a pod
			// going away.
			PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: bridgeShutdownDelaySeconds}},
		},
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/healthz", Port: intstr.FromInt32(bridgePort),
		}}},
		SecurityContext: containerSecurityContext(stdio.SecurityContext),
		VolumeMounts:    []corev1.VolumeMount{{Name: bridgeVolume, MountPath: bridgeMountPath, ReadOnly: true}},
	}
	if stdio.Resources != nil {
		server.Resources = *stdio.Resources
	}
	podSpec := corev1.PodSpec{
		Containers:      []corev1.Container{server},
		SecurityContext: podSecurityContext(stdio.SecurityContext),
		// A stdio server has no business with the Kubernetes API unless it is given a
		// ServiceAccount of its own.
		ServiceAccountName:           stdio.ServiceAccountName,
		AutomountServiceAccountToken: ptr.To(stdio.ServiceAccountName != ""),
	}
	if p.BridgeImageBinary != "" {
		podSpec.Volumes = []corev1.Volume{{Name: bridgeVolume, VolumeSource: corev1.VolumeSource{
			// The pull policy defaults as the init container's did: Always for :latest.
			Image: &corev1.ImageVolumeSource{Reference: p.BridgeImage},
		}}}
	} else {
		podSpec.InitContainers = []corev1.Container{{
			Name:  "install-bridge",
			Image: p.BridgeImage,
			// The image's own entrypoint is the switchboard binary, wherever the image
			// keeps it (/switchboard from the Dockerfile, /ko-app/switchboard from ko).
			Args:            []string{"install", bridgeBinaryPath},
			SecurityContext: containerSecurityContext(stdio.SecurityContext),
			VolumeMounts:    []corev1.VolumeMount{{Name: bridgeVolume, MountPath: bridgeMountPath}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi"),
			}},
		}}
		podSpec.Volumes = []corev1.Volume{{Name: bridgeVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("256Mi"))},
		}}}
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: obj.Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       podSpec,
			},
		},
	}
}

// service renders the Service the connector and agents reach the bridge through.
func (p *PodRuntime) service(obj *mcpv1alpha1.MCPServer, name string, labels, selector map[string]string) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: obj.Namespace, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports: []corev1.ServicePort{{
				Name: "mcp", Port: bridgePort, TargetPort: intstr.FromString("mcp"), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// bridgeIngress admits the operator's namespace and the server's own namespace to the
// bridge port, and nobody else.
func (p *PodRuntime) bridgeIngress(namespace string) networkingv1.NetworkPolicyIngressRule {
	namespaces := []string{namespace}
	if p.OperatorNamespace != "" && p.OperatorNamespace != namespace {
		namespaces = append(namespaces, p.OperatorNamespace)
	}
	peers := make([]networkingv1.NetworkPolicyPeer, len(namespaces))
	for i, ns := range namespaces {
		peers[i] = networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{corev1.LabelMetadataName: ns},
		}}
	}
	return networkingv1.NetworkPolicyIngressRule{
		From:  peers,
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(bridgePort))}},
	}
}
