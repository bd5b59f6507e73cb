package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/toolsets"
)

// Bounds of a toolset's status.
const (
	maxToolsetTools   = 256
	maxToolsetServers = 32
	// maxListedNames bounds how many names a condition message lists before "and N more".
	maxListedNames = 10
)

// toolsetObservation is what one reconcile of a toolset observed: the servers it
// selects and what they expose under the toolset's rules.
type toolsetObservation struct {
	selected []toolsets.Selected
	// invalidSelector says which entries' selectors cannot be parsed; "" when none.
	invalidSelector string
	exposure        toolsets.Exposure
}

// observeToolset selects the toolset's servers among the MCPServers of its namespace and
// exposes the tools their status publishes.
func observeToolset(ts *mcpv1alpha1.MCPToolset, servers []mcpv1alpha1.MCPServer) *toolsetObservation {
	obs := &toolsetObservation{}
	selected, err := toolsets.Select(ts, servers)
	if err != nil {
		obs.invalidSelector = err.Error()
	}
	obs.selected = selected
	origins := make([]toolsets.Origin, 0, len(selected))
	for _, s := range selected {
		if !s.Ready() {
			// A server that is not Ready serves nothing through the gateway.
			continue
		}
		names := make([]string, len(s.Server.Status.Tools))
		for i, t := range s.Server.Status.Tools {
			names[i] = t.Name
		}
		origins = append(origins, toolsets.Origin{Server: s.Name, Prefix: s.Prefix, Tools: names})
	}
	obs.exposure = toolsets.Expose(&ts.Spec, origins)
	return obs
}

// computeToolsetStatus sets every status field and condition the toolset reconciler
// owns from what was observed. It is a pure function of its arguments.
func computeToolsetStatus(ts *mcpv1alpha1.MCPToolset, obs *toolsetObservation) {
	st := &ts.Status
	st.ObservedGeneration = ts.Generation
	st.GatewayPath = gatewaypath.Toolset(ts.Namespace, ts.Name)

	st.Servers = nil
	var ready, notReady []string
	for _, s := range obs.selected {
		if s.Ready() {
			ready = append(ready, s.Name)
		} else {
			notReady = append(notReady, s.Name+" ("+serverNotReadyReason(s)+")")
		}
		if len(st.Servers) < maxToolsetServers {
			st.Servers = append(st.Servers, mcpv1alpha1.ToolsetServerStatus{
				Name: s.Name, Ready: s.Ready(), ToolCount: int32(obs.exposure.PerServer[s.Name]), //nolint:gosec // bounded by the connector's item limit
			})
		}
	}
	st.ReadyServers = fmt.Sprintf("%d/%d", len(ready), len(obs.selected))

	tools := obs.exposure.Tools
	st.ToolCount = int32(len(tools)) //nolint:gosec // at most 32 servers' tools, each bounded by the connector's item limit
	st.ToolsTruncated = len(tools) > maxToolsetTools
	st.Tools = make([]mcpv1alpha1.ToolsetTool, 0, min(len(tools), maxToolsetTools))
	for _, t := range tools[:min(len(tools), maxToolsetTools)] {
		st.Tools = append(st.Tools, mcpv1alpha1.ToolsetTool{Name: t.Name, Server: t.Server, Tool: t.Tool})
	}
	if len(st.Tools) == 0 {
		st.Tools = nil
	}
	st.ToolsDigest = toolsetDigest(obs)

	setToolsetCondition(ts, serversReadyCondition(obs, ready, notReady))
	setToolsetCondition(ts, namesUniqueCondition(obs))

	readyCond := toolsetReadyCondition(obs, ready, notReady)
	s := summary{ready: conditionState{readyCond.Status, readyCond.Reason, readyCond.Message}}
	switch {
	case obs.invalidSelector != "":
		s.progress, s.reason, s.message = progressStalled, mcpv1alpha1.ReasonInvalidSpec, readyCond.Message
	case readyCond.Status != metav1.ConditionTrue:
		// Waiting for servers to become Ready (or to exist) is progress the toolset
		// itself cannot make: it resumes on the servers' own changes.
		s.progress, s.reason, s.message = progressReconciling, readyCond.Reason, readyCond.Message
	}
	setSummary(&st.Conditions, ts.Generation, s)
}

// toolsetReadyCondition is the summary: True when at least one selected server is Ready
// and the spec is valid.
func toolsetReadyCondition(obs *toolsetObservation, ready, notReady []string) *metav1.Condition {
	c := &metav1.Condition{Type: mcpv1alpha1.ConditionReady}
	switch {
	case obs.invalidSelector != "":
		c.Status, c.Reason = metav1.ConditionFalse, mcpv1alpha1.ReasonInvalidSpec
		c.Message = "Invalid server selector: " + obs.invalidSelector
	case len(obs.selected) == 0:
		c.Status, c.Reason = metav1.ConditionFalse, mcpv1alpha1.ReasonNoServers
		c.Message = "No MCPServer of this namespace matches spec.servers"
	case len(ready) == 0:
		c.Status, c.Reason = metav1.ConditionFalse, mcpv1alpha1.ReasonServersNotReady
		c.Message = "No selected server is Ready: " + listNames(notReady)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded
		c.Message = fmt.Sprintf("Serving %d tools of %d of %d selected servers", len(obs.exposure.Tools), len(ready), len(obs.selected))
	}
	return c
}

