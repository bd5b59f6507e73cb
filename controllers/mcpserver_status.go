package controllers

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/internal/toolglob"
)

// Status bounds. They match the CRD schema, so a hostile server can never make a status
// patch fail validation.
const (
	maxStatusTools       = 256
	maxToolNameLength    = 256
	maxToolTitleLength   = 256
	maxDescriptionLength = 1024
	maxServerInfoLength  = 256
	maxProtocolLength    = 64
	maxMessageLength     = 1024
)

// observation is what one reconcile saw of an MCPServer and of everything it depends
// on. The reconcile steps fill it in, in order, and stop at the first thing that keeps
// the server from being connected; computeStatus then derives every condition and status
// field the MCPServer reconciler owns from it, and from nothing else but the status
// already there (to keep what the last discovery found while the server is away).
type observation struct {
	// invalidSpec says why a spec that passed admission cannot be acted on; empty when
	// it can.
	invalidSpec string
	// missingSecret is the Secret or key the spec references that does not exist.
	missingSecret error
	// identityProvider says why the MCPIdentityProvider a per-caller or perUser mode
	// names cannot be used (it does not exist, has no tokenExchange or perUser, does not
	// list the server's namespace, or does not allow what the server asks for); nil when
	// it can.
	identityProvider *blocker
	// egressAllowedBy says what allows the server's egress (the EgressAllowed message
	// while nothing denies it); empty when egress was not looked at.
	egressAllowedBy string
	// workload is what the stdio runtime reported; nil for http servers and when no
	// workload was asked for.
	workload *workloadObservation
	// session is what the connector knows about the server's session; nil when no
	// session is held, or while settleWithin is set.
	session *connector.Snapshot
	// settleWithin is set while a new session is on its first connect and the status
	// waits for the outcome, for at most that long; the status is then left as it is.
	settleWithin time.Duration
	// stepErr is the error a reconcile step returned; nil when none failed.
	stepErr error
}

// failedBeforeObserving reports whether a step failed before anything about the server
// was observed: no session, and nothing that keeps one from being attempted.
func (o *observation) failedBeforeObserving(obj *mcpv1alpha1.MCPServer) bool {
	return o.stepErr != nil && o.session == nil && o.blocker(obj) == nil
}

// stepFailedSummary is the summary of a server whose reconcile failed before it could
// observe anything: Ready is Unknown, since nothing was looked at, with the error as its
// message; the failure heals by itself (Reconciling) unless the step made its error
// terminal (Stalled).
func stepFailedSummary(err error) summary {
	p := progressReconciling
	if errors.Is(err, reconcile.TerminalError(nil)) {
		p = progressStalled
	}
	message := "Reconcile failed: " + err.Error()
	return summary{
		ready:    conditionState{metav1.ConditionUnknown, mcpv1alpha1.ReasonReconcileFailed, message},
		progress: p, reason: mcpv1alpha1.ReasonReconcileFailed, message: message,
	}
}

// workloadObservation is what the stdio runtime reported about a server's workload.
type workloadObservation struct {
	// status is the runtime's report when Ensure succeeded.
	status WorkloadStatus
	// err is why Ensure failed; nil when it succeeded.
	err error
}

// notReady is the outcome of the first failing readiness check.
type notReady struct {
	reason, message string
	progress        progress
}

// readyCheck is one entry of the readiness chain: it returns why the server is not
// Ready, or nil when its part holds. It reads the observation and the conditions
// computeStatus has already set for this reconcile.
type readyCheck func(obj *mcpv1alpha1.MCPServer, obs *observation) *notReady

// readyChecks is the readiness chain, in order: the first failure is Ready's reason.
// Earlier entries are what keeps a session from being attempted at all, later ones what
// the session found.
var readyChecks = []readyCheck{
	checkSuspended,
	checkSpecValid,
	checkSecretsPresent,
	checkIdentityProvider,
	checkEgressAllowed,
	checkAuthenticated,
	checkWorkloadAvailable,
	checkConnected,
	checkToolsDiscovered,
	checkToolsPinned,
}

// blocker is why no session is attempted, in readiness order, or nil when one is.
type blocker struct {
	reason, message string
}

