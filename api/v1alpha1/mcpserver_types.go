package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Transport names the wire protocol of a connection.
// +kubebuilder:validation:Enum=StreamableHTTP;SSE;Stdio
type Transport string

const (
	// TransportStreamableHTTP is the Streamable HTTP transport (MCP 2025-03-26 and later).
	TransportStreamableHTTP Transport = "StreamableHTTP"
	// TransportSSE is the legacy HTTP+SSE transport (MCP 2024-11-05).
	TransportSSE Transport = "SSE"
	// TransportStdio is a stdio server run by the operator behind its bridge.
	TransportStdio Transport = "Stdio"
)

// HTTPProtocol selects the transport used for a remote server.
// +kubebuilder:validation:Enum=Auto;StreamableHTTP;SSE
type HTTPProtocol string

const (
	// HTTPProtocolAuto tries Streamable HTTP first and falls back to legacy HTTP+SSE, as
	// the MCP specification's backward-compatibility procedure describes.
	HTTPProtocolAuto HTTPProtocol = "Auto"
	// HTTPProtocolStreamableHTTP uses Streamable HTTP only.
	HTTPProtocolStreamableHTTP HTTPProtocol = "StreamableHTTP"
	// HTTPProtocolSSE uses the legacy HTTP+SSE transport only.
	HTTPProtocolSSE HTTPProtocol = "SSE"
)

// MCPServerSpec describes one MCP server and how the operator connects to it.
// +kubebuilder:validation:XValidation:rule="has(self.http) != has(self.stdio)",message="exactly one of spec.http or spec.stdio must be set"
type MCPServerSpec struct {
	// description says what the server is for. It is shown in the catalogue.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`

	// http connects to a remote server over Streamable HTTP or legacy HTTP+SSE.
	// Exactly one of http or stdio is set.
	// +optional
	HTTP *HTTPServerSpec `json:"http,omitempty"`

	// stdio runs a stdio server from a container image behind the Switchboard bridge.
	// Exactly one of http or stdio is set.
	// +optional
	Stdio *StdioServerSpec `json:"stdio,omitempty"`

	// timeout bounds every MCP request to the server, between 1s and 5m.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('5m')",message="timeout must be between 1s and 5m"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// healthCheck sets how often the connection is probed and how many failed probes in a
	// row mark it down.
	// +optional
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`

	// tools filters which of the server's tools are published in status and in the
	// catalogue, and can pin them to a reviewed digest. Without it every tool is
	// published and nothing is pinned.
	// +optional
	Tools *ToolFilter `json:"tools,omitempty"`

	// gateway bounds the sessions and request rate agents get through the Switchboard
	// gateway at /mcp/namespaces/{namespace}/servers/{name}.
	// +optional
	Gateway *GatewaySpec `json:"gateway,omitempty"`

	// suspend, when true, closes the connection and stops reconciling until it is false
	// again.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// HTTPServerSpec describes a remote MCP server reached over HTTP.
//
// The url rules live on this object rather than on the field so that a rejection never
// echoes the URL back: it may carry credentials in its user information or query.
// +kubebuilder:validation:XValidation:rule="self.url.matches('^(?i)https?://[^/?#]+([/?][^#]*)?$')",fieldPath=".url",message="url must be an absolute http:// or https:// URL with a host and no fragment"
// +kubebuilder:validation:XValidation:rule="!self.url.matches('^[^/]*//[^/?#]*@')",fieldPath=".url",message="url must not contain user information (user:password@); put credentials in headers backed by a Secret"
// +kubebuilder:validation:XValidation:rule="!self.url.matches('^(?i)https?://[^/?#]+') || isURL(self.url)",fieldPath=".url",message="url is not a valid URL"
// +kubebuilder:validation:XValidation:rule="self.url.lowerAscii().startsWith('https://') || (has(self.allowInsecureHTTP) && self.allowInsecureHTTP)",message="url must use https; set allowInsecureHTTP: true to allow plain http"
// +kubebuilder:validation:XValidation:rule="!has(self.auth) || !has(self.headers) || !self.headers.exists(h, h.name.lowerAscii() == 'authorization')",message="auth and an Authorization header are mutually exclusive: the OAuth token is sent in the Authorization header"
// +kubebuilder:validation:XValidation:rule="!has(self.auth) || !has(self.auth.oauth2) || !has(self.auth.oauth2.clientCredentials) || !has(self.auth.oauth2.clientCredentials.tokenURL) || size(self.auth.oauth2.clientCredentials.tokenURL) == 0 || self.auth.oauth2.clientCredentials.tokenURL.lowerAscii().startsWith('https://') || (has(self.allowInsecureHTTP) && self.allowInsecureHTTP)",fieldPath=".auth.oauth2.clientCredentials.tokenURL",message="tokenURL must use https; set allowInsecureHTTP: true to allow plain http to a loopback token endpoint"
// +kubebuilder:validation:XValidation:rule="!has(self.auth) || !has(self.auth.oauth2) || !has(self.auth.oauth2.clientCredentials) || !has(self.auth.oauth2.clientCredentials.issuer) || size(self.auth.oauth2.clientCredentials.issuer) == 0 || self.auth.oauth2.clientCredentials.issuer.lowerAscii().startsWith('https://') || (has(self.allowInsecureHTTP) && self.allowInsecureHTTP)",fieldPath=".auth.oauth2.clientCredentials.issuer",message="issuer must use https; set allowInsecureHTTP: true to allow a plain http authorization server"
// +kubebuilder:validation:XValidation:rule="!has(self.auth) || !has(self.auth.oauth2) || !has(self.auth.oauth2.perUser) || !has(self.auth.oauth2.perUser.issuer) || size(self.auth.oauth2.perUser.issuer) == 0 || self.auth.oauth2.perUser.issuer.lowerAscii().startsWith('https://') || (has(self.allowInsecureHTTP) && self.allowInsecureHTTP)",fieldPath=".auth.oauth2.perUser.issuer",message="issuer must use https; set allowInsecureHTTP: true to allow a plain http authorization server"
// +kubebuilder:validation:XValidation:rule="!has(self.auth) || !has(self.auth.oauth2) || !has(self.auth.oauth2.workloadIdentity) || ((!has(self.auth.oauth2.workloadIdentity.tokenURL) || size(self.auth.oauth2.workloadIdentity.tokenURL) == 0 || self.auth.oauth2.workloadIdentity.tokenURL.lowerAscii().startsWith('https://')) && (!has(self.auth.oauth2.workloadIdentity.issuer) || size(self.auth.oauth2.workloadIdentity.issuer) == 0 || self.auth.oauth2.workloadIdentity.issuer.lowerAscii().startsWith('https://'))) || (has(self.allowInsecureHTTP) && self.allowInsecureHTTP)",fieldPath=".auth.oauth2.workloadIdentity",message="workloadIdentity tokenURL and issuer must use https; set allowInsecureHTTP: true to allow plain http to a loopback authorization server"
type HTTPServerSpec struct {
	// url is the absolute http or https URL of the server's MCP endpoint, at most 2048
	// characters, with no user information and no fragment. Its query string is treated
	// as a secret: it never appears in status, Events or logs.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`

	// protocol selects the transport: Auto (Streamable HTTP, falling back to legacy
	// HTTP+SSE), StreamableHTTP or SSE.
	// +optional
	// +kubebuilder:default=Auto
	Protocol HTTPProtocol `json:"protocol,omitempty"`

	// headers are sent with every request to the server's own origin and to no other
	// origin. Values are secrets: they never appear in status, Events or logs. At most
	// 32; names are unique regardless of case.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(h, self.exists_one(o, o.name.lowerAscii() == h.name.lowerAscii()))",message="header names must be unique (compared case-insensitively)"
	Headers []HTTPHeader `json:"headers,omitempty"`

	// tls configures how the server's certificate is verified.
	// +optional
	TLS *TLSConfig `json:"tls,omitempty"`

	// auth obtains credentials for the server at run time instead of sending a fixed
	// header. It cannot be combined with an Authorization header.
	// +optional
	Auth *HTTPAuth `json:"auth,omitempty"`

	// allowInsecureHTTP permits a plain http:// url. Headers are then sent unencrypted.
	// With auth it also permits plain http metadata URLs and a plain http tokenURL or
	// discovered token endpoint on a loopback address; the client credential is never
	// sent over plain http to any other address. (An MCPIdentityProvider's token
	// endpoint follows the provider's own issuer.allowInsecureHTTP.)
	// +optional
	AllowInsecureHTTP bool `json:"allowInsecureHTTP,omitempty"`
}

