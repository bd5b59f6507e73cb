package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MCPIdentityProviderSpec says which OpenID issuer's tokens the gateway and the catalogue
// accept, and how a token maps to the Kubernetes user and groups that RBAC decides on. The
// shape follows the JWT authenticators of Kubernetes' AuthenticationConfiguration
// (apiserver.config.k8s.io).
// +kubebuilder:validation:XValidation:rule="!has(self.tokenExchange) || self.tokenExchange.tokenURL.lowerAscii().startsWith('https://') || (has(self.issuer.allowInsecureHTTP) && self.issuer.allowInsecureHTTP)",fieldPath=".tokenExchange.tokenURL",message="tokenURL must use https; set issuer.allowInsecureHTTP: true to allow plain http to a loopback token endpoint"
type MCPIdentityProviderSpec struct {
	// issuer is the OpenID issuer whose tokens are accepted.
	// +required
	Issuer IdentityIssuer `json:"issuer"`

	// claimMappings say how a token's claims become the Kubernetes username and groups
	// asked about in SubjectAccessReviews.
	// +required
	ClaimMappings ClaimMappings `json:"claimMappings"`

	// claimValidationRules are CEL expressions over `claims` (a map of the token's
	// claims) that must all evaluate to true for a token to be accepted, at most 16.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ClaimValidationRules []ClaimValidationRule `json:"claimValidationRules,omitempty"`

	// advertise lists the issuer as an authorization server in the OAuth protected
	// resource metadata (RFC 9728) of every gateway endpoint, so MCP clients know where
	// to log in.
	// +optional
	Advertise bool `json:"advertise,omitempty"`

	// introspection, when set, also accepts opaque access tokens the issuer's
	// introspection endpoint (RFC 7662) says are active, asked with these client
	// credentials.
	// +optional
	Introspection *TokenIntrospection `json:"introspection,omitempty"`

	// tokenExchange, when set, lets MCPServers in the namespaces it lists have the tokens
	// of this provider's callers exchanged at the issuer's own token endpoint: for a token
	// of the caller's own (spec.http.auth.oauth2.tokenExchange, RFC 8693) or for an
	// identity assertion grant (spec.http.auth.oauth2.enterpriseManaged, SEP-990). A
	// caller's token is sent only there, and only for callers this provider vouched for;
	// no MCPServer can name another endpoint.
	// +optional
	TokenExchange *IdentityTokenExchange `json:"tokenExchange,omitempty"`

	// perUser, when set, lets this provider's callers (persons) authorize MCPServers in
	// the namespaces it lists at their own accounts of the servers' authorization
	// servers (spec.http.auth.oauth2.perUser): a person's token is requested only from
	// an authorization server listed here and sent only to a server whose URL is listed
	// here. No MCPServer can name another.
	// +optional
	PerUser *IdentityPerUser `json:"perUser,omitempty"`
}

// IdentityPerUser is where, and for which namespaces, the persons a provider vouches for
// may link their own accounts of an MCP server's authorization server
// (spec.http.auth.oauth2.perUser of an MCPServer).
type IdentityPerUser struct {
	// namespaces are the namespaces whose perUser MCPServers may name this provider, 1
	// to 256 names; "*" (alone) means every namespace.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	// +kubebuilder:validation:XValidation:rule="!self.exists(n, n == '*') || size(self) == 1",message="\"*\" (every namespace) must be the only entry of namespaces"
	Namespaces []string `json:"namespaces"`

	// authorizationServers are the issuer identifiers (RFC 8414) of the authorization
	// servers where persons may authorize, 1 to 32: a perUser MCPServer's authorization
	// server (pinned by its issuer, or named first by its protected resource metadata)
	// must be one of them, compared exactly (a trailing slash aside), or no person is
	// sent there and no code is exchanged.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.all(s, s.matches('^(?i)https?://[^/?#@]+(/[^?#]*)?$') && isURL(s))",message="authorizationServers must be absolute http:// or https:// issuer identifiers with a host and no user information, query or fragment"
	AuthorizationServers []string `json:"authorizationServers"`

	// resources are the MCP server URLs persons' tokens may be sent to, 1 to 32: a
	// perUser MCPServer's url (without its query, lower-case scheme and host, no
	// default port) must equal one of them or lie beneath one of them at a path
	// boundary (https://mcp.example.com covers https://mcp.example.com/v1/mcp, not
	// https://mcp.example.com.evil.test).
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.all(s, s.matches('^(?i)https?://[^/?#@]+(/[^?#]*)?$') && isURL(s))",message="resources must be absolute http:// or https:// URLs with a host and no user information, query or fragment"
	Resources []string `json:"resources"`

	// scopes, when set, are the only scopes a perUser MCPServer naming this provider
	// may request, at most 32; a server that asks for another is refused at admission
	// and, should one exist, sends nobody to authorize (Stalled, reason
	// ScopeNotAllowed). Discovered scopes outside them are not requested.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[\x21\x23-\x5B\x5D-\x7E]+$`
	Scopes []string `json:"scopes,omitempty"`

	// dynamicClientRegistration lets a perUser MCPServer naming this provider leave
	// out its clientID: Switchboard then registers itself as a public client (RFC 7591,
	// PKCE, redirect URI <gateway public URL>/oauth2/callback) at the registration
	// endpoint the server's authorization server advertises, one of
	// authorizationServers. Off, such a server is Stalled with reason
	// ClientRegistrationNotAllowed.
	// +optional
	DynamicClientRegistration bool `json:"dynamicClientRegistration,omitempty"`
}