// blocker returns the first thing the observation says keeps a session from being
// attempted: the server is suspended, its spec cannot be acted on, a Secret is missing,
// or its stdio workload is not available.
func (o *observation) blocker(obj *mcpv1alpha1.MCPServer) *blocker {
	switch {
	case obj.Spec.Suspend:
		return &blocker{mcpv1alpha1.ReasonSuspended, "Suspended: spec.suspend is true, no session is held"}
	case o.invalidSpec != "":
		return &blocker{mcpv1alpha1.ReasonInvalidSpec, o.invalidSpec}
	case o.missingSecret != nil:
		return &blocker{mcpv1alpha1.ReasonSecretNotFound, capitalize(o.missingSecret.Error())}
	case o.identityProvider != nil:
		return o.identityProvider
	case o.workload != nil && o.workload.err != nil:
		return &blocker{mcpv1alpha1.ReasonWorkloadUnavailable, "Cannot run the server: " + o.workload.err.Error()}
	case o.workload != nil && !o.workload.status.Available:
		reason := o.workload.reason()
		if reason == mcpv1alpha1.ReasonWorkloadUnavailable {
			return &blocker{reason, "Waiting for the bridge: " + o.workload.status.Message}
		}
		return &blocker{reason, o.workload.status.Message}
	default:
		return nil
	}
}

// workloadReasons are the reasons of a stdio workload that is not available: the
// blocker (and WorkloadAvailable) reasons the workload itself gives.
var workloadReasons = map[string]bool{
	mcpv1alpha1.ReasonWorkloadUnavailable:    true,
	mcpv1alpha1.ReasonImagePullFailed:        true,
	mcpv1alpha1.ReasonContainerConfigInvalid: true,
	mcpv1alpha1.ReasonContainerStartFailed:   true,
	mcpv1alpha1.ReasonServerExited:           true,
	mcpv1alpha1.ReasonBridgeInstallFailed:    true,
	mcpv1alpha1.ReasonPodRejected:            true,
	mcpv1alpha1.ReasonUnschedulable:          true,
}

// reason is why the workload is not available: the runtime's reason, or
// ReasonWorkloadUnavailable when it gave none.
func (w *workloadObservation) reason() string {
	if w.err == nil && w.status.Reason != "" {
		return w.status.Reason
	}
	return mcpv1alpha1.ReasonWorkloadUnavailable
}

// sessionError is the connector's last error, or nil.
func (o *observation) sessionError() *connector.Error {
	if o.session == nil {
		return nil
	}
	return o.session.LastError
}

// retryProgress is what a failure of the session means for kstatus: the connector
// decides whether its error heals by itself; a session still connecting is in progress.
func (o *observation) retryProgress() progress {
	if e := o.sessionError(); e != nil && !e.Transient {
		return progressStalled
	}
	return progressReconciling
}

// computeStatus sets every condition and status field the MCPServer reconciler owns
// from what the reconcile observed. It is a pure function of the observation and the
// status already there; each condition is set, or removed, on every call.
func computeStatus(obj *mcpv1alpha1.MCPServer, obs *observation) {
	st := &obj.Status
	st.ObservedGeneration = obj.Generation
	if obs.failedBeforeObserving(obj) {
		// Every other condition stays as it was: nothing new was observed.
		setSummary(&st.Conditions, obj.Generation, stepFailedSummary(obs.stepErr))
		return
	}
	setEndpoint(obj, obs)
	setDiscovered(obj, obs)

	setOrRemove(obj, mcpv1alpha1.ConditionWorkloadAvailable, workloadCondition(obj, obs))
	setOrRemove(obj, mcpv1alpha1.ConditionEgressAllowed, egressCondition(obj, obs))
	setOrRemove(obj, mcpv1alpha1.ConditionAuthenticated, authenticatedCondition(obj, obs))
	setOrRemove(obj, mcpv1alpha1.ConditionConnected, connectedCondition(obj, obs))
	setOrRemove(obj, mcpv1alpha1.ConditionToolsDiscovered, toolsDiscoveredCondition(obj, obs))
	setOrRemove(obj, mcpv1alpha1.ConditionToolsPinned, toolsPinnedCondition(obj))

	var failed *notReady
	for _, check := range readyChecks {
		if failed = check(obj, obs); failed != nil {
			break
		}
	}
	if failed != nil {
		setSummary(&obj.Status.Conditions, obj.Generation, notReadySummary(failed.progress, failed.reason, failed.message))
		return
	}
	// Ready: the server serves. Whether the current generation is what serves is
	// kstatus's to say, through Reconciling and Stalled.
	s := summary{ready: conditionState{metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded, "Connected and tools discovered"}}
	if pending := rolloutPending(obj, obs); pending != nil {
		s.ready.message += "; " + uncapitalize(pending.message)
		s.progress, s.reason, s.message = pending.progress, pending.reason, pending.message
	}
	setSummary(&obj.Status.Conditions, obj.Generation, s)
}

