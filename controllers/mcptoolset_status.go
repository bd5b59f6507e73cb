package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
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
	features        toolsetFeatures
}

// toolsetFeatures is what a toolset exposes of its origins' resources, resource
// templates and prompts. Each kind is exposed on its own, so that every collision and
// every entry not exposed is known by kind; the exposure of one kind never depends on
// another's.
type toolsetFeatures struct {
	resources, templates, prompts toolsets.Features
}

// exposeFeatures applies toolsets.ExposeFeatures to each kind of what origins offer.
func exposeFeatures(spec *mcpv1alpha1.MCPToolsetSpec, origins []toolsets.FeatureOrigin) toolsetFeatures {
	resources := make([]toolsets.FeatureOrigin, len(origins))
	templates := make([]toolsets.FeatureOrigin, len(origins))
	prompts := make([]toolsets.FeatureOrigin, len(origins))
	for i, o := range origins {
		resources[i] = toolsets.FeatureOrigin{Server: o.Server, Prefix: o.Prefix, Resources: o.Resources}
		templates[i] = toolsets.FeatureOrigin{Server: o.Server, Prefix: o.Prefix, Templates: o.Templates}
		prompts[i] = toolsets.FeatureOrigin{Server: o.Server, Prefix: o.Prefix, Prompts: o.Prompts}
	}
	return toolsetFeatures{
		resources: toolsets.ExposeFeatures(spec, resources),
		templates: toolsets.ExposeFeatures(spec, templates),
		prompts:   toolsets.ExposeFeatures(spec, prompts),
	}
}

// observeToolset selects the toolset's servers among the MCPServers of its namespace and
// exposes the tools, resources and prompts their status publishes.
func observeToolset(ts *mcpv1alpha1.MCPToolset, servers []mcpv1alpha1.MCPServer) *toolsetObservation {
	obs := &toolsetObservation{}
	selected, err := toolsets.Select(ts, servers)
	if err != nil {
		obs.invalidSelector = err.Error()
	}
	obs.selected = selected
	origins := make([]toolsets.Origin, 0, len(selected))
	featureOrigins := make([]toolsets.FeatureOrigin, 0, len(selected))
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
		featureOrigins = append(featureOrigins, toolsets.StatusFeatures(s))
	}
	obs.exposure = toolsets.Expose(&ts.Spec, origins)
	obs.features = exposeFeatures(&ts.Spec, featureOrigins)
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
	f := obs.features
	st.ResourceCount = int32(len(f.resources.Resources) + len(f.templates.Templates)) //nolint:gosec // at most 32 servers' status lists of 256
	st.PromptCount = int32(len(f.prompts.Prompts))                                    //nolint:gosec // at most 32 servers' status lists of 256

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
		f := obs.features
		c.Message = fmt.Sprintf("Serving %d tools, %d resources and %d prompts of %d of %d selected servers", len(obs.exposure.Tools),
			len(f.resources.Resources)+len(f.templates.Templates), len(f.prompts.Prompts), len(ready), len(obs.selected))
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

