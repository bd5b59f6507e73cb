package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ToolsetDiscovery says how a toolset's endpoint presents its tools.
// +kubebuilder:validation:Enum=Direct;Search
type ToolsetDiscovery string

const (
	// ToolsetDiscoveryDirect serves every exposed tool in tools/list.
	ToolsetDiscoveryDirect ToolsetDiscovery = "Direct"
	// ToolsetDiscoverySearch serves two tools instead of the whole list: find_tools,
	// ranked by the catalogue's index over the exposed tools, and call_tool.
	ToolsetDiscoverySearch ToolsetDiscovery = "Search"
)

// ExposedToolNamePattern is what every exposed tool name of a toolset must match, so
// that every common agent framework accepts it.
const ExposedToolNamePattern = `^[A-Za-z0-9_.-]{1,64}$`

// MCPToolsetSpec says which servers' tools one agent-facing endpoint aggregates, under
// which names.
type MCPToolsetSpec struct {
	// description says what the toolset is for. It is shown in the catalogue.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`

	// servers lists the MCPServers of this namespace whose tools the toolset exposes,
	// each by name or by label selector, 1 to 32 entries. A server two entries select
	// is exposed under the first entry's prefix only.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Servers []ToolsetServer `json:"servers"`

	// tools filters and renames the exposed tools. Without it every tool of every
	// selected server is exposed under its prefixed name.
	// +optional
	Tools *ToolsetTools `json:"tools,omitempty"`

	// resources filters the exposed resources and resource templates by glob over their
	// exposed URIs (see docs/toolsets.md for how an origin's URIs are exposed). Without
	// it every resource of every selected server is exposed.
	// +optional
	Resources *ToolsetURIFilter `json:"resources,omitempty"`

	// prompts filters the exposed prompts by glob over their exposed (prefixed) names.
	// Without it every prompt of every selected server is exposed.
	// +optional
	Prompts *ToolsetNameFilter `json:"prompts,omitempty"`

	// discovery is Direct (tools/list answers every exposed tool) or Search (the
	// endpoint serves find_tools and call_tool instead, for toolsets too large to list).
	// +optional
	// +kubebuilder:default=Direct
	Discovery ToolsetDiscovery `json:"discovery,omitempty"`
}

// ToolsetServer selects MCPServers of the toolset's namespace, by name or by label.
// +kubebuilder:validation:XValidation:rule="has(self.name) != has(self.selector)",message="a toolset server entry must set exactly one of name or selector"
type ToolsetServer struct {
	// name is the name of one MCPServer in the toolset's namespace.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// selector selects MCPServers in the toolset's namespace by label. An empty
	// selector selects every MCPServer of the namespace.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// prefix is put before every tool name of the selected servers to form its exposed
	// name. Unset, it is the server's name followed by "_"; "" exposes the tools under
	// their own names.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_.-]*$')",message="prefix may contain only letters, digits, '_', '.' and '-'"
	Prefix *string `json:"prefix,omitempty"`
}

// ToolsetTools filters the exposed tools by glob and overrides some of them. A tool is
// exposed when its prefixed name matches an allow glob (or allow is empty) and no deny
// glob; deny wins. `*` matches any run of characters and `?` any single character.
type ToolsetTools struct {
	// allow lists globs of exposed (prefixed) tool names to expose. Empty means all.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.all(g, g.matches('^[A-Za-z0-9_.*?-]+$'))",message="tool globs may contain only letters, digits, '_', '.', '-', '*' and '?'"
	Allow []string `json:"allow,omitempty"`

	// deny lists globs of exposed (prefixed) tool names never to expose. Deny wins over
	// allow.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.all(g, g.matches('^[A-Za-z0-9_.*?-]+$'))",message="tool globs may contain only letters, digits, '_', '.', '-', '*' and '?'"
	Deny []string `json:"deny,omitempty"`

	// overrides rename or re-describe exposed tools, by their prefixed name, after
	// allow and deny have been applied. At most 256, names unique.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Overrides []ToolOverride `json:"overrides,omitempty"`
}

// ToolsetURIFilter filters exposed resources by glob over their exposed URIs: a
// resource (or template) is exposed when its URI matches an allow glob (or allow is
// empty) and no deny glob; deny wins. `*` matches any run of characters and `?` any
// single character.
type ToolsetURIFilter struct {
	// allow lists globs of exposed URIs to expose. Empty means all.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.all(g, !g.matches('[[:space:][:cntrl:]]'))",message="resource globs may not contain spaces or control characters"
	Allow []string `json:"allow,omitempty"`

	// deny lists globs of exposed URIs never to expose. Deny wins over allow.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.all(g, !g.matches('[[:space:][:cntrl:]]'))",message="resource globs may not contain spaces or control characters"
	Deny []string `json:"deny,omitempty"`
}

