package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RedirectPolicyType says which HTTP redirects a connection may follow.
// +kubebuilder:validation:Enum=Deny;SameOrigin;AllowedDestinations
type RedirectPolicyType string

const (
	// RedirectDeny follows no redirect: a redirect response fails the request.
	RedirectDeny RedirectPolicyType = "Deny"
	// RedirectSameOrigin follows redirects to the same scheme, host and port only.
	RedirectSameOrigin RedirectPolicyType = "SameOrigin"
	// RedirectAllowedDestinations follows redirects to any destination the egress rules
	// allow. Configured headers are still never sent to another origin.
	RedirectAllowedDestinations RedirectPolicyType = "AllowedDestinations"
)

// MCPEgressPolicySpec says where the connections of the selected MCPServers may go.
//
// Semantics follow NetworkPolicy: once any policy selects a server, every connection of
// that server is denied unless at least one egress rule of a selecting policy allows it
// (the union of allows). Link-local and cloud metadata addresses are always denied.
type MCPEgressPolicySpec struct {
	// serverSelector selects the MCPServers in this namespace the policy applies to, by
	// label. An empty selector selects every MCPServer in the namespace.
	// +optional
	ServerSelector metav1.LabelSelector `json:"serverSelector,omitempty"`

	// egress lists the rules that allow connections. A connection is allowed when any
	// rule allows it. An empty list allows nothing: the selected servers are isolated.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Egress []EgressRule `json:"egress,omitempty"`

	// redirects says which HTTP redirects the selected servers' connections may follow.
	// +optional
	Redirects *RedirectRules `json:"redirects,omitempty"`
}

// EgressRule allows connections to any of its peers on any of its ports.
type EgressRule struct {
	// to lists the destinations this rule allows. An empty list matches no destination.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	To []EgressPeer `json:"to,omitempty"`

	// ports lists the TCP ports this rule allows. An empty list allows every port.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Ports []EgressPort `json:"ports,omitempty"`
}

// EgressPeer is one allowed destination: a host name pattern or an IP block.
// +kubebuilder:validation:XValidation:rule="has(self.host) != has(self.ipBlock)",message="an egress peer must set exactly one of host or ipBlock"
type EgressPeer struct {
	// host is a DNS name ("api.example.com") or a leading wildcard that matches exactly
	// one more label ("*.example.com" matches "api.example.com", not "example.com" nor
	// "a.b.example.com"), compared case-insensitively with the URL's host. The addresses
	// the name resolves to at connect time are allowed too. The connector enforces host
	// peers; the NetworkPolicy rendered for stdio pods cannot express them.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^(\\\\*\\\\.)?[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\\\\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$')",message="host must be a DNS name such as api.example.com, optionally with one leading '*.' wildcard label such as *.example.com"
	Host string `json:"host,omitempty"`

	// ipBlock allows the addresses of a CIDR, minus its exceptions, matched against the
	// address the connection actually dials.
	// +optional
	IPBlock *IPBlock `json:"ipBlock,omitempty"`
}

// IPBlock is a CIDR with optional exceptions, as in NetworkPolicy.
// +kubebuilder:validation:XValidation:rule="!isCIDR(self.cidr) || !has(self.except) || self.except.all(e, !isCIDR(e) || (cidr(e).ip().family() == cidr(self.cidr).ip().family() && cidr(self.cidr).containsCIDR(e)))",message="every except entry must lie inside cidr"
type IPBlock struct {
	// cidr is an IPv4 or IPv6 CIDR such as 10.20.0.0/16 or 2001:db8::/32.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="cidr must be a valid IPv4 or IPv6 CIDR such as 10.0.0.0/8"
	CIDR string `json:"cidr"`

	// except lists CIDRs inside cidr that are not allowed.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.all(e, isCIDR(e))",message="every except entry must be a valid CIDR"
	Except []string `json:"except,omitempty"`
}

// EgressPort is one allowed TCP port.
type EgressPort struct {
	// port is a TCP port number, 1 to 65535.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// RedirectRules governs HTTP redirects.
type RedirectRules struct {
	// policy is Deny (follow no redirect), SameOrigin (only to the same scheme, host and
	// port) or AllowedDestinations (to any destination the egress rules allow). https is
	// never downgraded to http, and configured headers never go to another origin.
	// +optional
	// +kubebuilder:default=Deny
	Policy RedirectPolicyType `json:"policy,omitempty"`

	// maxHops bounds how many redirects one request follows, 0 to 10.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	MaxHops *int32 `json:"maxHops,omitempty"`
}

// MCPEgressPolicyStatus is what the operator observed of the policy.
type MCPEgressPolicyStatus struct {
	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions describe the policy's state. Accepted is True once its rules are enforced.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// selectedServers is the number of MCPServers the policy selects.
	// +optional
	SelectedServers int32 `json:"selectedServers,omitempty"`
}

// MCPEgressPolicy says where the connections of the MCPServers it selects may go and
// which redirects they may follow.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mcpegress,categories=mcp
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Selected",type=integer,JSONPath=`.status.selectedServers`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MCPEgressPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the policy's rules.
	// +required
	Spec MCPEgressPolicySpec `json:"spec"`

	// status is what the operator observed.
	// +optional
	Status MCPEgressPolicyStatus `json:"status,omitempty"`
}

// MCPEgressPolicyList is a list of MCPEgressPolicies.
// +kubebuilder:object:root=true
type MCPEgressPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MCPEgressPolicy `json:"items"`
}