// IdentityTokenExchange is where, and for which namespaces, the gateway exchanges the
// tokens of a provider's callers. The tokenURL rules sit on the struct so that a
// rejection never echoes the URL (its query could hold a secret).
// +kubebuilder:validation:XValidation:rule="self.tokenURL.matches('^(?i)https?://[^/?#@]+([/?][^#]*)?$') && isURL(self.tokenURL)",fieldPath=".tokenURL",message="tokenURL must be an absolute https:// URL (http:// only with the issuer's allowInsecureHTTP) with a host and no user information or fragment"
// +kubebuilder:validation:XValidation:rule="!self.tokenURL.lowerAscii().startsWith('http://') || self.tokenURL.lowerAscii().matches('^http://(127\\\\.0\\\\.0\\\\.1|\\\\[::1\\\\]|localhost)(:[0-9]+)?([/?][^#]*)?$')",fieldPath=".tokenURL",message="a plain http tokenURL must name a loopback host: 127.0.0.1, [::1] or localhost"
type IdentityTokenExchange struct {
	// tokenURL is the issuer's own token endpoint (RFC 8693 token exchange), where the
	// tokens of this provider's callers are exchanged. It must use https; plain http is
	// accepted only to a loopback host, and only when spec.issuer.allowInsecureHTTP is
	// set.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	TokenURL string `json:"tokenURL"`

	// clientID is the gateway's client at the token endpoint.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	ClientID string `json:"clientID"`

	// clientSecret authenticates the gateway's client at the token endpoint
	// (client_secret_basic), read from a Secret in the manager's cluster resource
	// namespace. Without it client_id is sent alone.
	// +optional
	ClientSecret *ClusterSecretKeySource `json:"clientSecret,omitempty"`

	// namespaces are the namespaces whose MCPServers may have this provider's callers'
	// tokens exchanged, 1 to 256 names; "*" (alone) means every namespace. An MCPServer
	// in a namespace not listed is refused at admission and, should one exist, never
	// gets a caller's token exchanged.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	// +kubebuilder:validation:XValidation:rule="!self.exists(n, n == '*') || size(self) == 1",message="\"*\" (every namespace) must be the only entry of namespaces"
	Namespaces []string `json:"namespaces"`

	// authorizationServers are the issuer identifiers (RFC 8414) of the authorization
	// servers an identity assertion grant (ID-JAG) may be requested for, at most 32: an
	// enterpriseManaged MCPServer's authorization server, as its protected resource
	// metadata names it, must be one of them or no grant is requested. Without it no
	// enterpriseManaged MCPServer may use the provider.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.all(s, s.matches('^(?i)https?://[^/?#@]+(/[^?#]*)?$') && isURL(s))",message="authorizationServers must be absolute http:// or https:// issuer identifiers with a host and no user information, query or fragment"
	AuthorizationServers []string `json:"authorizationServers,omitempty"`

	// audiences are the RFC 8693 audiences a tokenExchange MCPServer naming this provider
	// may request (its tokenExchange.audience), at most 32. An MCPServer that asks for
	// another audience is refused at admission and, should one exist, never gets a
	// caller's token exchanged (Stalled, reason AudienceNotAllowed): the author of an
	// MCPServer cannot have callers' tokens issued for another service. Without it a
	// server may request no audience. The resource requested is always the server's own
	// URL.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=2048
	Audiences []string `json:"audiences,omitempty"`

	// scopes are the scopes an MCPServer naming this provider may request, at most 32.
	// Every scope of a tokenExchange MCPServer must be one of them (without it, such a
	// server may request none). When set, every configured scope of an enterpriseManaged
	// MCPServer must be one of them too, and scopes discovered from the server's challenge
	// or metadata that are not listed are dropped from its requests; without it an
	// enterpriseManaged server's scopes are its own. A server that asks for a scope not
	// listed is refused at admission and, should one exist, gets no caller's token
	// exchanged (Stalled, reason ScopeNotAllowed).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[\x21\x23-\x5B\x5D-\x7E]+$`
	Scopes []string `json:"scopes,omitempty"`
}