// serversReadyCondition says whether every selected server is Ready, naming those that
// are not.
func serversReadyCondition(obs *toolsetObservation, ready, notReady []string) *metav1.Condition {
	c := &metav1.Condition{Type: mcpv1alpha1.ConditionServersReady}
	switch {
	case len(obs.selected) == 0:
		c.Status, c.Reason = metav1.ConditionFalse, mcpv1alpha1.ReasonNoServers
		c.Message = "No MCPServer of this namespace matches spec.servers"
	case len(notReady) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, mcpv1alpha1.ReasonServersNotReady
		c.Message = fmt.Sprintf("%d of %d selected servers are not Ready: %s", len(notReady), len(obs.selected), listNames(notReady))
	default:
		c.Status, c.Reason = metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded
		c.Message = fmt.Sprintf("All %d selected servers are Ready", len(ready))
	}
	return c
}

// namesUniqueCondition says whether every exposed name is unique and valid; False names
// both origins of each collision and each invalid name.
func namesUniqueCondition(obs *toolsetObservation) *metav1.Condition {
	c := &metav1.Condition{Type: mcpv1alpha1.ConditionNamesUnique, Status: metav1.ConditionTrue,
		Reason: mcpv1alpha1.ReasonSucceeded, Message: "Every exposed tool name is unique and valid"}
	var parts []string
	for _, refs := range obs.exposure.Collisions {
		origins := make([]string, len(refs))
		for i, r := range refs {
			origins[i] = r.Server + "/" + r.Tool
		}
		parts = append(parts, fmt.Sprintf("%q from %s", refs[0].Name, strings.Join(origins, " and ")))
	}
	if len(parts) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, mcpv1alpha1.ReasonNameCollision
		c.Message = "Tools share an exposed name and neither is served (use a prefix or a rename): " + listNames(parts)
	}
	if len(obs.exposure.Invalid) > 0 {
		invalid := make([]string, len(obs.exposure.Invalid))
		for i, r := range obs.exposure.Invalid {
			invalid[i] = fmt.Sprintf("%q from %s/%s", r.Name, r.Server, r.Tool)
		}
		msg := "Exposed names must match " + mcpv1alpha1.ExposedToolNamePattern + " and these are not served: " + listNames(invalid)
		if c.Status == metav1.ConditionFalse {
			c.Message += "; " + msg
		} else {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, mcpv1alpha1.ReasonInvalidToolName, msg
		}
	}
	return c
}

// serverNotReadyReason says briefly why a selected server is not Ready.
func serverNotReadyReason(s toolsets.Selected) string {
	switch {
	case s.Server == nil:
		return "not found"
	case s.Server.Spec.Suspend:
		return mcpv1alpha1.ReasonSuspended
	}
	c := meta.FindStatusCondition(s.Server.Status.Conditions, mcpv1alpha1.ConditionReady)
	switch {
	case c == nil:
		return "no status yet"
	case c.Status == metav1.ConditionTrue:
		return mcpv1alpha1.ReasonProgressing
	default:
		return c.Reason
	}
}

// listNames joins names, listing at most maxListedNames.
func listNames(names []string) string {
	if len(names) <= maxListedNames {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:maxListedNames], ", ") + fmt.Sprintf(" and %d more", len(names)-maxListedNames)
}

// toolsetDigest digests the exposed tools, their origins, overridden descriptions and
// the tools digests of the origins, so that it changes whenever what the endpoint
// serves changes.
func toolsetDigest(obs *toolsetObservation) string {
	if len(obs.exposure.Tools) == 0 {
		return ""
	}
	h := sha256.New()
	digests := map[string]string{}
	for _, s := range obs.selected {
		if s.Server != nil {
			digests[s.Name] = s.Server.Status.ToolsDigest
		}
	}
	for _, t := range obs.exposure.Tools {
		fmt.Fprintf(h, "%q %q %q %t %q %q\n", t.Name, t.Server, t.Tool, t.HasDescription, t.Description, digests[t.Server])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// setToolsetCondition sets c with the toolset's generation and a bounded message.
func setToolsetCondition(ts *mcpv1alpha1.MCPToolset, c *metav1.Condition) {
	setConditionState(&ts.Status.Conditions, ts.Generation, c.Type, &conditionState{c.Status, c.Reason, c.Message})
}
