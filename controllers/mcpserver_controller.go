package controllers

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/switchboard-mcp/switchboard/internal/sharding"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// mcpServerFinalizer makes deletion wait until the operator has closed the server's
// session and removed its stdio workload. It is added once either exists.
const mcpServerFinalizer = "mcp.switchboard.dev/session"

// Event reasons, emitted only on transitions.
const (
	eventConnected      = "Connected"
	eventConnectionLost = "ConnectionLost"
	eventRecovered      = "Recovered"
	eventToolsChanged   = "ToolsChanged"
	eventToolsPinned    = "ToolsPinned"
	eventSecretNotFound = "SecretNotFound"
	eventEgressDenied   = "EgressDenied"
	// eventAuthenticationFailed announces that no usable OAuth token could be had.
	eventAuthenticationFailed = "AuthenticationFailed"
	// eventWorkloadAvailable announces that a stdio server's bridge is available, and
	// what kept it from being so, for how long. A stdio workload that cannot run is
	// announced with the WorkloadAvailable condition's own reason (ImagePullFailed,
	// ServerExited, ...).
	eventWorkloadAvailable = "WorkloadAvailable"
)

// defaultFirstConnectWait is how long, by default, the status waits for a new session's
// first connect before it is published as connecting. It is short on purpose: until the
// first status write a new object has no conditions, which kstatus reads as Current, so
// this is also how long a GitOps tool may see a server that is not Ready as done. A
// server on the same network connects well within it and gets one write, straight to
// Ready with its tools.
const defaultFirstConnectWait = 250 * time.Millisecond

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
	// FirstConnectWait bounds how long the status of a server whose new session has
	// not finished its first connect is left as it is, so that a server that answers
	// quickly goes straight to Ready with its tools in one status write instead of
	// Connecting first. No reconcile blocks on it: the session's event brings the
	// server back once the connect settles, and a requeue after FirstConnectWait
	// publishes a slower server as connecting (Reconciling). Zero means 500ms; a
	// negative value publishes at once.
	FirstConnectWait time.Duration
	// ClusterResourceNamespace is where the Secrets of cluster-scoped objects live
	// (--cluster-resource-namespace): the client secret of an MCPIdentityProvider's
	// tokenExchange is read from there.
	ClusterResourceNamespace string
	// Shards, when set, splits the servers among the manager's replicas: this one
	// reconciles only the servers it owns and stands by for the others (standBy). Nil
	// means this replica owns every server (one replica, or the elected leader).
	Shards *sharding.Membership

	// written holds, per server, the resourceVersion of this manager's last write to it
	// (connector.Key -> string) until the cache shows that write; see cacheBehind.
	written sync.Map

	// assertions supplies the workload JWTs of workloadIdentity servers (made on first
	// use by sources).
	sourcesOnce sync.Once
	assertions  *assertionSources

	// handedToPool, when set, sees every config the reconciler hands the pool; tests
	// observe what a spec resolved to through it.
	handedToPool func(connector.Key, connector.Config)
}

// Reconcile brings one MCPServer's session, workload and status in line with its spec.
func (r *MCPServerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	ctx, span := startReconcile(ctx, "MCPServer", tracing.Server, req)
	defer func() { endReconcile(span, res, err) }()
	return r.reconcile(ctx, req)
}

// reconcile is Reconcile inside its span. It reads as the table of contents of a
// reconcile: the object, the finalizer, one deferred summary of what the steps observed
// (patched when a user would see a change), then the steps in order.
func (r *MCPServerReconciler) reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, err error) {
	key := connector.Key{Namespace: req.Namespace, Name: req.Name}
	obj := &mcpv1alpha1.MCPServer{}
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted (with or without our finalizer having run): nothing may keep
			// running for it.
			r.written.Delete(key)
			return ctrl.Result{}, r.stop(ctx, key)
		}
		return ctrl.Result{}, err
	}
	if !r.owns(key) {
		return ctrl.Result{}, r.standBy(ctx, obj, key)
	}
	if r.cacheBehind(key, obj) {
		// The cache has not shown this manager's last write yet: acting on this copy
		// would write, and announce, the same again.
		return ctrl.Result{RequeueAfter: cacheCatchUpRetry}, nil
	}
	if !obj.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, obj, key)
	}
	if err := r.ensureFinalizer(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.stop(ctx, key)
		}
		return ctrl.Result{}, err
	}

	before := obj.DeepCopy()
	obs := &observation{}
	defer func() { result, err = r.summarize(ctx, key, before, obj, obs, result, err) }()
	return r.observe(ctx, obj, key, obs)
}