// setOrRemove sets the condition to c, or removes it when c is nil.
func setOrRemove(obj *mcpv1alpha1.MCPServer, condType string, c *conditionState) {
	setConditionState(&obj.Status.Conditions, obj.Generation, condType, c)
}

// keep returns the condition as it is, or nil when it is absent.
func keep(obj *mcpv1alpha1.MCPServer, condType string) *conditionState {
	c := meta.FindStatusCondition(obj.Status.Conditions, condType)
	if c == nil {
		return nil
	}
	return &conditionState{c.Status, c.Reason, c.Message}
}

// setEndpoint sets the transport and endpoint the server is reached over. A stdio
// server is reached over Stdio at its bridge, whatever the connector speaks to the
// bridge; an http server over the transport the connector uses or last used.
func setEndpoint(obj *mcpv1alpha1.MCPServer, obs *observation) {
	st := &obj.Status
	if obj.Spec.Stdio != nil {
		if st.Transport != mcpv1alpha1.TransportStdio {
			st.Endpoint = ""
		}
		st.Transport = mcpv1alpha1.TransportStdio
		if obs.workload != nil && obs.workload.err == nil {
			st.Endpoint = connector.TruncateUTF8(obs.workload.status.Endpoint, 2048)
		}
		return
	}
	if st.Transport == mcpv1alpha1.TransportStdio {
		st.Transport = "" // it was a stdio server; nothing is known yet of the new one
	}
	if obj.Spec.HTTP == nil {
		return
	}
	st.Endpoint = connector.TruncateUTF8(connector.DisplayURL(obj.Spec.HTTP.URL), 2048)
	if s := obs.session; s != nil && s.Transport != "" {
		st.Transport = mcpv1alpha1.Transport(s.Transport)
	}
}

// setDiscovered publishes what the last discovery found. While the session is away the
// last published lists stay, so a brief outage does not empty the catalogue.
func setDiscovered(obj *mcpv1alpha1.MCPServer, obs *observation) {
	snap := obs.session
	if snap == nil || !snap.Discovered {
		return
	}
	st := &obj.Status
	st.ProtocolVersion = connector.TruncateUTF8(snap.ProtocolVersion, maxProtocolLength)
	st.ServerInfo = &mcpv1alpha1.ServerInfo{
		Name:    connector.TruncateUTF8(snap.ServerInfo.Name, maxServerInfoLength),
		Version: connector.TruncateUTF8(snap.ServerInfo.Version, maxServerInfoLength),
		Title:   connector.TruncateUTF8(snap.ServerInfo.Title, maxServerInfoLength),
	}
	st.Capabilities = &mcpv1alpha1.ServerCapabilities{
		Tools:       snap.Capabilities.Tools,
		Resources:   snap.Capabilities.Resources,
		Prompts:     snap.Capabilities.Prompts,
		ListChanged: snap.Capabilities.ListChanged,

		Completions:        snap.Capabilities.Completions,
		ResourcesSubscribe: snap.Capabilities.ResourcesSubscribe,
	}
	st.ResourceCount = int32(len(snap.Resources) + len(snap.ResourceTemplates)) //nolint:gosec // bounded by the connector's item limit
	st.PromptCount = int32(len(snap.Prompts))                                   //nolint:gosec // bounded by the connector's item limit
	st.Resources, st.ResourcesTruncated = statusResources(snap.Resources, snap.ResourceTemplates)
	st.Prompts, st.PromptsTruncated = statusPrompts(snap.Prompts)
	published := filterTools(snap.Tools, obj.Spec.Tools)
	st.ToolCount = int32(len(published)) //nolint:gosec // bounded by the connector's item limit
	st.ToolsDigest = connector.ToolsDigest(published)
	st.Tools, st.ToolsTruncated = statusTools(published)
}

