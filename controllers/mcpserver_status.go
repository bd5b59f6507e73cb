package controllers

import (
	"fmt"
	"path"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
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

// transientReasons are failures the connector retries and that may heal without anyone
// changing anything: the object is Reconciling. Every other failure needs a person (a
// Secret, a policy, a credential, a server fix): the object is Stalled.
var transientReasons = map[string]bool{
	mcpv1alpha1.ReasonConnecting:        true,
	mcpv1alpha1.ReasonDNSFailure:        true,
	mcpv1alpha1.ReasonConnectionRefused: true,
	mcpv1alpha1.ReasonTimeout:           true,
	mcpv1alpha1.ReasonNotFound:          true,
	// A stdio server's pod starting, or rolling out after a change.
	mcpv1alpha1.ReasonWorkloadUnavailable: true,
}

// setCondition sets one condition for the object's current generation.
func setCondition(obj *mcpv1alpha1.MCPServer, condType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            connector.TruncateUTF8(message, maxMessageLength),
		ObservedGeneration: obj.Generation,
	})
}

// setNotReady marks the object not ready for a reason that is not the connection's
// doing (suspended, a missing Secret): no session exists, so every connection condition
// says the same.
func setNotReady(obj *mcpv1alpha1.MCPServer, reason, message string) {
	for _, t := range []string{mcpv1alpha1.ConditionConnected, mcpv1alpha1.ConditionToolsDiscovered} {
		setCondition(obj, t, metav1.ConditionFalse, reason, message)
	}
	setCondition(obj, mcpv1alpha1.ConditionReady, metav1.ConditionFalse, reason, message)
}

// summarize sets Ready from the other conditions and keeps Reconciling and Stalled
// present only while True, as kstatus expects. Ready is True when every condition that
// matters is True; otherwise it repeats the first one that is not.
func summarize(obj *mcpv1alpha1.MCPServer) {
	obj.Status.ObservedGeneration = obj.Generation
	ready := true
	readyReason, readyMessage := mcpv1alpha1.ReasonSucceeded, "Connected and tools discovered"
	for _, t := range []string{
		mcpv1alpha1.ConditionEgressAllowed,
		mcpv1alpha1.ConditionWorkloadAvailable,
		mcpv1alpha1.ConditionConnected,
		mcpv1alpha1.ConditionToolsDiscovered,
	} {
		c := meta.FindStatusCondition(obj.Status.Conditions, t)
		if c == nil {
			if t == mcpv1alpha1.ConditionWorkloadAvailable {
				continue // only stdio servers carry it
			}
			ready, readyReason, readyMessage = false, mcpv1alpha1.ReasonProgressing, "Waiting for "+t
			break
		}
		if c.Status != metav1.ConditionTrue {
			ready, readyReason, readyMessage = false, c.Reason, c.Message
			break
		}
	}
	if ready {
		setCondition(obj, mcpv1alpha1.ConditionReady, metav1.ConditionTrue, readyReason, readyMessage)
	} else if r := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionReady); r == nil ||
		r.Reason != mcpv1alpha1.ReasonSuspended && r.Reason != mcpv1alpha1.ReasonSecretNotFound {
		setCondition(obj, mcpv1alpha1.ConditionReady, metav1.ConditionFalse, readyReason, readyMessage)
	}

	ready = meta.IsStatusConditionTrue(obj.Status.Conditions, mcpv1alpha1.ConditionReady)
	readyCond := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionReady)
	switch {
	case ready || readyCond.Reason == mcpv1alpha1.ReasonSuspended:
		meta.RemoveStatusCondition(&obj.Status.Conditions, mcpv1alpha1.ConditionReconciling)
		meta.RemoveStatusCondition(&obj.Status.Conditions, mcpv1alpha1.ConditionStalled)
	case transientReasons[readyCond.Reason] || readyCond.Reason == mcpv1alpha1.ReasonProgressing:
		meta.RemoveStatusCondition(&obj.Status.Conditions, mcpv1alpha1.ConditionStalled)
		setCondition(obj, mcpv1alpha1.ConditionReconciling, metav1.ConditionTrue, readyCond.Reason, readyCond.Message)
	default:
		meta.RemoveStatusCondition(&obj.Status.Conditions, mcpv1alpha1.ConditionReconciling)
		setCondition(obj, mcpv1alpha1.ConditionStalled, metav1.ConditionTrue, readyCond.Reason, readyCond.Message)
	}
}