// ToolsetNameFilter filters exposed prompts by glob over their exposed (prefixed)
// names, as spec.tools does for tools.
type ToolsetNameFilter struct {
	// allow lists globs of exposed prompt names to expose. Empty means all.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.all(g, g.matches('^[A-Za-z0-9_.*?-]+$'))",message="prompt globs may contain only letters, digits, '_', '.', '-', '*' and '?'"
	Allow []string `json:"allow,omitempty"`

	// deny lists globs of exposed prompt names never to expose. Deny wins over allow.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.all(g, g.matches('^[A-Za-z0-9_.*?-]+$'))",message="prompt globs may contain only letters, digits, '_', '.', '-', '*' and '?'"
	Deny []string `json:"deny,omitempty"`
}

// ToolOverride changes how one exposed tool is presented.
// +kubebuilder:validation:XValidation:rule="has(self.rename) || has(self.description)",message="an override must set rename, description or both"
type ToolOverride struct {
	// name is the tool's exposed (prefixed) name before the override.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_.-]{1,64}$')",message="name must match ^[A-Za-z0-9_.-]{1,64}$"
	Name string `json:"name"`

	// rename is the name the tool is exposed under instead.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_.-]{1,64}$')",message="rename must match ^[A-Za-z0-9_.-]{1,64}$"
	Rename string `json:"rename,omitempty"`

	// description replaces the tool's description.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`
}

// MCPToolsetStatus is what the operator observed of the toolset's servers and which
// tools, resources and prompts its endpoint serves. It is bounded: at most 32 servers
// and 256 tools listed.
type MCPToolsetStatus struct {
	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions describe the toolset's state. Ready is the summary; Reconciling and
	// Stalled are present only while True.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// servers are the selected MCPServers, sorted by name, at most 32.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Servers []ToolsetServerStatus `json:"servers,omitempty"`

	// readyServers says how many of the selected servers are Ready, as "ready/selected".
	// +optional
	// +kubebuilder:validation:MaxLength=16
	ReadyServers string `json:"readyServers,omitempty"`

	// tools are the exposed tools and where each comes from, sorted by exposed name, at
	// most 256.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Tools []ToolsetTool `json:"tools,omitempty"`

	// toolCount is the number of exposed tools, including those beyond the 256 listed.
	// +optional
	ToolCount int32 `json:"toolCount,omitempty"`

	// toolsTruncated is true when more tools are exposed than status lists.
	// +optional
	ToolsTruncated bool `json:"toolsTruncated,omitempty"`

	// toolsDigest is a stable digest ("sha256:...") of the exposed tools, their origins
	// and the origins' tool digests; it changes when what the endpoint serves changes.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ToolsDigest string `json:"toolsDigest,omitempty"`

	// resourceCount is the number of exposed resources and resource templates, after
	// spec.resources, computed from the resources the selected Ready servers list in
	// their status (at most 256 each).
	// +optional
	ResourceCount int32 `json:"resourceCount,omitempty"`

	// promptCount is the number of exposed prompts, after spec.prompts, computed from
	// the prompts the selected Ready servers list in their status (at most 256 each).
	// +optional
	PromptCount int32 `json:"promptCount,omitempty"`

	// gatewayPath is the path of the toolset's MCP endpoint on the gateway,
	// /mcp/namespaces/{namespace}/toolsets/{name}.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	GatewayPath string `json:"gatewayPath,omitempty"`
}

// ToolsetServerStatus is one selected server.
type ToolsetServerStatus struct {
	// name is the MCPServer's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// ready is true when the MCPServer is Ready.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// toolCount is the number of the server's tools the toolset exposes.
	// +optional
	ToolCount int32 `json:"toolCount,omitempty"`
}

// ToolsetTool is one exposed tool and its origin.
type ToolsetTool struct {
	// name is the name the toolset exposes the tool under.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Name string `json:"name"`

	// server is the name of the MCPServer the tool comes from.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Server string `json:"server"`

	// tool is the tool's name on its server.
	// +required
	// +kubebuilder:validation:MaxLength=256
	Tool string `json:"tool"`
}

// MCPToolset is one agent-facing MCP endpoint that aggregates the tools of several
// MCPServers of its namespace, with the caller's RBAC deciding, server by server, which
// of them it sees.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mcpts,categories=mcp
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Servers",type=string,JSONPath=`.status.readyServers`
// +kubebuilder:printcolumn:name="Tools",type=integer,JSONPath=`.status.toolCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Resources",type=integer,JSONPath=`.status.resourceCount`,priority=1
// +kubebuilder:printcolumn:name="Prompts",type=integer,JSONPath=`.status.promptCount`,priority=1
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.status.gatewayPath`,priority=1
type MCPToolset struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says which servers' tools the toolset exposes.
	// +required
	Spec MCPToolsetSpec `json:"spec"`

	// status is what the operator observed.
	// +optional
	Status MCPToolsetStatus `json:"status,omitempty"`
}

// MCPToolsetList is a list of MCPToolsets.
// +kubebuilder:object:root=true
type MCPToolsetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MCPToolset `json:"items"`
}