// workloadCondition is WorkloadAvailable: what the stdio runtime reports about the
// server's workload. Only stdio servers carry it; a server that was a stdio one before
// loses it.
func workloadCondition(obj *mcpv1alpha1.MCPServer, obs *observation) *conditionState {
	if obj.Spec.Stdio == nil {
		return nil
	}
	if b := obs.blocker(obj); b != nil && !workloadReasons[b.reason] {
		return &conditionState{metav1.ConditionFalse, b.reason, b.message}
	}
	w := obs.workload
	switch {
	case w == nil:
		return keep(obj, mcpv1alpha1.ConditionWorkloadAvailable)
	case w.err != nil:
		return &conditionState{metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadUnavailable, "Cannot run the server: " + w.err.Error()}
	case !w.status.Available:
		return &conditionState{metav1.ConditionFalse, w.reason(), w.status.Message}
	default:
		return &conditionState{metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded, w.status.Message}
	}
}

// isEgressDenial reports whether a connector failure is a denied destination, which
// EgressAllowed reports rather than Connected alone.
func isEgressDenial(e *connector.Error) bool {
	return e != nil && (e.Reason == mcpv1alpha1.ReasonEgressDenied || e.Reason == mcpv1alpha1.ReasonRedirectDenied)
}

// egressCondition is EgressAllowed: False when the connector's dialer or redirect
// policy denied the connection, True with what allows it once egress was looked at,
// Unknown while something keeps the reconcile from looking.
func egressCondition(obj *mcpv1alpha1.MCPServer, obs *observation) *conditionState {
	if e := obs.sessionError(); isEgressDenial(e) && obs.blocker(obj) == nil {
		return &conditionState{metav1.ConditionFalse, e.Reason, e.Message}
	}
	if obs.egressAllowedBy != "" && !obj.Spec.Suspend {
		return &conditionState{metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded, obs.egressAllowedBy}
	}
	if b := obs.blocker(obj); b != nil {
		return &conditionState{metav1.ConditionUnknown, b.reason, "Egress is not evaluated: " + b.message}
	}
	return keep(obj, mcpv1alpha1.ConditionEgressAllowed)
}

// usesOAuth2 reports whether the operator obtains OAuth tokens for its own session.
func usesOAuth2(obj *mcpv1alpha1.MCPServer) bool {
	return obj.Spec.HTTP != nil && (clientCredentials(obj.Spec.HTTP) != nil || workloadIdentity(obj.Spec.HTTP) != nil)
}

// authenticatedCondition is Authenticated: True while the server accepts the session's
// OAuth token, False with the connector's reason when none could be had or the server
// refused it, Unknown while something else keeps the session from being tried or
// failed before authentication was decided. Only servers with spec.http.auth carry it.
func authenticatedCondition(obj *mcpv1alpha1.MCPServer, obs *observation) *conditionState {
	if !usesOAuth2(obj) {
		return nil
	}
	if b := obs.blocker(obj); b != nil {
		return &conditionState{metav1.ConditionUnknown, b.reason, "Authentication is not attempted: " + b.message}
	}
	snap := obs.session
	if snap == nil {
		return keep(obj, mcpv1alpha1.ConditionAuthenticated)
	}
	if e := snap.LastError; e != nil && e.Authentication != "" {
		return &conditionState{metav1.ConditionFalse, e.Authentication, e.Message}
	}
	switch snap.State {
	case connector.StateReady:
		if snap.TokenEndpoint == "" {
			return &conditionState{metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded,
				"The server accepted the session without asking for a token"}
		}
		return &conditionState{metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded,
			"The server accepts the token from " + snap.TokenEndpoint}
	case connector.StateDown:
		reason, message := sessionFailure(snap)
		return &conditionState{metav1.ConditionUnknown, reason, "No authenticated session: " + message}
	default:
		if c := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionAuthenticated); c != nil &&
			c.ObservedGeneration == obj.Generation && !notAttempted[c.Reason] {
			return &conditionState{c.Status, c.Reason, c.Message}
		}
		reason, message := sessionFailure(snap)
		return &conditionState{metav1.ConditionUnknown, reason, message}
	}
}

// sessionFailure is the reason and message of a session that is not up: its last
// error, or that it is connecting.
func sessionFailure(snap *connector.Snapshot) (string, string) {
	if snap.LastError != nil {
		return snap.LastError.Reason, snap.LastError.Message
	}
	return mcpv1alpha1.ReasonConnecting, "Connecting to " + snap.Endpoint
}