// namesUniqueCondition says whether every exposed tool name, resource URI and prompt
// name is unique and valid. False names both origins of each collision (first, since
// neither origin is served), then each name that is not exposed because it is invalid,
// or because it is a resource URI of a server without prefix that looks like another
// server's wrapped URI.
func namesUniqueCondition(obs *toolsetObservation) *metav1.Condition {
	c := &metav1.Condition{Type: mcpv1alpha1.ConditionNamesUnique, Status: metav1.ConditionTrue,
		Reason: mcpv1alpha1.ReasonSucceeded, Message: "Every exposed tool name, resource URI and prompt name is unique and valid"}
	f := obs.features

	tools := make([]string, len(obs.exposure.Collisions))
	for i, refs := range obs.exposure.Collisions {
		origins := make([]string, len(refs))
		for j, r := range refs {
			origins[j] = r.Server + "/" + r.Tool
		}
		tools[i] = fmt.Sprintf("tool %q from %s", refs[0].Name, strings.Join(origins, " and "))
	}
	collisions := listKinds(
		kindList{tools, "tools"},
		kindList{featureCollisions("resource", f.resources.Collisions, false), "resources"},
		kindList{featureCollisions("resource template", f.templates.Collisions, false), "resource templates"},
		kindList{featureCollisions("prompt", f.prompts.Collisions, true), "prompts"},
	)
	if collisions != "" {
		c.Status, c.Reason = metav1.ConditionFalse, mcpv1alpha1.ReasonNameCollision
		c.Message = "Origins share an exposed name and none of them is served under it (use a prefix, or a rename for a tool): " + collisions
	}

	invalid := make([]string, len(obs.exposure.Invalid))
	for i, r := range obs.exposure.Invalid {
		invalid[i] = fmt.Sprintf("tool %q from %s/%s", r.Name, r.Server, r.Tool)
	}
	var msgs []string
	if names := listKinds(kindList{invalid, "tools"}, kindList{featureCollisions("prompt", hiddenGroups(f.prompts.Hidden), true), "prompts"}); names != "" {
		msgs = append(msgs, "Exposed names must match "+mcpv1alpha1.ExposedToolNamePattern+" and these are not served: "+names)
	}
	wrapped := listKinds(
		kindList{featureCollisions("resource", hiddenGroups(f.resources.Hidden), false), "resources"},
		kindList{featureCollisions("resource template", hiddenGroups(f.templates.Hidden), false), "resource templates"},
	)
	if wrapped != "" {
		msgs = append(msgs, "URIs of a server without prefix that look like another server's wrapped URI (switchboard+...) are not served: "+wrapped)
	}
	if len(msgs) > 0 {
		msg := strings.Join(msgs, "; ")
		if c.Status == metav1.ConditionFalse {
			c.Message += "; " + msg
		} else {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, mcpv1alpha1.ReasonInvalidToolName, msg
		}
	}
	return c
}

// maxMessageURI bounds a URI in a condition message, so that one long URI does not
// crowd out the others.
const maxMessageURI = 128

// featureCollisions describes each group of features sharing an exposed name as
// `kind "name" from a and b`: by server for resources (their URIs are the same on
// every origin), by server and original name for prompts (prefixes differ).
func featureCollisions(kind string, groups [][]toolsets.Feature, named bool) []string {
	out := make([]string, len(groups))
	for i, g := range groups {
		origins := make([]string, len(g))
		for j, f := range g {
			origins[j] = f.Server
			if named {
				origins[j] += "/" + f.Original
			}
		}
		name := g[0].Name
		if !named && len(name) > maxMessageURI {
			name = connector.TruncateUTF8(name, maxMessageURI) + "..."
		}
		out[i] = fmt.Sprintf("%s %q from %s", kind, name, strings.Join(origins, " and "))
	}
	return out
}

// hiddenGroups makes each feature a group of its own, for featureCollisions.
func hiddenGroups(hidden []toolsets.Feature) [][]toolsets.Feature {
	out := make([][]toolsets.Feature, len(hidden))
	for i := range hidden {
		out[i] = hidden[i : i+1]
	}
	return out
}

// kindList is what a condition message lists of one kind, and the kind's plural.
type kindList struct {
	items  []string
	plural string
}

// listKinds joins the lists of several kinds, each list bounded so that all of them
// share maxListedNames entries and each kind that has some shows at least one; a kind
// with more says how many more. Empty when every list is.
func listKinds(kinds ...kindList) string {
	n := 0
	for _, k := range kinds {
		if len(k.items) > 0 {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	share := max(maxListedNames/n, 1)
	var parts []string
	for _, k := range kinds {
		switch {
		case len(k.items) == 0:
		case len(k.items) <= share:
			parts = append(parts, strings.Join(k.items, ", "))
		default:
			parts = append(parts, strings.Join(k.items[:share], ", ")+fmt.Sprintf(" and %d more %s", len(k.items)-share, k.plural))
		}
	}
	return strings.Join(parts, "; ")
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