// HTTPAuth says how the operator authenticates to the server.
// +kubebuilder:validation:XValidation:rule="has(self.oauth2)",message="auth must set oauth2"
type HTTPAuth struct {
	// oauth2 obtains OAuth 2.1 access tokens and sends them as bearer tokens to the
	// server's origin only.
	// +optional
	OAuth2 *OAuth2Auth `json:"oauth2,omitempty"`
}

// OAuth2Auth configures OAuth 2.1 for the server (MCP authorization).
// +kubebuilder:validation:XValidation:rule="has(self.clientCredentials) || has(self.workloadIdentity) || has(self.enterpriseManaged) || has(self.tokenExchange) || has(self.perUser)",message="oauth2 must set one of clientCredentials, workloadIdentity, enterpriseManaged, tokenExchange or perUser"
// +kubebuilder:validation:XValidation:rule="!has(self.perUser) || !(has(self.clientCredentials) || has(self.workloadIdentity) || has(self.enterpriseManaged) || has(self.tokenExchange))",message="perUser cannot be combined with clientCredentials, workloadIdentity, enterpriseManaged or tokenExchange: each person's own token is the only credential the server gets"
// +kubebuilder:validation:XValidation:rule="!(has(self.clientCredentials) && has(self.workloadIdentity))",message="clientCredentials and workloadIdentity are mutually exclusive: the operator authenticates with one credential"
// +kubebuilder:validation:XValidation:rule="!(has(self.enterpriseManaged) && has(self.tokenExchange))",message="enterpriseManaged and tokenExchange are mutually exclusive: a caller's token is exchanged one way"
type OAuth2Auth struct {
	// clientCredentials uses the client credentials grant (the MCP authorization
	// extension for machine-to-machine clients, SEP-1046). The token endpoint is
	// discovered from the server's protected resource metadata (RFC 9728) and its
	// authorization server's metadata (RFC 8414, then OpenID discovery) unless tokenURL
	// is set; every metadata and token request goes through the server's egress policy
	// and redirect policy. Tokens are held in memory only and renewed before they
	// expire.
	// +optional
	ClientCredentials *OAuth2ClientCredentials `json:"clientCredentials,omitempty"`

	// workloadIdentity authenticates the operator with a workload JWT instead of a
	// client secret: the JWT-bearer grant (RFC 7523, MCP workload identity federation,
	// SEP-1933) with a ServiceAccount token the operator requests for the server's
	// authorization server, or a JWT another system issues, read from a Secret. Token
	// endpoint and scopes are discovered as for clientCredentials; the authorization
	// server must offer the grant urn:ietf:params:oauth:grant-type:jwt-bearer and trust
	// the JWT's issuer. A refusal (invalid_grant, invalid_scope, unauthorized_client)
	// is the Authenticated reason (InvalidGrant, InsufficientScope, InvalidClient); the
	// same JWT is not presented again for ten minutes, and no other grant is tried.
	// Mutually exclusive with clientCredentials.
	// +optional
	WorkloadIdentity *OAuth2WorkloadIdentity `json:"workloadIdentity,omitempty"`

	// enterpriseManaged gives every caller of the gateway a token of their own
	// (enterprise-managed authorization, SEP-990): the ID token the caller presented to
	// the gateway is exchanged at the enterprise identity provider (an
	// MCPIdentityProvider a cluster admin wrote, named by identityProvider) for an
	// identity assertion grant (ID-JAG, RFC 8693), which the server's authorization
	// server (one the provider lists in tokenExchange.authorizationServers) trades
	// for an access token (JWT-bearer grant, RFC 7523) used for that caller's requests
	// only. With clientCredentials or workloadIdentity beside it, the operator uses that
	// credential for its own session (discovery, probes); without, tools are discovered
	// per caller and status publishes none.
	// +optional
	EnterpriseManaged *OAuth2EnterpriseManaged `json:"enterpriseManaged,omitempty"`

	// tokenExchange gives every caller of the gateway a token of their own: the
	// caller's token is the subject_token of an RFC 8693 token exchange at the token
	// endpoint of the MCPIdentityProvider that vouched for the caller (a cluster admin
	// names it there, in tokenExchange), and the token issued is used for that caller's
	// requests only.
	// Mutually exclusive with enterpriseManaged; clientCredentials or workloadIdentity
	// beside it is the operator's own credential, as for enterpriseManaged.
	// +optional
	TokenExchange *OAuth2TokenExchange `json:"tokenExchange,omitempty"`

	// perUser has each person who calls the server through the gateway authorize
	// Switchboard at the server's own authorization server (the OAuth authorization
	// code flow with PKCE), once, in their browser: a caller without a grant gets a
	// URL elicitation instead of a failure; the tokens issued are stored encrypted per
	// person and server and sent for that person's requests only. The authorization
	// server and the server's URL must both be listed by the MCPIdentityProvider named
	// by identityProvider (spec.perUser, a cluster admin's), which vouches for the
	// persons; a Kubernetes ServiceAccount caller is refused, with a message naming a
	// workload credential instead. The redirect URI to register at the authorization
	// server is <gateway public URL>/oauth2/callback. Mutually exclusive with every
	// other mode.
	// +optional
	PerUser *OAuth2PerUser `json:"perUser,omitempty"`
}

