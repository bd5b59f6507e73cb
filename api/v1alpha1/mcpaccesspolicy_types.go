package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AccessPolicyTargetKind is the kind of object an MCPAccessPolicy applies to.
// +kubebuilder:validation:Enum=MCPServer;MCPToolset
type AccessPolicyTargetKind string

const (
	// AccessPolicyTargetMCPServer targets the gateway endpoint of one MCPServer.
	AccessPolicyTargetMCPServer AccessPolicyTargetKind = "MCPServer"
	// AccessPolicyTargetMCPToolset targets the gateway endpoint of one MCPToolset.
	AccessPolicyTargetMCPToolset AccessPolicyTargetKind = "MCPToolset"
)

// AccessPolicyEnforcement says whether a policy's decisions are applied or only reported.
// +kubebuilder:validation:Enum=Enforce;Audit
type AccessPolicyEnforcement string

const (
	// AccessPolicyEnforce applies the policy: a request the policy refuses does not run.
	AccessPolicyEnforce AccessPolicyEnforcement = "Enforce"
	// AccessPolicyAudit decides, logs and counts what the policy would do, and refuses
	// nothing.
	AccessPolicyAudit AccessPolicyEnforcement = "Audit"
)

// AccessPolicyAction is what a matching rule does with a request.
// +kubebuilder:validation:Enum=Allow;Deny;RequireApproval
type AccessPolicyAction string

const (
	// AccessPolicyAllow lets the request run.
	AccessPolicyAllow AccessPolicyAction = "Allow"
	// AccessPolicyDeny refuses the request. Deny wins over every other rule of every
	// policy that selects the target.
	AccessPolicyDeny AccessPolicyAction = "Deny"
	// AccessPolicyRequireApproval lets the request run only once the calling client's
	// user has approved it (by elicitation, or input_required for a 2026-07-28 client).
	// It wins over Allow.
	AccessPolicyRequireApproval AccessPolicyAction = "RequireApproval"
)

// AccessPolicySubjectKind is the kind of caller a rule names.
// +kubebuilder:validation:Enum=User;Group;ServiceAccount
type AccessPolicySubjectKind string

const (
	// AccessPolicySubjectUser matches the caller's Kubernetes username (for an
	// MCPIdentityProvider caller, the mapped username with its prefix).
	AccessPolicySubjectUser AccessPolicySubjectKind = "User"
	// AccessPolicySubjectGroup matches a group the caller belongs to (for an
	// MCPIdentityProvider caller, a mapped group with its prefix).
	// "system:authenticated" matches every caller.
	AccessPolicySubjectGroup AccessPolicySubjectKind = "Group"
	// AccessPolicySubjectServiceAccount matches a Kubernetes ServiceAccount, whose
	// username is system:serviceaccount:<namespace>:<name>.
	AccessPolicySubjectServiceAccount AccessPolicySubjectKind = "ServiceAccount"
)

// MCPAccessPolicySpec says who may call which tools, read which resources and get which
// prompts through the gateway endpoints of the MCPServers and MCPToolsets it selects.
//
// Semantics follow NetworkPolicy and MCPEgressPolicy: a target no Enforce policy selects
// behaves as if no access policy existed (RBAC `use` alone decides). Once an Enforce
// policy selects a target, a tools/call runs only if a rule of some selecting Enforce
// policy allows it (the union of allows); resources/read and prompts/get are governed
// the same way once a selecting Enforce policy has a rule that names resources, or
// prompts. Deny wins over everything, across all selecting policies; RequireApproval wins
// over Allow. A policy never grants what RBAC refuses: RBAC `use` on the server or
// toolset stays the door.
// +kubebuilder:validation:XValidation:rule="has(self.targetRefs) != has(self.targetSelector)",message="set exactly one of targetRefs or targetSelector"
type MCPAccessPolicySpec struct {
	// targetRefs names the MCPServers and MCPToolsets of this namespace the policy
	// applies to, 1 to 32 entries. Exactly one of targetRefs and targetSelector is set.
	// +optional
	// +listType=map
	// +listMapKey=kind
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	TargetRefs []AccessPolicyTargetRef `json:"targetRefs,omitempty"`

	// targetSelector selects the MCPServers and MCPToolsets of this namespace the policy
	// applies to, by label. An empty selector selects every MCPServer and MCPToolset of
	// the namespace. Exactly one of targetRefs and targetSelector is set.
	// +optional
	TargetSelector *metav1.LabelSelector `json:"targetSelector,omitempty"`

	// enforcement is Enforce (the policy's decisions are applied) or Audit (they are
	// decided, logged and counted, and nothing is refused).
	// +optional
	// +kubebuilder:default=Enforce
	Enforcement AccessPolicyEnforcement `json:"enforcement,omitempty"`

	// rules are evaluated for every request to a selected target. A request is allowed
	// when a rule allows it and no rule denies it. An empty list allows nothing: the
	// selected targets run no tool for anyone (in Enforce mode).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Rules []AccessPolicyRule `json:"rules,omitempty"`
}

