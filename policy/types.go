package policy

import (
	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// The methods Decide judges. Every other method is not governed by access policies.
const (
	MethodToolsCall     = "tools/call"
	MethodResourcesRead = "resources/read"
	MethodPromptsGet    = "prompts/get"
)

// Caller is who makes the request, as the gateway's identity step established it.
type Caller struct {
	// Username is the Kubernetes username: system:serviceaccount:<ns>:<name> for a
	// ServiceAccount, the mapped username (with its prefix) for an MCPIdentityProvider
	// caller.
	Username string
	// UID is the user's UID where the authenticator gave one.
	UID string
	// Groups are the caller's groups (mapped, with their prefix, for an
	// MCPIdentityProvider caller). Every caller but system:anonymous is in
	// system:authenticated, listed or not; system:anonymous is in system:unauthenticated.
	Groups []string
	// Extra is the authenticator's extra information (TokenReview's user.extra).
	Extra map[string][]string
	// Claims are the verified claims of an MCPIdentityProvider caller's token; nil for a
	// Kubernetes token.
	Claims map[string]any
}

// Target is the gateway endpoint a request is made to.
type Target struct {
	// Kind is MCPServer or MCPToolset.
	Kind mcpv1alpha1.AccessPolicyTargetKind
	// Namespace and Name identify the object.
	Namespace, Name string
	// Labels are the object's labels, which a targetSelector matches.
	Labels map[string]string
}

// Tool is a tool as the target publishes it: for a server, its published (and pinned,
// where pinned) definition; for a toolset, under the name the toolset exposes.
type Tool struct {
	// Name is the tool's name on the target.
	Name string
	// Title is the annotations' title, "" when unset.
	Title string
	// ReadOnlyHint, DestructiveHint, IdempotentHint and OpenWorldHint are the tool's
	// annotations; nil where the server says nothing, which CEL sees as the MCP default
	// (readOnly false, destructive true, idempotent false, openWorld true).
	ReadOnlyHint, DestructiveHint, IdempotentHint, OpenWorldHint *bool
}

// Request is one request to judge.
type Request struct {
	// Method is MethodToolsCall, MethodResourcesRead or MethodPromptsGet; any other
	// method is allowed, as access policies do not govern it.
	Method string
	// Tool is the called tool, for tools/call.
	Tool Tool
	// Resource is the URI read, for resources/read.
	Resource string
	// Prompt is the prompt's name, for prompts/get.
	Prompt string
	// Arguments are the call's (or the prompt's) arguments, strictly decoded once: the
	// values the request forwards. Values are what encoding/json gives an `any`
	// (string, float64, bool, nil, []any, map[string]any), or int64 and other Go
	// numbers.
	Arguments map[string]any
}

// Effect is what a verdict does with a request.
type Effect string

// Effects, from the least to the most restrictive.
const (
	// EffectAllow runs the request.
	EffectAllow Effect = "Allow"
	// EffectRequireApproval runs the request once the calling client's user approves it.
	EffectRequireApproval Effect = "RequireApproval"
	// EffectDeny refuses the request.
	EffectDeny Effect = "Deny"
)

// Verdict is the outcome of Decide.
type Verdict struct {
	// Effect is what to do with the request.
	Effect Effect
	// Reason says why, in words fit for the agent, an audit line and a trace: the
	// policy and rule that decided, or why none did. It never quotes arguments.
	Reason string
	// Policy names the deciding MCPAccessPolicy as "namespace/name"; "" when no policy
	// decided (the target is not governed, or no rule allowed).
	Policy string
	// Rule is the index of the deciding rule in the policy's spec.rules; -1 when no rule
	// decided.
	Rule int
	// Audit is what the verdict would be if the Audit policies that select the target
	// were enforced too (Audit and Enforce policies together); nil when no Audit policy
	// selects it. It never changes Effect.
	Audit *Verdict
}