// OAuth2PerUser configures each person's own authorization at the server's
// authorization server (OAuth 2.1 authorization code with PKCE, RFC 7636).
//
// The issuer rule lives on this object so that a rejection never echoes the issuer back.
// +kubebuilder:validation:XValidation:rule="!has(self.issuer) || size(self.issuer) == 0 || (self.issuer.matches('^(?i)https?://[^/?#@]+(/[^?#]*)?$') && isURL(self.issuer))",fieldPath=".issuer",message="issuer must be an absolute http:// or https:// URL with no user information, query or fragment"
// +kubebuilder:validation:XValidation:rule="!has(self.clientSecret) || (has(self.clientID) && size(self.clientID) > 0)",fieldPath=".clientSecret",message="clientSecret needs the clientID it belongs to; without a clientID a client is registered dynamically, and it has no secret of yours"
type OAuth2PerUser struct {
	// identityProvider is the name of the MCPIdentityProvider (cluster-scoped, written
	// by a cluster admin) whose callers may authorize this server, and whose
	// spec.perUser must list the MCPServer's namespace, the server's authorization
	// server (authorizationServers) and the server's URL (resources): a person's token
	// is obtained only from, and sent only to, places a cluster admin named. Callers
	// another provider vouched for, and Kubernetes ServiceAccounts, are refused.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="identityProvider must be the name of an MCPIdentityProvider: lower-case letters, digits, '-' and '.'"
	IdentityProvider string `json:"identityProvider"`

	// issuer pins the server's authorization server: the issuer identifier of its RFC
	// 8414 metadata. Empty discovers it from the server's protected resource metadata
	// (RFC 9728, its first authorization server). Either way it must be one of the
	// identity provider's perUser.authorizationServers, compared exactly (a trailing
	// slash aside). It must use https unless allowInsecureHTTP is set.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Issuer string `json:"issuer,omitempty"`

	// clientID is Switchboard's client at the authorization server, registered with the
	// redirect URI <gateway public URL>/oauth2/callback. Empty registers one
	// dynamically (RFC 7591, a public client using PKCE) at the authorization server's
	// registration_endpoint, when the identity provider's
	// spec.perUser.dynamicClientRegistration allows it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ClientID string `json:"clientID,omitempty"`

	// clientSecret authenticates the client at the token endpoint
	// (client_secret_basic), read from a Secret in the MCPServer's namespace. Without it
	// the client is public and PKCE alone binds the code to the flow.
	// +optional
	ClientSecret *SecretKeySource `json:"clientSecret,omitempty"`

	// scopes are requested in every person's authorization. Empty requests the
	// scopes_supported of the server's protected resource metadata, else none. When the
	// identity provider lists perUser.scopes, each must be one of them.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[\x21\x23-\x5B\x5D-\x7E]+$`
	Scopes []string `json:"scopes,omitempty"`
}