// summarize derives the status from what the steps observed, a step's error included,
// patches it when it changed, and then announces the transitions the patch wrote.
// Events follow the status they announce: when the patch fails, the retry announces
// them, once.
func (r *MCPServerReconciler) summarize(ctx context.Context, key connector.Key, before, obj *mcpv1alpha1.MCPServer, obs *observation, result ctrl.Result, err error) (ctrl.Result, error) {
	if obs.settleWithin > 0 {
		// A new session is still on its first connect: publish its outcome, not
		// Connecting first. Its event, or this requeue at the latest, brings it back.
		return ctrl.Result{RequeueAfter: obs.settleWithin}, err
	}
	obs.stepErr = err
	if err == nil && obs.session == nil && obs.blocker(obj) == nil {
		// Nothing was observed and nothing failed: the pool is shutting down.
		return result, err
	}
	computeStatus(obj, obs)
	if equality.Semantic.DeepEqual(before.Status, obj.Status) {
		return result, err
	}
	if perr := r.Client.Status().Patch(ctx, obj, client.MergeFrom(before)); perr != nil {
		if !apierrors.IsNotFound(perr) {
			err = errors.Join(err, fmt.Errorf("patching status: %w", perr))
		}
		return result, err
	}
	r.recordWrite(ctx, key, obj.ResourceVersion)
	r.recordTransitions(before, obj)
	return result, err
}

