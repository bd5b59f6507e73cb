package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/egress"
)

// mcpServerFinalizer makes deletion wait until the operator has closed the server's session.
const mcpServerFinalizer = "mcp.switchboard.dev/session"

// Event reasons, emitted only on transitions.
const (
	eventConnected      = "Connected"
	eventConnectionLost = "ConnectionLost"
	eventRecovered      = "Recovered"
	eventToolsChanged   = "ToolsChanged"
	eventSecretNotFound = "SecretNotFound"
	eventEgressDenied   = "EgressDenied"
)

// MCPServerReconciler turns MCPServers into connector sessions and what the connector
// observes into status. It never talks MCP itself: the connector pool owns every session
// and tells the reconciler about changes through a channel source.
type MCPServerReconciler struct {
	// Client reads and patches MCPServers from the manager's cache.
	Client client.Client
	// SecretReader reads Secret data directly from the API server; the cache holds
	// Secret metadata only.
	SecretReader client.Reader
	// Recorder records Events on transitions.
	Recorder recorder.EventRecorder
	// Pool holds the sessions.
	Pool *connector.Pool
	// DefaultProbeInterval is used when a server sets no healthCheck.interval.
	DefaultProbeInterval time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles.
	MaxConcurrentReconciles int
	// EgressDefaults is the posture for servers no MCPEgressPolicy selects.
	EgressDefaults egress.Defaults
	// Stdio runs stdio servers; nil rejects them with InvalidSpec.
	Stdio StdioRuntime
	// StdioRequeue is how soon a stdio server whose bridge is not yet available is looked
	// at again. Zero relies on the workload's watch alone (the pod runtime).
	StdioRequeue time.Duration

	// announced holds, per server, the status whose transitions were last announced as
	// Events (connector.Key -> *mcpv1alpha1.MCPServerStatus). The cache can lag behind
	// this manager's own status patch, and a reconcile that read the older copy would
	// otherwise announce the same transition twice.
	announced sync.Map
}