// OAuth2WorkloadIdentity is a workload JWT the operator presents as a JWT-bearer
// assertion (RFC 7523) instead of a client secret.
// +kubebuilder:validation:XValidation:rule="has(self.serviceAccountToken) != has(self.tokenFrom)",message="exactly one of serviceAccountToken or tokenFrom must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.issuer) || size(self.issuer) == 0 || (self.issuer.matches('^(?i)https?://[^/?#@]+(/[^?#]*)?$') && isURL(self.issuer))",fieldPath=".issuer",message="issuer must be an absolute http:// or https:// URL with no user information, query or fragment"
type OAuth2WorkloadIdentity struct {
	// serviceAccountToken has the operator request a token of a ServiceAccount in the
	// MCPServer's namespace through the TokenRequest API, for the authorization server,
	// and request a new one before it expires. Creating the MCPServer needs permission
	// to create tokens of that ServiceAccount (serviceaccounts/token).
	// +optional
	ServiceAccountToken *ServiceAccountTokenSource `json:"serviceAccountToken,omitempty"`

	// tokenFrom reads a workload JWT another system issues (and keeps current) from a
	// Secret in the MCPServer's namespace. It is read whenever a token is due, so a
	// rotated JWT is used without a new session. Its audience is the JWT's own.
	// +optional
	TokenFrom *SecretKeySource `json:"tokenFrom,omitempty"`

	// clientID is sent as client_id with the grant when the authorization server
	// expects one.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ClientID string `json:"clientID,omitempty"`

	// scopes are requested with every token; empty discovers them as for
	// clientCredentials.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[\x21\x23-\x5B\x5D-\x7E]+$`
	Scopes []string `json:"scopes,omitempty"`

	// tokenURL is the token endpoint. Empty discovers it. It must use https unless
	// allowInsecureHTTP is set, and even then plain http is used only to a loopback
	// address.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || (self.matches('^(?i)https?://[^/?#@]+([/?][^#]*)?$') && isURL(self))",message="tokenURL must be an absolute http:// or https:// URL with no user information and no fragment"
	TokenURL string `json:"tokenURL,omitempty"`

	// issuer pins the authorization server the assertion may be sent to, as for
	// clientCredentials.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Issuer string `json:"issuer,omitempty"`
}

// ServiceAccountTokenSource is a ServiceAccount token the operator requests.
type ServiceAccountTokenSource struct {
	// serviceAccountName is a ServiceAccount in the MCPServer's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="serviceAccountName must be a DNS subdomain: lower-case letters, digits, '-' and '.'"
	ServiceAccountName string `json:"serviceAccountName"`

	// audience is the token's audience. Empty means the authorization server's issuer
	// identifier (the token endpoint when it is configured and no issuer is pinned).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Audience string `json:"audience,omitempty"`

	// expirationSeconds is the token's requested lifetime; the operator requests a new
	// one when four fifths of it have passed. Default 600, the API server's minimum.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=600
	// +kubebuilder:validation:Maximum=86400
	ExpirationSeconds int64 `json:"expirationSeconds,omitempty"`
}

// OAuth2EnterpriseManaged configures enterprise-managed authorization (SEP-990).
type OAuth2EnterpriseManaged struct {
	// identityProvider is the name of the MCPIdentityProvider (cluster-scoped, written
	// by a cluster admin) whose tokenExchange says where the caller's ID token is
	// exchanged for an identity assertion grant. Only callers that provider vouched for
	// are served; its tokenExchange.namespaces must list the MCPServer's namespace, and
	// its tokenExchange.authorizationServers must list the server's authorization server
	// (as the server's protected resource metadata names it).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="identityProvider must be the name of an MCPIdentityProvider: lower-case letters, digits, '-' and '.'"
	IdentityProvider string `json:"identityProvider"`

	// clientID is this client's identifier at the server's authorization server.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	ClientID string `json:"clientID"`

	// clientSecret authenticates this client to the server's authorization server
	// (client_secret_basic). Empty sends client_id alone.
	// +optional
	ClientSecret *SecretKeySource `json:"clientSecret,omitempty"`

	// scopes are requested with every caller's token; empty discovers them as for
	// clientCredentials. When the identity provider lists tokenExchange.scopes, each
	// must be one of them, and discovered scopes it does not list are not requested.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[\x21\x23-\x5B\x5D-\x7E]+$`
	Scopes []string `json:"scopes,omitempty"`
}

// OAuth2TokenExchange configures an RFC 8693 token exchange for every caller. The token
// is always requested for the server's own URL (resource, RFC 8707), so it is asked for
// the server it is sent to; the audience and scopes are only those the identity
// provider's tokenExchange lists.
type OAuth2TokenExchange struct {
	// identityProvider is the name of the MCPIdentityProvider (cluster-scoped, written
	// by a cluster admin) whose tokenExchange says where callers' tokens are exchanged
	// and with which client. Only callers that provider vouched for are served; a
	// Kubernetes (ServiceAccount) caller's token is never exchanged. The provider's
	// tokenExchange.namespaces must list the MCPServer's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="identityProvider must be the name of an MCPIdentityProvider: lower-case letters, digits, '-' and '.'"
	IdentityProvider string `json:"identityProvider"`

	// audience is the RFC 8693 audience of the token requested. It must be one of the
	// identity provider's tokenExchange.audiences; empty requests none. The resource
	// requested is always the server's own URL (without its query).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Audience string `json:"audience,omitempty"`

	// scopes are requested with every caller's token. Each must be one of the identity
	// provider's tokenExchange.scopes.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[\x21\x23-\x5B\x5D-\x7E]+$`
	Scopes []string `json:"scopes,omitempty"`

	// requestedTokenType is the RFC 8693 token type requested; the token service must
	// issue exactly this type.
	// +optional
	// +kubebuilder:default="urn:ietf:params:oauth:token-type:access_token"
	// +kubebuilder:validation:Enum="urn:ietf:params:oauth:token-type:access_token";"urn:ietf:params:oauth:token-type:jwt"
	RequestedTokenType string `json:"requestedTokenType,omitempty"`
}