// AccessPolicyTargetRef names one MCPServer or MCPToolset of the policy's namespace.
type AccessPolicyTargetRef struct {
	// kind is MCPServer or MCPToolset.
	// +required
	Kind AccessPolicyTargetKind `json:"kind"`

	// name is the object's name in the policy's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// AccessPolicyRule applies its action to the requests of its subjects for the tools,
// resources and prompts it names, when its condition holds.
//
// A rule names at least one of tools, resources and prompts: tools match the name of a
// tools/call (for a toolset, the name the toolset exposes), resources the URI of a
// resources/read, prompts the name of a prompts/get. Globs: `*` matches any run of
// characters ('/' included) and `?` exactly one.
// +kubebuilder:validation:XValidation:rule="(has(self.tools) && size(self.tools) > 0) || (has(self.resources) && size(self.resources) > 0) || (has(self.prompts) && size(self.prompts) > 0)",message="a rule must name tools, resources or prompts"
type AccessPolicyRule struct {
	// subjects are the callers the rule applies to, 1 to 32. A rule applies to a caller
	// that any subject matches.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Subjects []AccessPolicySubject `json:"subjects"`

	// tools lists globs of tool names the rule applies to, such as "get_*" or "*".
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.all(g, g.matches('^[A-Za-z0-9_.*?-]+$'))",message="tool globs may contain only letters, digits, '_', '.', '-', '*' and '?'"
	Tools []string `json:"tools,omitempty"`

	// resources lists globs of resource URIs the rule applies to for resources/read,
	// such as "file:///repo/*". Once a selecting Enforce policy has a rule that names
	// resources, every resources/read of the target needs a rule that allows it.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.all(g, !g.matches('[[:space:][:cntrl:]]'))",message="resource globs may not contain spaces or control characters"
	Resources []string `json:"resources,omitempty"`

	// prompts lists globs of prompt names the rule applies to for prompts/get. Once a
	// selecting Enforce policy has a rule that names prompts, every prompts/get of the
	// target needs a rule that allows it.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.all(g, g.matches('^[A-Za-z0-9_.*?-]+$'))",message="prompt globs may contain only letters, digits, '_', '.', '-', '*' and '?'"
	Prompts []string `json:"prompts,omitempty"`

	// action is Allow, Deny or RequireApproval (the calling client's user approves each
	// call first). Deny wins over every other rule; RequireApproval wins over Allow.
	// +required
	Action AccessPolicyAction `json:"action"`

	// when is a CEL expression that must evaluate to true for the rule to apply, such as
	// 'has(arguments.repo) && arguments.repo.startsWith("acme/")'. It sees `caller`
	// (username, uid, groups, extra, and claims: the verified claims of an
	// MCPIdentityProvider caller, empty for a Kubernetes token), `tool` (name, and
	// annotations: title, readOnlyHint, destructiveHint, idempotentHint, openWorldHint
	// of the published definition, the MCP defaults where the server says nothing),
	// `arguments` (the call's arguments, or the prompt's), `method` ("tools/call",
	// "resources/read" or "prompts/get"), `resource` (uri), `prompt` (name) and `target`
	// (kind, namespace, name). It runs with the cost limits of a ValidatingAdmissionPolicy;
	// one that does not compile makes the policy Ready=False with reason
	// InvalidExpression (and deny everything it selects), one that fails or runs out of
	// budget at run time denies the request, with the reason in the audit log.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.trim().size() > 0",message="when must not be blank; omit it to apply the rule always"
	When string `json:"when,omitempty"`
}

// AccessPolicySubject is one caller, or group of callers, a rule applies to.
// +kubebuilder:validation:XValidation:rule="self.kind == 'ServiceAccount' ? has(self.__namespace__) : !has(self.__namespace__)",message="namespace is required for a ServiceAccount subject and not allowed for a User or Group subject"
type AccessPolicySubject struct {
	// kind is User, Group or ServiceAccount.
	// +required
	Kind AccessPolicySubjectKind `json:"kind"`

	// name is the username, the group or the ServiceAccount's name, matched exactly.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Name string `json:"name"`

	// namespace is the ServiceAccount's namespace; set for ServiceAccount subjects only.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// AccessPolicyTargetStatus is one target the policy selects.
type AccessPolicyTargetStatus struct {
	// kind is MCPServer or MCPToolset.
	// +required
	Kind AccessPolicyTargetKind `json:"kind"`

	// name is the object's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// MCPAccessPolicyStatus is what the operator observed of the policy.
type MCPAccessPolicyStatus struct {
	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions describe the policy's state. Ready is True once every expression
	// compiled; False, with reason InvalidExpression or InvalidSpec, says what to fix
	// (the policy then denies every request to the targets it selects). Stalled is
	// present only while True.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// targets are the existing MCPServers and MCPToolsets the policy selects, sorted by
	// kind and name, at most 64.
	// +optional
	// +listType=map
	// +listMapKey=kind
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Targets []AccessPolicyTargetStatus `json:"targets,omitempty"`

	// targetCount is the number of selected targets, including those beyond the 64
	// listed.
	// +optional
	TargetCount int32 `json:"targetCount,omitempty"`
}

// MCPAccessPolicy decides, per caller, tool and arguments, what callers may do through
// the gateway endpoints of the MCPServers and MCPToolsets it selects.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mcpap,categories=mcp
// +kubebuilder:printcolumn:name="Enforcement",type=string,JSONPath=`.spec.enforcement`
// +kubebuilder:printcolumn:name="Targets",type=integer,JSONPath=`.status.targetCount`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
type MCPAccessPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the policy's targets and rules.
	// +required
	Spec MCPAccessPolicySpec `json:"spec"`

	// status is what the operator observed.
	// +optional
	Status MCPAccessPolicyStatus `json:"status,omitempty"`
}

// MCPAccessPolicyList is a list of MCPAccessPolicies.
// +kubebuilder:object:root=true
type MCPAccessPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MCPAccessPolicy `json:"items"`
}