// applySnapshot writes what the connector observed into the object's status: the
// connection conditions and, once discovered, what the server offers. egressMessage is
// the EgressAllowed message while nothing denies the connection.
func applySnapshot(obj *mcpv1alpha1.MCPServer, snap connector.Snapshot, egressMessage string) {
	st := &obj.Status
	st.Endpoint = connector.TruncateUTF8(snap.Endpoint, 2048)
	if snap.Transport != "" {
		st.Transport = mcpv1alpha1.Transport(snap.Transport)
	}

	failureReason, failureMessage := mcpv1alpha1.ReasonConnecting, "Connecting to "+snap.Endpoint
	if snap.LastError != nil {
		failureReason, failureMessage = snap.LastError.Reason, snap.LastError.Message
	}

	egressDenied := snap.LastError != nil && (snap.LastError.Reason == mcpv1alpha1.ReasonEgressDenied ||
		snap.LastError.Reason == mcpv1alpha1.ReasonRedirectDenied)
	if egressDenied {
		setCondition(obj, mcpv1alpha1.ConditionEgressAllowed, metav1.ConditionFalse, failureReason, failureMessage)
	} else {
		setCondition(obj, mcpv1alpha1.ConditionEgressAllowed, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded, egressMessage)
	}

	switch snap.State {
	case connector.StateReady:
		setCondition(obj, mcpv1alpha1.ConditionConnected, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded,
			fmt.Sprintf("Connected over %s, protocol %s", snap.Transport, snap.ProtocolVersion))
	case connector.StateDown:
		setCondition(obj, mcpv1alpha1.ConditionConnected, metav1.ConditionFalse, failureReason, failureMessage)
	default:
		// Still connecting. What was observed for this generation stays until the
		// outcome is known, so the condition does not flap: a False is a failed attempt
		// being retried, a True is a session a restarted manager (or a rotated Secret) is
		// setting up again. A new generation is a new connection: Unknown until it is up.
		if c := meta.FindStatusCondition(st.Conditions, mcpv1alpha1.ConditionConnected); c == nil || c.ObservedGeneration != obj.Generation {
			setCondition(obj, mcpv1alpha1.ConditionConnected, metav1.ConditionUnknown, mcpv1alpha1.ReasonConnecting,
				"Connecting to "+snap.Endpoint)
		}
	}

	if !snap.Discovered {
		if c := meta.FindStatusCondition(st.Conditions, mcpv1alpha1.ConditionToolsDiscovered); c == nil || c.Status != metav1.ConditionTrue {
			status := metav1.ConditionUnknown
			if snap.State == connector.StateDown {
				status = metav1.ConditionFalse
			}
			setCondition(obj, mcpv1alpha1.ConditionToolsDiscovered, status, failureReason, failureMessage)
		}
		return
	}

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
	}
	st.ResourceCount = int32(len(snap.Resources) + len(snap.ResourceTemplates)) //nolint:gosec // bounded by the connector's item limit
	st.PromptCount = int32(len(snap.Prompts))                                   //nolint:gosec // bounded by the connector's item limit

	published := filterTools(snap.Tools, obj.Spec.Tools)
	st.ToolCount = int32(len(published)) //nolint:gosec // bounded by the connector's item limit
	st.ToolsDigest = connector.ToolsDigest(published)
	st.Tools, st.ToolsTruncated = statusTools(published)
	setCondition(obj, mcpv1alpha1.ConditionToolsDiscovered, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded,
		fmt.Sprintf("%d of %d tools published, %d resources, %d prompts",
			len(published), len(snap.Tools), st.ResourceCount, st.PromptCount))
}

// filterTools returns the tools spec.tools publishes: those matching an allow glob (or
// all when allow is empty) and no deny glob. Globs are validated at admission to
// [A-Za-z0-9_.*?-], so path.Match cannot fail on them.
func filterTools(tools []connector.Tool, filter *mcpv1alpha1.ToolFilter) []connector.Tool {
	if filter == nil || len(filter.Allow) == 0 && len(filter.Deny) == 0 {
		return tools
	}
	matchesAny := func(globs []string, name string) bool {
		for _, g := range globs {
			if ok, _ := path.Match(g, name); ok {
				return true
			}
		}
		return false
	}
	var out []connector.Tool
	for _, t := range tools {
		if (len(filter.Allow) == 0 || matchesAny(filter.Allow, t.Name)) && !matchesAny(filter.Deny, t.Name) {
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
