package gateway

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/toolglob"
	"github.com/switchboard-mcp/switchboard/policy"
)

// server is what the gateway knows of one MCPServer: whether it may be called, and the
// tool policy its spec sets. It is built from the informer's object and replaced whole
// on every change, so that a session reads a consistent picture without locking.
type server struct {
	namespace, name string
	// obj is the informer's object, for the toolsets that select servers by label. It is
	// shared with the informer's cache and never modified.
	obj *mcpv1alpha1.MCPServer

	// ready is the Ready condition; reason and message say why it is not True.
	ready           bool
	reason, message string

	allow, deny []string
	// pinned is spec.tools.pinnedDigest; digest is status.toolsDigest.
	pinned, digest string

	// pin holds the pinned tools once a session needs them (see pinnedSet).
	pinOnce sync.Once
	pin     *pinnedTools

	// defs are the tools' definitions access policies see (see policyTool), built once
	// per picture of the server.
	defsOnce sync.Once
	defs     map[string]policy.Tool

	// maxSessions, maxSessionsPerCaller and requestsPerSecond are spec.gateway's
	// limits; zero means none.
	maxSessions          int
	maxSessionsPerCaller int
	requestsPerSecond    int
}

// serverOf builds the gateway's picture of obj.
func serverOf(obj *mcpv1alpha1.MCPServer) *server {
	s := &server{
		namespace: obj.Namespace,
		name:      obj.Name,
		obj:       obj,
		reason:    "Unknown",
		message:   "the server has not reported its status yet",
		digest:    obj.Status.ToolsDigest,
	}
	if c := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionReady); c != nil {
		s.ready = c.Status == "True" && c.ObservedGeneration == obj.Generation
		s.reason, s.message = c.Reason, c.Message
		if c.Status == "True" && !s.ready {
			s.reason, s.message = mcpv1alpha1.ReasonProgressing, "the server's latest spec has not been reconciled yet"
		}
	}
	if t := obj.Spec.Tools; t != nil {
		s.allow, s.deny = t.Allow, t.Deny
		s.pinned = t.PinnedDigest
	}
	if g := obj.Spec.Gateway; g != nil {
		s.maxSessions = int(g.MaxSessions)
		s.maxSessionsPerCaller = int(g.MaxSessionsPerCaller)
		s.requestsPerSecond = int(g.RequestsPerSecond)
	}
	if obj.Spec.Suspend {
		s.ready, s.reason, s.message = false, mcpv1alpha1.ReasonSuspended, "spec.suspend is true"
	}
	return s
}

// toolRefusal says why a tool may not be listed or called, naming the rule; empty when
// it may. A deny glob that cannot be evaluated refuses every tool.
func (s *server) toolRefusal(tool string) string {
	v := toolglob.Check(s.allow, s.deny, tool)
	switch {
	case v.Allowed:
		return ""
	case v.Invalid != nil:
		return fmt.Sprintf("tool %s is denied because spec.tools.deny glob %q of MCPServer %s/%s is not valid: %v", quoteName(tool), v.Deny, s.namespace, s.name, v.Invalid)
	case v.Deny != "":
		return fmt.Sprintf("tool %s is denied by spec.tools.deny glob %q of MCPServer %s/%s", quoteName(tool), v.Deny, s.namespace, s.name)
	default:
		return fmt.Sprintf("tool %s matches no spec.tools.allow glob of MCPServer %s/%s", quoteName(tool), s.namespace, s.name)
	}
}

// pinRefusal says why no tool of the server may be called while its published tools
// differ from the pinned digest; empty when none is pinned or they match.
func (s *server) pinRefusal() string {
	if s.pinned == "" || s.pinned == s.digest {
		return ""
	}
	return fmt.Sprintf("the tools of MCPServer %s/%s changed since they were pinned (spec.tools.pinnedDigest %s, published %s): "+
		"tool calls are refused until someone reviews the tools and pins the new digest", s.namespace, s.name, s.pinned, orNone(s.digest))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