// OAuth2ClientCredentials are the client credentials the operator requests tokens with.
//
// The issuer rule lives on this object so that a rejection never echoes the issuer back.
// +kubebuilder:validation:XValidation:rule="!has(self.issuer) || size(self.issuer) == 0 || (self.issuer.matches('^(?i)https?://[^/?#@]+(/[^?#]*)?$') && isURL(self.issuer))",fieldPath=".issuer",message="issuer must be an absolute http:// or https:// URL with no user information, query or fragment"
// +kubebuilder:validation:XValidation:rule="has(self.clientSecret) != has(self.privateKey)",message="exactly one of clientSecret or privateKey must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.tokenEndpointAuthMethod) || size(self.tokenEndpointAuthMethod) == 0 || (self.tokenEndpointAuthMethod == 'private_key_jwt') == has(self.privateKey)",message="tokenEndpointAuthMethod private_key_jwt needs privateKey; client_secret_basic and client_secret_post need clientSecret"
type OAuth2ClientCredentials struct {
	// clientID is the client's identifier at the authorization server.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	ClientID string `json:"clientID"`

	// clientSecret reads the client secret from a Secret in the MCPServer's namespace
	// (client_secret_basic, or client_secret_post). Exactly one of clientSecret or
	// privateKey is set.
	// +optional
	ClientSecret *SecretKeySource `json:"clientSecret,omitempty"`

	// privateKey reads a PEM private key from a Secret in the MCPServer's namespace; it
	// signs a fresh client assertion for every token request (private_key_jwt, RFC
	// 7523): ES256 for an EC P-256 key, RS256 for an RSA key of 2048 bits or more.
	// +optional
	PrivateKey *SecretKeySource `json:"privateKey,omitempty"`

	// tokenEndpointAuthMethod is how the client authenticates to the token endpoint:
	// client_secret_basic, client_secret_post or private_key_jwt. Empty picks
	// private_key_jwt for a privateKey, and for a clientSecret client_secret_basic unless
	// the authorization server supports only client_secret_post.
	// +optional
	// +kubebuilder:validation:Enum="";client_secret_basic;client_secret_post;private_key_jwt
	TokenEndpointAuthMethod string `json:"tokenEndpointAuthMethod,omitempty"`

	// scopes are requested with every token. Empty requests the scope of the server's
	// WWW-Authenticate challenge, else the scopes_supported of its protected resource
	// metadata, else none.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[\x21\x23-\x5B\x5D-\x7E]+$`
	Scopes []string `json:"scopes,omitempty"`

	// tokenURL is the token endpoint. Empty discovers it. It must use https unless
	// allowInsecureHTTP is set, and even then plain http is used only to a loopback
	// address.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || (self.matches('^(?i)https?://[^/?#@]+([/?][^#]*)?$') && isURL(self))",message="tokenURL must be an absolute http:// or https:// URL with no user information and no fragment"
	TokenURL string `json:"tokenURL,omitempty"`

	// issuer pins the authorization server the client credential may be sent to: the
	// issuer identifier of its RFC 8414 metadata, such as https://auth.example.com.
	// When set, the server's protected resource metadata (RFC 9728) must list exactly
	// this issuer among its authorization_servers, and the metadata fetched from it must
	// name it as its issuer (a trailing slash aside); otherwise the connection fails with
	// reason MetadataMismatch and nothing is sent to any token endpoint. Empty trusts
	// whichever authorization server the MCP server names. Set it wherever the MCP
	// server's author is not trusted with the client secret, or its metadata could
	// change. With tokenURL nothing is discovered, and the issuer is only added to the
	// audience of private_key_jwt assertions. It must use https unless allowInsecureHTTP
	// is set.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Issuer string `json:"issuer,omitempty"`
}

// SecretKeySource reads a value from a Secret.
type SecretKeySource struct {
	// secretKeyRef selects a key of a Secret in the MCPServer's namespace.
	// +required
	SecretKeyRef SecretKeyReference `json:"secretKeyRef"`
}

// HTTPHeader is one request header, given inline or read from a Secret.
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.valueFrom)",message="a header must set exactly one of value or valueFrom"
// +kubebuilder:validation:XValidation:rule="!(self.name.lowerAscii() in ['host', 'content-type', 'content-length', 'accept', 'transfer-encoding', 'connection', 'upgrade', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'last-event-id']) && !self.name.lowerAscii().startsWith('mcp-')",message="this header is reserved for the transport and cannot be set: Host, Content-Type, Content-Length, Accept, Transfer-Encoding, Connection, Upgrade, Keep-Alive, Proxy-Connection, TE, Trailer, Last-Event-ID and any Mcp-* header (such as Mcp-Session-Id and MCP-Protocol-Version)"
type HTTPHeader struct {
	// name is the header name, an HTTP token such as Authorization or X-Api-Key.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('^[!#$%&\\'*+.^_`|~0-9A-Za-z-]+$')",message="header name must be an HTTP token: letters, digits and !#$%&'*+-.^_`|~ only"
	Name string `json:"name"`

	// value is the header value given inline. Prefer valueFrom for credentials.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	Value string `json:"value,omitempty"`

	// valueFrom reads the header value from a Secret in the MCPServer's namespace.
	// +optional
	ValueFrom *HeaderValueSource `json:"valueFrom,omitempty"`
}