// observe runs the reconcile steps in order, recording in obs what each observed, and
// stops at the first one that keeps the server from being connected.
func (r *MCPServerReconciler) observe(ctx context.Context, obj *mcpv1alpha1.MCPServer, key connector.Key, obs *observation) (ctrl.Result, error) {
	if obj.Spec.Suspend {
		ctrl.LoggerFrom(ctx).V(1).Info("Server suspended")
		return ctrl.Result{}, r.stop(ctx, key)
	}
	rules, err := egressRules(ctx, r.Client, r.EgressDefaults, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	var cfg connector.Config
	if obj.Spec.Stdio != nil {
		var available bool
		var result ctrl.Result
		cfg, available, result, err = r.reconcileWorkload(ctx, obj, rules, obs)
		if err != nil || !available {
			// No session until the bridge can take one. The runtime's watches, or its
			// requeue, bring the server back here.
			r.dropSession(key)
			return result, err
		}
	} else {
		if r.Stdio != nil {
			// The server may have been a stdio one before.
			if err := r.Stdio.Remove(ctx, key); err != nil {
				return ctrl.Result{}, fmt.Errorf("removing the stdio workload: %w", err)
			}
		}
		if cfg, err = r.reconcileSecrets(ctx, obj, obs); err != nil || obs.missingSecret != nil || obs.identityProvider != nil {
			// No connection attempt without the credentials; the Secret watch wakes
			// the server when the Secret appears, the MCPIdentityProvider watch when
			// its identity provider changes.
			r.dropSession(key)
			return ctrl.Result{}, err
		}
		cfg.Egress = rules
		obs.egressAllowedBy = "Egress to " + connector.DisplayURL(cfg.URL) + " is allowed by " + egressSource(rules)
	}
	r.reconcileConnection(obj, key, cfg, obs)
	return ctrl.Result{}, nil
}

// ensureFinalizer adds the finalizer that makes deletion close the session and remove
// the workload, before anything runs that deletion must stop. It patches a copy, so only
// the finalizer is written; obj then holds the patched metadata.
func (r *MCPServerReconciler) ensureFinalizer(ctx context.Context, key connector.Key, obj *mcpv1alpha1.MCPServer) error {
	if controllerutil.ContainsFinalizer(obj, mcpServerFinalizer) {
		return nil
	}
	patched := obj.DeepCopy()
	controllerutil.AddFinalizer(patched, mcpServerFinalizer)
	// The optimistic lock keeps finalizers another writer adds meanwhile.
	if err := r.Client.Patch(ctx, patched, client.MergeFromWithOptions(obj, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding finalizer: %w", err)
	}
	obj.ObjectMeta = patched.ObjectMeta
	r.recordWrite(ctx, key, obj.ResourceVersion)
	return nil
}

// reconcileSecrets builds the connector config of an http server, with headers and CA
// bundle read from the Secrets the spec references. A missing Secret or key is recorded
// in obs.missingSecret, an MCPIdentityProvider that cannot be used in
// obs.identityProvider; other errors are returned.
func (r *MCPServerReconciler) reconcileSecrets(ctx context.Context, obj *mcpv1alpha1.MCPServer, obs *observation) (connector.Config, error) {
	spec := obj.Spec.HTTP
	if spec == nil {
		obs.invalidSpec = "The spec sets neither http nor stdio"
		return connector.Config{}, nil
	}
	resolver := &secretResolver{reader: r.SecretReader, namespace: obj.Namespace}
	headers, caBundle, err := resolver.resolveHTTP(ctx, spec)
	var oauth *connector.OAuth2ClientCredentials
	var wif *connector.OAuth2WorkloadIdentity
	var perCaller *connector.PerCallerAuth
	var perUser *connector.PerUser
	if err == nil {
		oauth, err = resolver.resolveOAuth2(ctx, spec)
	}
	if err == nil {
		wif, err = resolver.resolveWorkloadIdentity(ctx, spec, r.sources(), obj.Namespace)
	}
	if err == nil {
		perCaller, err = r.resolvePerCaller(ctx, obj, resolver, obs)
	}
	if err == nil {
		perUser, err = r.resolvePerUser(ctx, obj, resolver, obs)
	}
	if err != nil {
		var missing *missingSecretError
		if errors.As(err, &missing) {
			obs.missingSecret = missing
			return connector.Config{}, nil
		}
		return connector.Config{}, err
	}
	if obs.blocker(obj) != nil {
		// A Secret of the identity provider is missing, or the provider cannot be used.
		return connector.Config{}, nil
	}
	cfg := r.connectionConfig(obj, spec.URL, connector.Protocol(spec.Protocol))
	cfg.Headers = headers
	cfg.CABundle = caBundle
	cfg.OAuth2 = oauth
	cfg.WorkloadIdentity = wif
	cfg.PerCaller = perCaller
	cfg.PerUser = perUser
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
// to reach its bridge and whether the bridge is available. It records the workload, and
// what governs the pod's egress, in obs.
func (r *MCPServerReconciler) reconcileWorkload(ctx context.Context, obj *mcpv1alpha1.MCPServer, rules *egress.ServerRules, obs *observation) (connector.Config, bool, ctrl.Result, error) {
	if r.Stdio == nil {
		obs.invalidSpec = "This manager runs no stdio runtime: start it with --bridge-image (pod runtime) or --stdio-runtime=local"
		return connector.Config{}, false, ctrl.Result{}, nil
	}
	ws, err := r.Stdio.Ensure(ctx, obj, rules)
	if err != nil {
		var missing *missingSecretError
		if errors.As(err, &missing) {
			// The local runtime resolves env Secrets itself; the Secret watch wakes
			// the server when the Secret appears.
			obs.missingSecret = err
			return connector.Config{}, false, ctrl.Result{}, nil
		}
		obs.workload = &workloadObservation{err: err}
		return connector.Config{}, false, ctrl.Result{}, err
	}
	obs.workload = &workloadObservation{status: ws}
	obs.egressAllowedBy = "The server pod's egress is governed by " + egressSource(rules)
	if ws.HostPeersNotEnforced {
		obs.egressAllowedBy += "; " + egress.HostPeersNote
	}
	if !ws.Available {
		return connector.Config{}, false, ctrl.Result{RequeueAfter: ws.RequeueAfter}, nil
	}
	cfg := r.connectionConfig(obj, ws.Endpoint, connector.ProtocolStreamableHTTP)
	cfg.Instance = ws.Instance
	cfg.Egress = bridgeEgress.ForServer(obj.Namespace, obj.Labels)
	return cfg, true, ctrl.Result{}, nil
}

// reconcileConnection makes the pool hold a session with cfg and records what the
// connector knows about it in obs. While a session this reconcile or an earlier one
// started is on its first connect, and for at most FirstConnectWait, it sets
// obs.settleWithin instead: the status then waits for the outcome rather than saying
// Connecting first. A server already Ready for this generation has nothing to wait
// for: while a new session (after a takeover or a restart) connects, computeStatus
// keeps what was observed for this generation.
func (r *MCPServerReconciler) reconcileConnection(obj *mcpv1alpha1.MCPServer, key connector.Key, cfg connector.Config, obs *observation) {
	if r.handedToPool != nil {
		r.handedToPool(key, cfg)
	}
	r.Pool.Ensure(key, cfg)
	if wait := r.firstConnectWait(); wait > 0 && !readyForGeneration(obj) {
		// When the session began is the connector's to say: the reconciler keeps no
		// record of it.
		if began, connecting := r.Pool.FirstConnect(key); connecting {
			if left := wait - time.Since(began); left > 0 {
				obs.settleWithin = left
				return
			}
		}
	}
	if snap, ok := r.Pool.Snapshot(key); ok {
		obs.session = &snap
	}
}

// dropSession closes the server's session, if the pool holds one.
func (r *MCPServerReconciler) dropSession(key connector.Key) {
	r.Pool.Remove(key)
}

// firstConnectWait returns the bound on waiting for a new session's first connect.
func (r *MCPServerReconciler) firstConnectWait() time.Duration {
	if r.FirstConnectWait == 0 {
		return defaultFirstConnectWait
	}
	return r.FirstConnectWait
}

// readyForGeneration reports whether the object's status already says Ready for its
// current generation.
func readyForGeneration(obj *mcpv1alpha1.MCPServer) bool {
	c := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == obj.Generation
}

// egressSource says what governs a server's egress, for the EgressAllowed message.
func egressSource(rules *egress.ServerRules) string {
	if rules.Selected() {
		return "MCPEgressPolicy " + strings.Join(rules.Policies(), ", ")
	}
	return "the default egress posture"
}

// reconcileDelete closes the session, removes the workload and releases the object.
// Closing never waits on the server, so deletion cannot hang when the server is gone.
func (r *MCPServerReconciler) reconcileDelete(ctx context.Context, obj *mcpv1alpha1.MCPServer, key connector.Key) error {
	if err := r.stop(ctx, key); err != nil {
		return err
	}
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

// stop closes the server's session and removes whatever the stdio runtime runs for it.
func (r *MCPServerReconciler) stop(ctx context.Context, key connector.Key) error {
	r.dropSession(key)
	if r.Stdio == nil {
		return nil
	}
	if err := r.Stdio.Remove(ctx, key); err != nil {
		return fmt.Errorf("removing the stdio workload: %w", err)
	}
	return nil
}

// notAttempted are the reasons Connected is False without a connection having been
// tried (or lost): connecting after them is a first connect, not a recovery.
var notAttempted = func() map[string]bool {
	m := map[string]bool{
		mcpv1alpha1.ReasonSuspended:      true,
		mcpv1alpha1.ReasonSecretNotFound: true,
		mcpv1alpha1.ReasonInvalidSpec:    true,
		// The MCPIdentityProvider a per-caller mode names cannot be used.
		mcpv1alpha1.ReasonIdentityProviderNotFound:   true,
		mcpv1alpha1.ReasonTokenExchangeNotConfigured: true,
		mcpv1alpha1.ReasonNamespaceNotAllowed:        true,
	}
	// A stdio workload that is not available, whatever keeps it from running.
	for reason := range workloadReasons {
		m[reason] = true
	}
	return m
}()

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
		case mcpv1alpha1.ReasonTokenRequestFailed, mcpv1alpha1.ReasonInvalidClient, mcpv1alpha1.ReasonInvalidGrant,
			mcpv1alpha1.ReasonMetadataMismatch, mcpv1alpha1.ReasonInsufficientScope, mcpv1alpha1.ReasonWorkloadTokenUnavailable:
			r.event(after, corev1.EventTypeWarning, eventAuthenticationFailed, "Authenticate", "%s", nowReady.Message)
		}
	}

	r.recordWorkloadTransitions(before, after)

	// Tools that leave their pin stop every tools/call through the gateway: a Warning,
	// with the same reason as the condition.
	wasPinned := meta.FindStatusCondition(before.Status.Conditions, mcpv1alpha1.ConditionToolsPinned)
	nowPinned := meta.FindStatusCondition(after.Status.Conditions, mcpv1alpha1.ConditionToolsPinned)
	switch {
	case nowPinned == nil || wasPinned != nil && wasPinned.Status == nowPinned.Status:
	case nowPinned.Status == metav1.ConditionFalse:
		r.event(after, corev1.EventTypeWarning, eventToolsChanged, "CheckPin", "%s", nowPinned.Message)
	case nowPinned.Status == metav1.ConditionTrue:
		r.event(after, corev1.EventTypeNormal, eventToolsPinned, "CheckPin", "%s", nowPinned.Message)
	}

	if before.Status.ToolsDigest != "" && after.Status.ToolsDigest != "" && before.Status.ToolsDigest != after.Status.ToolsDigest {
		added, removed := toolChanges(before.Status.Tools, after.Status.Tools)
		r.event(after, corev1.EventTypeNormal, eventToolsChanged, "Discover",
			"Tools changed: %d added, %d removed, %d published", added, removed, after.Status.ToolCount)
	}
}

// recordWorkloadTransitions announces what the WorkloadAvailable condition of a stdio
// server says when it changes, so that an outage (a pod deleted and replaced, a
// manifest that cannot run until it is fixed) stays on record after it is over: a
// Warning with the condition's reason when a new reason keeps the workload from running
// or when an available workload stops being so (a pod being created for a new server
// is neither), and, once it is available again, for how long it was not and what it
// last waited for. A new version that cannot run while the previous one serves is
// announced the same way, once per reason (see recordRolloutTransitions).
func (r *MCPServerReconciler) recordWorkloadTransitions(before, after *mcpv1alpha1.MCPServer) {
	r.recordRolloutTransitions(before, after)
	was := meta.FindStatusCondition(before.Status.Conditions, mcpv1alpha1.ConditionWorkloadAvailable)
	now := meta.FindStatusCondition(after.Status.Conditions, mcpv1alpha1.ConditionWorkloadAvailable)
	wasAvailable := was != nil && was.Status == metav1.ConditionTrue
	switch {
	case now == nil:
	case now.Status == metav1.ConditionFalse && workloadReasons[now.Reason] &&
		(wasAvailable || now.Reason != mcpv1alpha1.ReasonWorkloadUnavailable && (was == nil || was.Reason != now.Reason)):
		r.event(after, corev1.EventTypeWarning, now.Reason, "RunWorkload", "%s", now.Message)
	case now.Status == metav1.ConditionTrue && was != nil && was.Status == metav1.ConditionFalse && workloadReasons[was.Reason]:
		r.event(after, corev1.EventTypeNormal, eventWorkloadAvailable, "RunWorkload", "%s; it had none for %s: %s: %s",
			now.Message, now.LastTransitionTime.Sub(was.LastTransitionTime.Time).Round(time.Second), was.Reason, was.Message)
	}
}

// recordRolloutTransitions announces, with a Warning of its reason, each new reason the
// current version of a Ready stdio server cannot run for while the previous version
// keeps serving, and its Deployment exceeding its progress deadline; a new pod on its
// way (RollingOut) is not announced.
func (r *MCPServerReconciler) recordRolloutTransitions(before, after *mcpv1alpha1.MCPServer) {
	was, now := pendingRollout(before), pendingRollout(after)
	if now == nil || now.Reason == mcpv1alpha1.ReasonRollingOut {
		return
	}
	if was == nil || was.Type != now.Type || was.Reason != now.Reason {
		r.event(after, corev1.EventTypeWarning, now.Reason, "RollOut", "%s", now.Message)
	}
}

// pendingRollout returns the condition that says why a Ready stdio server's current
// version has not rolled out (Stalled, else Reconciling: on a Ready server they carry
// nothing else, see rolloutPending), or nil.
func pendingRollout(obj *mcpv1alpha1.MCPServer) *metav1.Condition {
	if obj.Spec.Stdio == nil || !meta.IsStatusConditionTrue(obj.Status.Conditions, mcpv1alpha1.ConditionReady) {
		return nil
	}
	for _, t := range []string{mcpv1alpha1.ConditionStalled, mcpv1alpha1.ConditionReconciling} {
		if c := meta.FindStatusCondition(obj.Status.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return c
		}
	}
	return nil
}

// maxEventNote is the longest note the API server accepts in an Event (events.k8s.io/v1).
const maxEventNote = 1024

func (r *MCPServerReconciler) event(obj *mcpv1alpha1.MCPServer, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(obj, nil, eventType, reason, action, "%s", connector.TruncateUTF8(fmt.Sprintf(note, args...), maxEventNote))
	}
}

// capitalize upper-cases the first letter of a message built from a lower-case error.
func capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// uncapitalize lower-cases the first letter of a message continued after a semicolon.
func uncapitalize(s string) string {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return s
	}
	return string(s[0]-'A'+'a') + s[1:]
}