// IdentityIssuer is an OpenID issuer and what its tokens must be issued for. The url rules
// sit on the struct so that a rejection never echoes the url (its query could hold a
// secret).
// +kubebuilder:validation:XValidation:rule="self.url.matches('^(?i)https?://[^/?#@]+(/[^?#]*)?$') && isURL(self.url)",fieldPath=".url",message="url must be an absolute https:// URL (http:// only with allowInsecureHTTP) with a host and no user information, query or fragment"
// +kubebuilder:validation:XValidation:rule="self.url.lowerAscii().startsWith('https://') || (has(self.allowInsecureHTTP) && self.allowInsecureHTTP && self.url.lowerAscii().startsWith('http://'))",fieldPath=".url",message="url must use https; set allowInsecureHTTP: true to allow plain http to a loopback issuer"
// +kubebuilder:validation:XValidation:rule="!self.url.lowerAscii().startsWith('http://') || self.url.lowerAscii().matches('^http://(127\\\\.0\\\\.0\\\\.1|\\\\[::1\\\\]|localhost)(:[0-9]+)?(/[^?#]*)?$')",fieldPath=".url",message="a plain http issuer url must name a loopback host: 127.0.0.1, [::1] or localhost"
// +kubebuilder:validation:XValidation:rule="!has(self.discoveryURL) || (self.discoveryURL.matches('^(?i)https?://[^/?#@]+(/[^?#]*)?$') && isURL(self.discoveryURL))",fieldPath=".discoveryURL",message="discoveryURL must be an absolute https:// URL (http:// only with allowInsecureHTTP) with a host and no user information, query or fragment"
// +kubebuilder:validation:XValidation:rule="!has(self.discoveryURL) || self.discoveryURL.lowerAscii().startsWith('https://') || (has(self.allowInsecureHTTP) && self.allowInsecureHTTP && self.discoveryURL.lowerAscii().matches('^http://(127\\\\.0\\\\.0\\\\.1|\\\\[::1\\\\]|localhost)(:[0-9]+)?(/[^?#]*)?$'))",fieldPath=".discoveryURL",message="discoveryURL must use https; set allowInsecureHTTP: true to allow plain http to a loopback host: 127.0.0.1, [::1] or localhost"
type IdentityIssuer struct {
	// url is the issuer URL, exactly as tokens name it in iss and as its discovery
	// document (url + /.well-known/openid-configuration) names it in issuer. It must use
	// https, unless allowInsecureHTTP is set and the host is a loopback address.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`

	// discoveryURL, when set, is where the issuer's OpenID discovery document is fetched
	// from instead of url + /.well-known/openid-configuration, as in the Kubernetes API
	// server's structured authentication configuration: for an issuer whose discovery
	// document is served at another address (an in-cluster Service in front of it, say)
	// or by another party. The document must still name url exactly as its issuer, and
	// its jwks_uri is then used as it says. Same scheme rules as url.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	DiscoveryURL string `json:"discoveryURL,omitempty"`

	// audiences are the audiences a token must name at least one of in aud, typically
	// the gateway's public URL. 1 to 16, unique.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=2048
	Audiences []string `json:"audiences"`

	// certificateAuthority, when set, is the only certificate authority trusted for the
	// issuer's endpoints (discovery, key set, introspection) instead of the system roots.
	// Its Secret lives in the manager's cluster resource namespace
	// (--cluster-resource-namespace, by default the manager's own).
	// +optional
	CertificateAuthority *ClusterSecretKeySource `json:"certificateAuthority,omitempty"`

	// allowInsecureHTTP permits a plain http:// issuer url, and then only to a loopback
	// host (127.0.0.1, [::1] or localhost). For development and tests only.
	// +optional
	AllowInsecureHTTP bool `json:"allowInsecureHTTP,omitempty"`
}

// ClusterSecretKeySource reads a value from a Secret in the manager's cluster resource
// namespace (--cluster-resource-namespace), as cert-manager does for ClusterIssuers.
type ClusterSecretKeySource struct {
	// secretKeyRef selects a key of a Secret in the manager's cluster resource namespace.
	// +required
	SecretKeyRef ClusterSecretKeyReference `json:"secretKeyRef"`
}

// ClusterSecretKeyReference selects one key of a Secret in the manager's cluster
// resource namespace (--cluster-resource-namespace, by default the manager's own).
type ClusterSecretKeyReference struct {
	// name is the name of the Secret in the manager's cluster resource namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="secret name must be a DNS subdomain: lower-case letters, digits, '-' and '.'"
	Name string `json:"name"`

	// key is the key within the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",message="secret key must consist of letters, digits, '-', '_' and '.'"
	Key string `json:"key"`
}