// Reconcile brings one MCPServer's session and status in line with its spec. It owns
// every condition of the object except WorkloadAvailable.
func (r *MCPServerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	log := ctrl.LoggerFrom(ctx)
	key := connector.Key{Namespace: req.Namespace, Name: req.Name}

	obj := &mcpv1alpha1.MCPServer{}
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.stop(key) // deleted without our finalizer, e.g. after a forced removal
			r.announced.Delete(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}

	if !obj.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, obj, key)
	}
	// Every step below changes obj.Status in memory; one patch writes it, and only
	// when something a user would see changed.
	before := obj.DeepCopy()
	defer func() {
		summarize(obj)
		r.recordTransitions(r.lastAnnounced(key, before), obj)
		r.announced.Store(key, eventStatus(obj))
		if equality.Semantic.DeepEqual(before.Status, obj.Status) {
			return
		}
		if err := r.Client.Status().Patch(ctx, obj, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("patching status: %w", err))
		}
	}()

	if obj.Spec.Suspend {
		r.stop(key)
		setNotReady(obj, mcpv1alpha1.ReasonSuspended, "Suspended: spec.suspend is true, no session is held")
		log.V(1).Info("Server suspended")
		return ctrl.Result{}, nil
	}
	rules, err := egressRules(ctx, r.Client, r.EgressDefaults, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	var cfg connector.Config
	var egressMessage string
	if obj.Spec.Stdio != nil {
		var available bool
		cfg, egressMessage, available, err = r.reconcileWorkload(ctx, obj, rules)
		if err != nil || !available {
			// No session until the bridge can take one. The Deployment watch (or, for
			// local processes, a short requeue) brings the server back here.
			r.Pool.Remove(key)
			return ctrl.Result{RequeueAfter: r.StdioRequeue}, err
		}
	} else {
		if r.Stdio != nil {
			r.Stdio.Remove(key) // the server may have been a stdio one before
		}
		cfg, err = r.reconcileSecrets(ctx, obj)
		if err != nil {
			var missing *missingSecretError
			if errors.As(err, &missing) {
				// No connection attempt without the credentials; the Secret watch
				// wakes the server when the Secret appears.
				r.Pool.Remove(key)
				setNotReady(obj, mcpv1alpha1.ReasonSecretNotFound, capitalize(missing.Error()))
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, err
		}
		cfg.Egress = rules
		egressMessage = "Egress to " + connector.DisplayURL(cfg.URL) + " is allowed by " + egressSource(rules)
	}
	r.reconcileConnection(obj, key, cfg, egressMessage)
	// The session is already connecting; the finalizer that will close it follows.
	return ctrl.Result{}, r.ensureFinalizer(ctx, obj)
}

// ensureFinalizer adds the finalizer that makes deletion close the session. It patches
// a copy, so the status changes made in memory stay for the status patch.
func (r *MCPServerReconciler) ensureFinalizer(ctx context.Context, obj *mcpv1alpha1.MCPServer) error {
	if controllerutil.ContainsFinalizer(obj, mcpServerFinalizer) {
		return nil
	}
	patched := obj.DeepCopy()
	controllerutil.AddFinalizer(patched, mcpServerFinalizer)
	// The optimistic lock keeps finalizers another writer adds meanwhile.
	if err := r.Client.Patch(ctx, patched, client.MergeFromWithOptions(obj, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding finalizer: %w", err)
	}
	obj.Finalizers = patched.Finalizers
	return nil
}

// reconcileSecrets builds the connector config of an http server, with headers and CA
// bundle read from the Secrets the spec references.
func (r *MCPServerReconciler) reconcileSecrets(ctx context.Context, obj *mcpv1alpha1.MCPServer) (connector.Config, error) {
	spec := obj.Spec.HTTP
	resolver := &secretResolver{reader: r.SecretReader, namespace: obj.Namespace}
	headers, caBundle, err := resolver.resolveHTTP(ctx, spec)
	if err != nil {
		return connector.Config{}, err
	}
	cfg := r.connectionConfig(obj, spec.URL, connector.Protocol(spec.Protocol))
	cfg.Headers = headers
	cfg.CABundle = caBundle
	return cfg, nil
}

// connectionConfig returns the connector config for url with the spec's timeout and
// health check settings.
func (r *MCPServerReconciler) connectionConfig(obj *mcpv1alpha1.MCPServer, url string, protocol connector.Protocol) connector.Config {
	cfg := connector.Config{
		URL:         url,
		Protocol:    protocol,
		HealthCheck: connector.HealthCheck{Interval: r.DefaultProbeInterval},
	}
	if obj.Spec.Timeout != nil {
		cfg.Timeout = obj.Spec.Timeout.Duration
	}
	if hc := obj.Spec.HealthCheck; hc != nil {
		if hc.Interval != nil {
			cfg.HealthCheck.Interval = hc.Interval.Duration
		}
		cfg.HealthCheck.FailureThreshold = int(hc.FailureThreshold)
	}
	return cfg
}

// bridgeEgress judges the operator's own connection to a stdio server's bridge. That
// connection is internal and exempt from the server's egress policies, which govern the
// pod; only the built-in denials (link-local, metadata) still apply.
var bridgeEgress, _ = egress.Compile(nil, egress.Defaults{Posture: egress.PostureAll})

// reconcileWorkload runs a stdio server through the stdio runtime and returns the config
// to reach its bridge, the EgressAllowed message, and whether the bridge is available.
// It owns WorkloadAvailable and, for stdio servers, EgressAllowed.
func (r *MCPServerReconciler) reconcileWorkload(ctx context.Context, obj *mcpv1alpha1.MCPServer, rules *egress.ServerRules) (connector.Config, string, bool, error) {
	if r.Stdio == nil {
		setNotReady(obj, mcpv1alpha1.ReasonInvalidSpec, "This manager runs no stdio runtime: start it with --bridge-image (pod runtime) or --stdio-runtime=local")
		return connector.Config{}, "", false, nil
	}
	ws, err := r.Stdio.Ensure(ctx, obj, rules)
	if err != nil {
		setCondition(obj, mcpv1alpha1.ConditionWorkloadAvailable, metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadUnavailable,
			"Cannot run the server: "+err.Error())
		return connector.Config{}, "", false, err
	}
	obj.Status.Transport = mcpv1alpha1.TransportStdio
	obj.Status.Endpoint = ws.Endpoint

	egressMessage := "The server pod's egress is governed by " + egressSource(rules)
	if ws.HostPeersNotEnforced {
		egressMessage += "; " + egress.HostPeersNote
	}
	setCondition(obj, mcpv1alpha1.ConditionEgressAllowed, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded, egressMessage)

	if !ws.Available {
		setCondition(obj, mcpv1alpha1.ConditionWorkloadAvailable, metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadUnavailable, ws.Message)
		waiting := "Waiting for the bridge: " + ws.Message
		for _, t := range []string{mcpv1alpha1.ConditionConnected, mcpv1alpha1.ConditionToolsDiscovered} {
			setCondition(obj, t, metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadUnavailable, waiting)
		}
		return connector.Config{}, "", false, nil
	}
	setCondition(obj, mcpv1alpha1.ConditionWorkloadAvailable, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded, ws.Message)
	cfg := r.connectionConfig(obj, ws.Endpoint, connector.ProtocolStreamableHTTP)
	cfg.Egress = bridgeEgress.ForServer(obj.Namespace, obj.Labels)
	return cfg, egressMessage, true, nil
}

// reconcileConnection makes the pool hold a session with cfg and copies what the
// connector observed into status. It owns Connected, ToolsDiscovered and EgressAllowed
// (egressMessage says what allowed the connection). It never waits on the network: a
// new session reports through the channel source.
func (r *MCPServerReconciler) reconcileConnection(obj *mcpv1alpha1.MCPServer, key connector.Key, cfg connector.Config, egressMessage string) {
	r.Pool.Ensure(key, cfg)
	snap, ok := r.Pool.Snapshot(key)
	if !ok {
		return // the pool is shutting down
	}
	transport, endpoint := obj.Status.Transport, obj.Status.Endpoint
	applySnapshot(obj, snap, egressMessage)
	if obj.Spec.Stdio != nil {
		// The connector speaks Streamable HTTP to the bridge; the user runs stdio.
		obj.Status.Transport, obj.Status.Endpoint = transport, endpoint
		if snap.State == connector.StateReady {
			setCondition(obj, mcpv1alpha1.ConditionConnected, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded,
				"Connected to the stdio server through its bridge, protocol "+snap.ProtocolVersion)
		}
	}
}

// egressSource says what governs a server's egress, for the EgressAllowed message.
func egressSource(rules *egress.ServerRules) string {
	if rules.Selected() {
		return "MCPEgressPolicy " + strings.Join(rules.Policies(), ", ")
	}
	return "the default egress posture"
}

// reconcileDelete closes the session and releases the object. Closing never waits on
// the server, so deletion cannot hang when the server is gone.
func (r *MCPServerReconciler) reconcileDelete(ctx context.Context, obj *mcpv1alpha1.MCPServer, key connector.Key) error {
	r.stop(key)
	r.announced.Delete(key)
	if !controllerutil.ContainsFinalizer(obj, mcpServerFinalizer) {
		return nil
	}
	before := obj.DeepCopy()
	controllerutil.RemoveFinalizer(obj, mcpServerFinalizer)
	if err := r.Client.Patch(ctx, obj, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	return nil
}

// stop closes the server's session and stops whatever the stdio runtime runs for it.
func (r *MCPServerReconciler) stop(key connector.Key) {
	r.Pool.Remove(key)
	if r.Stdio != nil {
		r.Stdio.Remove(key)
	}
}

// lastAnnounced returns the status whose transitions this manager announced last for
// key, or cached (as read from the cache) when it has announced none since it started.
func (r *MCPServerReconciler) lastAnnounced(key connector.Key, cached *mcpv1alpha1.MCPServer) *mcpv1alpha1.MCPServer {
	if st, ok := r.announced.Load(key); ok {
		return &mcpv1alpha1.MCPServer{Status: *st.(*mcpv1alpha1.MCPServerStatus)}
	}
	return cached
}

// eventStatus keeps the part of a status recordTransitions compares: the conditions,
// the tools digest and the tool names.
func eventStatus(obj *mcpv1alpha1.MCPServer) *mcpv1alpha1.MCPServerStatus {
	st := &mcpv1alpha1.MCPServerStatus{
		Conditions:  slices.Clone(obj.Status.Conditions),
		ToolsDigest: obj.Status.ToolsDigest,
		Tools:       make([]mcpv1alpha1.ToolInfo, len(obj.Status.Tools)),
	}
	for i, t := range obj.Status.Tools {
		st.Tools[i].Name = t.Name
	}
	return st
}

// notAttempted are the reasons Connected is False without a connection having been
// tried (or lost): connecting after them is a first connect, not a recovery.
var notAttempted = map[string]bool{
	mcpv1alpha1.ReasonSuspended:           true,
	mcpv1alpha1.ReasonSecretNotFound:      true,
	mcpv1alpha1.ReasonWorkloadUnavailable: true,
	mcpv1alpha1.ReasonInvalidSpec:         true,
}

// recordTransitions emits an Event for every transition between before and after that a
// user would want to hear about.
func (r *MCPServerReconciler) recordTransitions(before, after *mcpv1alpha1.MCPServer) {
	was := meta.FindStatusCondition(before.Status.Conditions, mcpv1alpha1.ConditionConnected)
	now := meta.FindStatusCondition(after.Status.Conditions, mcpv1alpha1.ConditionConnected)
	wasReady := meta.FindStatusCondition(before.Status.Conditions, mcpv1alpha1.ConditionReady)
	nowReady := meta.FindStatusCondition(after.Status.Conditions, mcpv1alpha1.ConditionReady)

	connectedNow := now != nil && now.Status == metav1.ConditionTrue
	connectedBefore := was != nil && was.Status == metav1.ConditionTrue
	switch {
	case connectedNow && !connectedBefore && was != nil && was.Status == metav1.ConditionFalse && !notAttempted[was.Reason]:
		r.event(after, corev1.EventTypeNormal, eventRecovered, "Connect", "Recovered: %s", now.Message)
	case connectedNow && !connectedBefore:
		r.event(after, corev1.EventTypeNormal, eventConnected, "Connect", "%s", now.Message)
	case connectedBefore && now != nil && now.Status == metav1.ConditionFalse && now.Reason != mcpv1alpha1.ReasonSuspended:
		r.event(after, corev1.EventTypeWarning, eventConnectionLost, "Probe", "Connection lost (%s): %s", now.Reason, now.Message)
	}

	if nowReady != nil && nowReady.Status == metav1.ConditionFalse && (wasReady == nil || wasReady.Reason != nowReady.Reason) {
		switch nowReady.Reason {
		case mcpv1alpha1.ReasonSecretNotFound:
			r.event(after, corev1.EventTypeWarning, eventSecretNotFound, "ResolveSecrets", "%s", nowReady.Message)
		case mcpv1alpha1.ReasonEgressDenied, mcpv1alpha1.ReasonRedirectDenied:
			r.event(after, corev1.EventTypeWarning, eventEgressDenied, "Connect", "%s", nowReady.Message)
		}
	}

	if before.Status.ToolsDigest != "" && after.Status.ToolsDigest != "" && before.Status.ToolsDigest != after.Status.ToolsDigest {
		added, removed := toolChanges(before.Status.Tools, after.Status.Tools)
		r.event(after, corev1.EventTypeNormal, eventToolsChanged, "Discover",
			"Tools changed: %d added, %d removed, %d published", added, removed, after.Status.ToolCount)
	}
}

func (r *MCPServerReconciler) event(obj *mcpv1alpha1.MCPServer, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(obj, nil, eventType, reason, action, note, args...)
	}
}

// capitalize upper-cases the first letter of a message built from a lower-case error.
func capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