// connectedCondition is Connected: True while the connector holds a live session.
func connectedCondition(obj *mcpv1alpha1.MCPServer, obs *observation) *conditionState {
	if b := obs.blocker(obj); b != nil {
		return &conditionState{metav1.ConditionFalse, b.reason, b.message}
	}
	snap := obs.session
	if snap == nil {
		return keep(obj, mcpv1alpha1.ConditionConnected)
	}
	switch snap.State {
	case connector.StateReady:
		if obj.Spec.Stdio != nil {
			// The connector speaks Streamable HTTP to the bridge; the user runs stdio.
			return &conditionState{metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded,
				"Connected to the stdio server through its bridge, protocol " + snap.ProtocolVersion}
		}
		return &conditionState{metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded,
			fmt.Sprintf("Connected over %s, protocol %s", snap.Transport, snap.ProtocolVersion)}
	case connector.StateDown:
		reason, message := sessionFailure(snap)
		return &conditionState{metav1.ConditionFalse, reason, message}
	default:
		// A new session's first attempt. What the connector observed for this
		// generation stays until the outcome is known, so the condition does not flap:
		// a True is a session a restarted manager is setting up again, a False a
		// failure it is retrying. What a blocker (a missing Secret, a bridge not yet
		// up) wrote is no observation of the connection and gives way.
		if c := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionConnected); c != nil &&
			c.ObservedGeneration == obj.Generation && !notAttempted[c.Reason] {
			return &conditionState{c.Status, c.Reason, c.Message}
		}
		reason, message := sessionFailure(snap)
		return &conditionState{metav1.ConditionUnknown, reason, message}
	}
}

// toolsDiscoveredCondition is ToolsDiscovered: True once a discovery published the
// server's tools, and True still while the session is away (the lists stay published).
func toolsDiscoveredCondition(obj *mcpv1alpha1.MCPServer, obs *observation) *conditionState {
	if b := obs.blocker(obj); b != nil {
		return &conditionState{metav1.ConditionFalse, b.reason, b.message}
	}
	snap := obs.session
	if snap == nil {
		return keep(obj, mcpv1alpha1.ConditionToolsDiscovered)
	}
	if snap.ToolsPerCaller && snap.State == connector.StateReady {
		return &conditionState{metav1.ConditionTrue, mcpv1alpha1.ReasonDiscoveredPerCaller,
			"Tools are discovered per caller: the server's credentials follow the caller (" + perCallerMode(obj) +
				") and no operator credential (clientCredentials or workloadIdentity) is configured, so none are published; " +
				"the server's protected resource metadata and its authorization server's metadata are checked instead"}
	}
	if snap.Discovered {
		st := obj.Status
		return &conditionState{metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded,
			fmt.Sprintf("%d of %d tools published, %d resources, %d prompts",
				st.ToolCount, len(snap.Tools), st.ResourceCount, st.PromptCount)}
	}
	if c := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionToolsDiscovered); c != nil && c.Status == metav1.ConditionTrue {
		return &conditionState{c.Status, c.Reason, c.Message}
	}
	status := metav1.ConditionUnknown
	if snap.State == connector.StateDown {
		status = metav1.ConditionFalse
	}
	reason, message := sessionFailure(snap)
	return &conditionState{status, reason, message}
}

// pinnedDigest is spec.tools.pinnedDigest, or empty when nothing is pinned.
func pinnedDigest(obj *mcpv1alpha1.MCPServer) string {
	if obj.Spec.Tools == nil {
		return ""
	}
	return obj.Spec.Tools.PinnedDigest
}

// toolsPinnedCondition is ToolsPinned: whether the published tools are the ones a person
// pinned. It compares with status.toolsDigest, which stays while the session is away, so
// the verdict does not flap with the connection. Only servers that pin carry it.
func toolsPinnedCondition(obj *mcpv1alpha1.MCPServer) *conditionState {
	pinned := pinnedDigest(obj)
	if pinned == "" {
		return nil
	}
	switch published := obj.Status.ToolsDigest; published {
	case "":
		return &conditionState{metav1.ConditionUnknown, mcpv1alpha1.ReasonProgressing,
			"Waiting for tool discovery to compare with the pinned digest " + pinned}
	case pinned:
		return &conditionState{metav1.ConditionTrue, mcpv1alpha1.ReasonToolsMatchPinned,
			"Published tools match the pinned digest " + pinned}
	default:
		return &conditionState{metav1.ConditionFalse, mcpv1alpha1.ReasonToolsChanged,
			fmt.Sprintf("Published tools have digest %s, not the pinned %s: the gateway refuses every tools/call "+
				"until someone reviews the tools and sets spec.tools.pinnedDigest to %s", published, pinned, published)}
	}
}