// HeaderValueSource says where a header value comes from.
type HeaderValueSource struct {
	// secretKeyRef selects a key of a Secret in the MCPServer's namespace.
	// +required
	SecretKeyRef SecretKeyReference `json:"secretKeyRef"`
}

// SecretKeyReference selects one key of a Secret in the referring object's namespace.
// Secrets in other namespaces cannot be referenced.
type SecretKeyReference struct {
	// name is the name of the Secret, in the same namespace as the referring object.
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

// TLSConfig configures verification of the server's certificate.
type TLSConfig struct {
	// caBundle adds PEM-encoded CA certificates to the system roots when verifying the
	// server. The system roots stay trusted.
	// +optional
	CABundle *CABundleSource `json:"caBundle,omitempty"`
}

// CABundleSource says where a PEM CA bundle comes from.
type CABundleSource struct {
	// secretKeyRef selects the Secret key that holds the PEM bundle.
	// +required
	SecretKeyRef SecretKeyReference `json:"secretKeyRef"`
}

// StdioSessionMode says how the bridge maps client sessions onto server processes.
// +kubebuilder:validation:Enum=PerSession;Shared
type StdioSessionMode string

const (
	// StdioSessionModePerSession starts one server process per client session, initialized
	// with that client's capabilities.
	StdioSessionModePerSession StdioSessionMode = "PerSession"
	// StdioSessionModeShared runs one long-lived server process per bridge replica and
	// serves every client session from it. The bridge initializes it once, without any
	// client's capabilities.
	StdioSessionModeShared StdioSessionMode = "Shared"
)

// StdioServerSpec describes a stdio MCP server run from a container image. The operator
// runs it behind the Switchboard bridge, which serves it over Streamable HTTP: one
// subprocess per client session, or one shared subprocess (sessionMode).
// +kubebuilder:validation:XValidation:rule="!has(self.maxSessions) || self.maxSessions <= 64 || (has(self.sessionMode) && self.sessionMode == 'Shared')",message="maxSessions above 64 needs sessionMode: Shared: each PerSession session runs its own process"
type StdioServerSpec struct {
	// image is the container image that holds the server.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.contains(' ')",message="image must not contain spaces"
	Image string `json:"image"`

	// command is the executable and its leading arguments inside the image; the bridge
	// executes it once per session (sessionMode PerSession) or once per bridge replica
	// (Shared). The image's entrypoint is not used, so it is required.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=4096
	Command []string `json:"command"`

	// args are appended to command.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=4096
	Args []string `json:"args,omitempty"`

	// env sets environment variables of the server process. Values may come from Secrets
	// and ConfigMaps in the MCPServer's namespace.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Env []corev1.EnvVar `json:"env,omitempty"`

	// resources are the compute resources of the server container.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// serviceAccountName runs the server pod as this ServiceAccount of the MCPServer's
	// namespace. Without it the pod runs as the namespace's default ServiceAccount and
	// gets no API token mounted.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="serviceAccountName must be a DNS subdomain: lower-case letters, digits, '-' and '.'"
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// sessionMode says how the bridge maps client sessions onto server processes.
	// PerSession (the default) starts one server process per client session, initialized
	// with that client's capabilities: use it for servers that ask the client for
	// sampling, elicitation or roots, or that keep state per client (a working
	// directory, a login, an open browser). Shared runs one long-lived server process per
	// bridge replica and serves every session from it; the bridge initializes it once
	// without client capabilities, so the server never gets sampling, elicitation or
	// roots from a client, and every client sees the same server state. Use it for
	// servers that hold no per-client state (filesystem, git, fetch, search): sessions
	// start without a process start and cost no process each. In Shared mode no session
	// receives what the server produced for another: responses and progress go to the
	// session whose call they belong to (the bridge sends each call on under a random ID
	// and progress token, so a client cannot name another session's call), resource
	// updates to the subscribed sessions and list_changed notifications to all; log
	// messages and any other notification are dropped, since over stdio nothing ties them
	// to one session's call, and logging/setLevel changes nothing. Clients therefore get
	// no server logs in Shared mode: use PerSession for a server whose logs they need.
	// +optional
	// +kubebuilder:default=PerSession
	SessionMode StdioSessionMode `json:"sessionMode,omitempty"`

	// maxSessions bounds the concurrent client sessions the bridge serves. At the limit a
	// new session ends the least recently used session that has no request in flight
	// (its client starts a new one on its next request); a new session is refused only
	// while every session has a request in flight. In PerSession mode each session is a
	// server process, so it is 1 to 64; in Shared mode the sessions share one process and
	// it may be up to 1024.
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	MaxSessions int32 `json:"maxSessions,omitempty"`

	// securityContext sets the user and groups the server pod runs as. Unset, the
	// containers run as their images' users. The bridge's init container runs as the
	// same user. The local runtime of `switchboard dev` runs servers as the manager's
	// own user and does not apply it.
	// +optional
	SecurityContext *StdioSecurityContext `json:"securityContext,omitempty"`
}

// StdioSecurityContext is the user and groups a stdio server pod runs as. The pod's
// containers also always run without privilege escalation, with every capability
// dropped and the RuntimeDefault seccomp profile; with runAsNonRoot: true the pod meets
// the Pod Security "restricted" standard.
// +kubebuilder:validation:XValidation:rule="!(has(self.runAsNonRoot) && self.runAsNonRoot && has(self.runAsUser) && self.runAsUser == 0)",message="runAsNonRoot: true contradicts runAsUser: 0 (root); set a non-zero runAsUser or drop runAsNonRoot"
type StdioSecurityContext struct {
	// runAsNonRoot, when true, makes the kubelet refuse to start the containers as root
	// (UID 0). Without runAsUser the image's USER must then be numeric, or the kubelet
	// cannot verify it and the pod does not start.
	// +optional
	RunAsNonRoot *bool `json:"runAsNonRoot,omitempty"`

	// runAsUser is the UID the containers run as, 0 to 2147483647. Unset, the image's
	// USER applies.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	RunAsUser *int64 `json:"runAsUser,omitempty"`

	// runAsGroup is the primary GID of the containers' processes, 0 to 2147483647. It
	// may be set without runAsUser: the kubelet then runs the image's USER with this
	// group. Unset, the container runtime's default (the image's group) applies.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	RunAsGroup *int64 `json:"runAsGroup,omitempty"`

	// fsGroup is a supplemental GID of every container's processes, 0 to 2147483647;
	// the kubelet also makes the pod's volumes group-owned by it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	FSGroup *int64 `json:"fsGroup,omitempty"`
}

// HealthCheck configures the connection's health probes.
type HealthCheck struct {
	// interval is the time between probes, between 5s and 1h.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s') && duration(self) <= duration('1h')",message="healthCheck.interval must be between 5s and 1h"
	Interval *metav1.Duration `json:"interval,omitempty"`

	// failureThreshold is how many probes in a row must fail before the connection is
	// marked down: 1 to 20.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=20
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
}

// ToolFilter selects which tools are published, by name glob. A tool is published when it
// matches an allow glob (or allow is empty) and matches no deny glob. `*` matches any run
// of characters and `?` any single character. pinnedDigest holds the published tools to
// a reviewed set.
type ToolFilter struct {
	// allow lists globs of tool names to publish. Empty means all.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.all(g, g.matches('^[A-Za-z0-9_.*?-]+$'))",message="tool globs may contain only letters, digits, '_', '.', '-', '*' and '?'"
	Allow []string `json:"allow,omitempty"`

	// deny lists globs of tool names never to publish. Deny wins over allow.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.all(g, g.matches('^[A-Za-z0-9_.*?-]+$'))",message="tool globs may contain only letters, digits, '_', '.', '-', '*' and '?'"
	Deny []string `json:"deny,omitempty"`

	// pinnedDigest is the status.toolsDigest a person reviewed, "sha256:" and 64
	// lower-case hex digits. While status.toolsDigest differs from it the gateway refuses
	// every tools/call of the server, and the server shows ToolsPinned=False with reason
	// ToolsChanged (Ready=False, Stalled=True) until someone reviews the tools and pins
	// the new digest; while they match ToolsPinned is True. Without it nothing is pinned.
	// +optional
	// +kubebuilder:validation:MaxLength=71
	// +kubebuilder:validation:XValidation:rule="self.matches('^sha256:[0-9a-f]{64}$')",message="pinnedDigest must be \"sha256:\" followed by 64 lower-case hex digits, as status.toolsDigest shows it"
	PinnedDigest string `json:"pinnedDigest,omitempty"`
}

// GatewaySpec bounds what agents may do with the server through the Switchboard gateway.
// +kubebuilder:validation:XValidation:rule="!has(self.maxSessionsPerCaller) || !has(self.maxSessions) || self.maxSessionsPerCaller <= self.maxSessions",message="maxSessionsPerCaller cannot exceed maxSessions: one caller cannot hold more sessions than the server allows in all"
type GatewaySpec struct {
	// maxSessions bounds the concurrent gateway sessions to this server on each manager
	// replica, 1 to 100000. Beyond it the gateway answers new sessions with 503. Unset,
	// the gateway's own default applies.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxSessions int32 `json:"maxSessions,omitempty"`

	// maxSessionsPerCaller bounds the concurrent gateway sessions one caller (one user or
	// ServiceAccount) holds with this server on each manager replica, 1 to 100000,
	// counting the server's own endpoint and the toolsets that reach it. Beyond it the
	// gateway answers the caller's new sessions with 503. It can lower the manager's
	// --gateway-max-sessions-per-caller, not raise it; unset, that flag applies.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxSessionsPerCaller int32 `json:"maxSessionsPerCaller,omitempty"`

	// requestsPerSecond bounds the requests each caller may send to this server through
	// the gateway, per second, 1 to 100000. Beyond it the gateway answers 429 with a
	// Retry-After header. Unset, the gateway's own default applies.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	RequestsPerSecond int32 `json:"requestsPerSecond,omitempty"`
}

// MCPServerStatus is what the operator observed of the server. It is bounded: at most
// 256 tools, 256 resources and 256 prompts, descriptions cut to 1 KiB.
type MCPServerStatus struct {
	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions describe the server's state. Ready is the summary; Reconciling and
	// Stalled are present only while True.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// transport is the wire protocol of the live connection.
	// +optional
	Transport Transport `json:"transport,omitempty"`

	// endpoint is the URL the operator connects to, without user information or query
	// string.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Endpoint string `json:"endpoint,omitempty"`

	// protocolVersion is the MCP protocol version negotiated with the server.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ProtocolVersion string `json:"protocolVersion,omitempty"`

	// serverInfo is how the server describes itself.
	// +optional
	ServerInfo *ServerInfo `json:"serverInfo,omitempty"`

	// capabilities are what the server advertised at initialization.
	// +optional
	Capabilities *ServerCapabilities `json:"capabilities,omitempty"`

	// tools are the published tools (after spec.tools filtering), sorted by name, at most
	// 256.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Tools []ToolInfo `json:"tools,omitempty"`

	// toolCount is the number of published tools, including those beyond the 256 listed.
	// +optional
	ToolCount int32 `json:"toolCount,omitempty"`

	// toolsDigest is a stable digest ("sha256:...") of the published tool definitions; it
	// changes exactly when they change.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ToolsDigest string `json:"toolsDigest,omitempty"`

	// toolsTruncated is true when more tools are published than status lists.
	// +optional
	ToolsTruncated bool `json:"toolsTruncated,omitempty"`

	// resourceCount is the number of resources and resource templates the server offers.
	// +optional
	ResourceCount int32 `json:"resourceCount,omitempty"`

	// promptCount is the number of prompts the server offers.
	// +optional
	PromptCount int32 `json:"promptCount,omitempty"`

	// resources are the resources and resource templates the server offers, sorted by
	// URI (a template by its URI template), at most 256. URIs are shown without user
	// information and without query string, either of which may carry a secret; two
	// resources that differ only there are listed once.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Resources []ResourceInfo `json:"resources,omitempty"`

	// resourcesTruncated is true when the server offers resources or resource templates
	// that status does not list: beyond the 256 listed, or whose URI does not fit the
	// schema.
	// +optional
	ResourcesTruncated bool `json:"resourcesTruncated,omitempty"`

	// prompts are the prompts the server offers, sorted by name, at most 256.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Prompts []PromptInfo `json:"prompts,omitempty"`

	// promptsTruncated is true when the server offers prompts that status does not list:
	// beyond the 256 listed, or whose name does not fit the schema.
	// +optional
	PromptsTruncated bool `json:"promptsTruncated,omitempty"`
}

// ResourceInfo is one resource (uri set) or resource template (uriTemplate set) a
// server offers.
// +kubebuilder:validation:XValidation:rule="has(self.uri) != has(self.uriTemplate)",message="a resource has either uri or uriTemplate"
type ResourceInfo struct {
	// uri is the resource's URI, without user information or query string.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	URI string `json:"uri,omitempty"`

	// uriTemplate is the resource template's URI template (RFC 6570), without user
	// information or query string (a template's own query expansions, such as {?q},
	// stay).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	URITemplate string `json:"uriTemplate,omitempty"`

	// name is the resource's name.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name,omitempty"`

	// mimeType is the resource's MIME type, when the server says.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	MIMEType string `json:"mimeType,omitempty"`
}

// PromptInfo is one prompt a server offers.
type PromptInfo struct {
	// name is the prompt's name, unique within the server.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// title is the prompt's human-readable name.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Title string `json:"title,omitempty"`

	// description says what the prompt is for, cut to 256 bytes.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Description string `json:"description,omitempty"`
}

// ServerInfo is the implementation information a server reports at initialization.
type ServerInfo struct {
	// name is the server implementation's name.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name,omitempty"`

	// version is the server implementation's version.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Version string `json:"version,omitempty"`

	// title is the server's human-readable name.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Title string `json:"title,omitempty"`
}

// ServerCapabilities records which MCP features the server advertised.
type ServerCapabilities struct {
	// tools is true when the server offers tools.
	// +optional
	Tools bool `json:"tools,omitempty"`

	// resources is true when the server offers resources.
	// +optional
	Resources bool `json:"resources,omitempty"`

	// prompts is true when the server offers prompts.
	// +optional
	Prompts bool `json:"prompts,omitempty"`

	// listChanged is true when the server notifies list changes, so the operator
	// rediscovers without polling.
	// +optional
	ListChanged bool `json:"listChanged,omitempty"`

	// completions is true when the server offers argument completion (completion/complete)
	// for its prompts and resource templates.
	// +optional
	Completions bool `json:"completions,omitempty"`

	// resourcesSubscribe is true when clients may subscribe to updates of the server's
	// resources.
	// +optional
	ResourcesSubscribe bool `json:"resourcesSubscribe,omitempty"`
}

// ToolInfo is one published tool. Hints are the server's own claims, not guarantees.
type ToolInfo struct {
	// name is the tool's name, unique within the server.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// title is the tool's human-readable name.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Title string `json:"title,omitempty"`

	// description says what the tool does, cut to 1 KiB.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`

	// readOnlyHint is true when the server says the tool does not modify its environment.
	// +optional
	ReadOnlyHint *bool `json:"readOnlyHint,omitempty"`

	// destructiveHint is true when the server says the tool may destroy data.
	// +optional
	DestructiveHint *bool `json:"destructiveHint,omitempty"`

	// idempotentHint is true when the server says repeated calls have no further effect.
	// +optional
	IdempotentHint *bool `json:"idempotentHint,omitempty"`

	// openWorldHint is true when the server says the tool reaches outside systems.
	// +optional
	OpenWorldHint *bool `json:"openWorldHint,omitempty"`
}

// MCPServer is one MCP server the operator connects to, health-checks and publishes in the
// catalogue.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mcps,categories=mcp
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Transport",type=string,JSONPath=`.status.transport`
// +kubebuilder:printcolumn:name="Tools",type=integer,JSONPath=`.status.toolCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,priority=1
// +kubebuilder:printcolumn:name="Protocol",type=string,JSONPath=`.status.protocolVersion`,priority=1
type MCPServer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the server and how to connect to it.
	// +required
	Spec MCPServerSpec `json:"spec"`

	// status is what the operator observed.
	// +optional
	Status MCPServerStatus `json:"status,omitempty"`
}

// MCPServerList is a list of MCPServers.
// +kubebuilder:object:root=true
type MCPServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MCPServer `json:"items"`
}