// ClaimMappings map a token's claims to a Kubernetes user and groups.
type ClaimMappings struct {
	// username maps one claim, with a required prefix, to the Kubernetes username.
	// +required
	Username UsernameClaimMapping `json:"username"`

	// groups maps one claim (a string or a list of strings) to Kubernetes groups, each
	// with the prefix. Without it a token maps to no groups.
	// +optional
	Groups *GroupsClaimMapping `json:"groups,omitempty"`
}

// UsernameClaimMapping maps a claim to the username; the prefix keeps an issuer's users
// apart from Kubernetes' own and from other issuers'.
type UsernameClaimMapping struct {
	// claim is the name of the claim whose string value is the username, such as email
	// or sub.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Claim string `json:"claim"`

	// prefix is put before the claim's value to form the username, such as "oidc:". It
	// is required (an issuer must never be able to name a Kubernetes user such as a
	// ServiceAccount) and must not start with "system:".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="!self.lowerAscii().startsWith('system:')",message="prefix must not start with \"system:\": that namespace belongs to Kubernetes' own users and groups"
	Prefix string `json:"prefix"`
}

// GroupsClaimMapping maps a claim to groups.
type GroupsClaimMapping struct {
	// claim is the name of the claim that holds the groups, such as groups.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Claim string `json:"claim"`

	// prefix is put before every group, such as "oidc:". It is required and must not
	// start with "system:".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="!self.lowerAscii().startsWith('system:')",message="prefix must not start with \"system:\": that namespace belongs to Kubernetes' own users and groups"
	Prefix string `json:"prefix"`
}

// ClaimValidationRule is one CEL expression a token's claims must satisfy.
type ClaimValidationRule struct {
	// expression is a CEL expression over `claims` that must evaluate to true, such as
	// "claims.email_verified == true". An expression that does not compile makes the
	// provider Stalled with reason InvalidClaimValidationRule.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.trim().size() > 0",message="expression must not be blank"
	Expression string `json:"expression"`

	// message is what a refused caller is told when the expression is false.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Message string `json:"message,omitempty"`
}

// TokenIntrospection are the client credentials the gateway asks the issuer's
// introspection endpoint (RFC 7662) with.
type TokenIntrospection struct {
	// clientID is the OAuth client the gateway authenticates as at the introspection
	// endpoint.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	ClientID string `json:"clientID"`

	// clientSecret reads the client's secret from a Secret in the manager's cluster
	// resource namespace.
	// +required
	ClientSecret ClusterSecretKeySource `json:"clientSecret"`

	// tokenPrefix says which opaque tokens this issuer introspects: those that begin with
	// it (such as "corp_at_"). An opaque token goes to the one provider whose tokenPrefix
	// is the longest that begins it or, when none does, to the one provider that
	// introspects without a tokenPrefix; it is never sent to a second introspection
	// endpoint, and one that no provider takes is refused without a request. Two
	// providers with the same tokenPrefix, or two without one, conflict: the younger is
	// not applied (Ready=False, reason TokenPrefixConflict).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[!-~]+$')",message="tokenPrefix must be printable ASCII without spaces, as bearer tokens are"
	TokenPrefix string `json:"tokenPrefix,omitempty"`
}

// MCPIdentityProviderStatus is what the operator observed of the provider.
type MCPIdentityProviderStatus struct {
	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions describe the provider's state. Ready is True once the issuer's discovery
	// document and key set were fetched; Reconciling and Stalled are present only while
	// True. A provider whose issuer, username or groups prefix, or introspection
	// tokenPrefix conflicts with an older provider's is not applied: Ready is False with
	// reason IssuerConflict, PrefixConflict or TokenPrefixConflict and names the older
	// one, until that one is changed or deleted.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MCPIdentityProvider is an OpenID issuer whose tokens the gateway and the catalogue
// accept, with how a token maps to the Kubernetes user and groups RBAC decides on.
// Cluster-scoped: platform admins write it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mcpidp,categories=mcp
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Issuer",type=string,JSONPath=`.spec.issuer.url`
// +kubebuilder:printcolumn:name="Advertised",type=boolean,JSONPath=`.spec.advertise`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Audiences",type=string,JSONPath=`.spec.issuer.audiences`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
type MCPIdentityProvider struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says which issuer's tokens are accepted and how they map to Kubernetes
	// identities.
	// +required
	Spec MCPIdentityProviderSpec `json:"spec"`

	// status is what the operator observed.
	// +optional
	Status MCPIdentityProviderStatus `json:"status,omitempty"`
}

// MCPIdentityProviderList is a list of MCPIdentityProviders.
// +kubebuilder:object:root=true
type MCPIdentityProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MCPIdentityProvider `json:"items"`
}