// checkSuspended: a suspended server is not Ready and has nothing to work on.
func checkSuspended(obj *mcpv1alpha1.MCPServer, _ *observation) *notReady {
	if !obj.Spec.Suspend {
		return nil
	}
	return &notReady{mcpv1alpha1.ReasonSuspended, "Suspended: spec.suspend is true, no session is held", progressIdle}
}

// checkSpecValid: a spec that cannot be acted on needs a change.
func checkSpecValid(_ *mcpv1alpha1.MCPServer, obs *observation) *notReady {
	if obs.invalidSpec == "" {
		return nil
	}
	return &notReady{mcpv1alpha1.ReasonInvalidSpec, obs.invalidSpec, progressStalled}
}

// checkSecretsPresent: no connection without the credentials; the Secret watch brings
// the server back once someone creates it.
func checkSecretsPresent(_ *mcpv1alpha1.MCPServer, obs *observation) *notReady {
	if obs.missingSecret == nil {
		return nil
	}
	return &notReady{mcpv1alpha1.ReasonSecretNotFound, capitalize(obs.missingSecret.Error()), progressStalled}
}

// checkIdentityProvider: an MCPIdentityProvider that is missing, or does not let the
// server use it, needs a cluster admin (or a change of the name); the MCPIdentityProvider
// watch brings the server back once it changes.
func checkIdentityProvider(_ *mcpv1alpha1.MCPServer, obs *observation) *notReady {
	if obs.identityProvider == nil {
		return nil
	}
	return &notReady{obs.identityProvider.reason, obs.identityProvider.message, progressStalled}
}

// checkEgressAllowed: a denied destination needs a policy or URL change.
func checkEgressAllowed(obj *mcpv1alpha1.MCPServer, obs *observation) *notReady {
	return conditionCheck(obj, mcpv1alpha1.ConditionEgressAllowed, obs.retryProgress())
}

// checkAuthenticated: whether a failed token request heals by itself is the
// connector's call; an Authenticated condition still Unknown is left to the checks
// after it, which say what the session is waiting for.
func checkAuthenticated(obj *mcpv1alpha1.MCPServer, obs *observation) *notReady {
	c := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionAuthenticated)
	if c == nil || c.Status != metav1.ConditionFalse {
		return nil
	}
	return &notReady{c.Reason, c.Message, obs.retryProgress()}
}

// checkWorkloadAvailable: a stdio server's bridge starting or rolling out heals by
// itself, until its Deployment gives up waiting (its progress deadline passed).
func checkWorkloadAvailable(obj *mcpv1alpha1.MCPServer, obs *observation) *notReady {
	if obj.Spec.Stdio == nil {
		return nil
	}
	return conditionCheck(obj, mcpv1alpha1.ConditionWorkloadAvailable, obs.workloadProgress())
}

// workloadProgress is what a stdio workload that does not run its current version
// means for kstatus: in progress, or stalled once its Deployment exceeded its progress
// deadline, as kstatus judges the Deployment itself.
func (o *observation) workloadProgress() progress {
	if o.workload != nil && o.workload.err == nil && o.workload.status.ProgressDeadlineExceeded {
		return progressStalled
	}
	return progressReconciling
}

// rolloutPending is what is still to be done for a Ready stdio server: nil when its
// current version runs; else, while the previous version's pod keeps serving, why the
// current one does not run yet (the runtime's reason: RollingOut, ImagePullFailed,
// ServerExited, ...), in progress or, past the Deployment's progress deadline, stalled.
// Ready stays True meanwhile: the server serves, and the gateway, which takes calls
// only for Ready servers, keeps taking them.
func rolloutPending(obj *mcpv1alpha1.MCPServer, obs *observation) *notReady {
	w := obs.workload
	if obj.Spec.Stdio == nil || w == nil || w.err != nil || !w.status.Available || w.status.Rollout == nil {
		return nil
	}
	r := w.status.Rollout
	if r.Reason == mcpv1alpha1.ReasonRollingOut {
		return &notReady{r.Reason, "The previous version keeps serving while the new one rolls out: " + r.Message, obs.workloadProgress()}
	}
	return &notReady{r.Reason, "The previous version keeps serving; the new one cannot run: " + r.Message, obs.workloadProgress()}
}

// checkConnected: whether a failed session heals by itself is the connector's call.
func checkConnected(obj *mcpv1alpha1.MCPServer, obs *observation) *notReady {
	return conditionCheck(obj, mcpv1alpha1.ConditionConnected, obs.retryProgress())
}

// checkToolsDiscovered: a discovery that failed is retried with the session.
func checkToolsDiscovered(obj *mcpv1alpha1.MCPServer, obs *observation) *notReady {
	return conditionCheck(obj, mcpv1alpha1.ConditionToolsDiscovered, obs.retryProgress())
}

// checkToolsPinned: tools that differ from the pinned ones need a person to review them
// and pin again; nothing retrying would change that.
func checkToolsPinned(obj *mcpv1alpha1.MCPServer, _ *observation) *notReady {
	if pinnedDigest(obj) == "" {
		return nil
	}
	return conditionCheck(obj, mcpv1alpha1.ConditionToolsPinned, progressStalled)
}

// conditionCheck fails with the condition's reason and message unless it is True. An
// absent condition is one not yet known: in progress.
func conditionCheck(obj *mcpv1alpha1.MCPServer, condType string, p progress) *notReady {
	c := meta.FindStatusCondition(obj.Status.Conditions, condType)
	switch {
	case c == nil:
		return &notReady{mcpv1alpha1.ReasonProgressing, "Waiting for " + condType, progressReconciling}
	case c.Status == metav1.ConditionTrue:
		return nil
	case c.Status == metav1.ConditionUnknown:
		return &notReady{c.Reason, c.Message, progressReconciling}
	default:
		return &notReady{c.Reason, c.Message, p}
	}
}

// filterTools returns the tools spec.tools publishes: those matching an allow glob (or
// all when allow is empty) and no deny glob, as the gateway decides (toolglob.Check).
func filterTools(tools []connector.Tool, filter *mcpv1alpha1.ToolFilter) []connector.Tool {
	if filter == nil || len(filter.Allow) == 0 && len(filter.Deny) == 0 {
		return tools
	}
	var out []connector.Tool
	for _, t := range tools {
		if toolglob.Allowed(filter.Allow, filter.Deny, t.Name) {
			out = append(out, t)
		}
	}
	return out
}

// statusTools returns the tools to list in status, bounded to maxStatusTools and to the
// schema's field lengths, and whether any were left out. A tool whose name does not fit
// the schema (or repeats an earlier name) is left out rather than listed under a
// mangled name.
func statusTools(tools []connector.Tool) ([]mcpv1alpha1.ToolInfo, bool) {
	out := make([]mcpv1alpha1.ToolInfo, 0, min(len(tools), maxStatusTools))
	seen := make(map[string]bool, len(tools))
	truncated := false
	for _, t := range tools {
		if t.Name == "" || len(t.Name) > maxToolNameLength || seen[t.Name] {
			truncated = true
			continue
		}
		if len(out) == maxStatusTools {
			truncated = true
			break
		}
		seen[t.Name] = true
		info := mcpv1alpha1.ToolInfo{
			Name:            t.Name,
			Title:           connector.TruncateUTF8(t.Title, maxToolTitleLength),
			Description:     connector.TruncateUTF8(t.Description, maxDescriptionLength),
			DestructiveHint: t.DestructiveHint,
			OpenWorldHint:   t.OpenWorldHint,
		}
		if t.ReadOnlyHint {
			info.ReadOnlyHint = &t.ReadOnlyHint
		}
		if t.IdempotentHint {
			info.IdempotentHint = &t.IdempotentHint
		}
		out = append(out, info)
	}
	return out, truncated
}

// toolChanges counts the tools added and removed between two status tool lists.
func toolChanges(before, after []mcpv1alpha1.ToolInfo) (added, removed int) {
	old := make(map[string]bool, len(before))
	for _, t := range before {
		old[t.Name] = true
	}
	for _, t := range after {
		if !old[t.Name] {
			added++
		}
		delete(old, t.Name)
	}
	return added, len(old)
}
