package v1alpha1

// Condition types. Ready is the summary a user or a GitOps tool waits on; the others say
// which part of the connection is healthy. Reconciling and Stalled follow kstatus: they
// are present only while True.
const (
	// ConditionReady is True when the server is connected, its tools are discovered (and
	// match spec.tools.pinnedDigest where one is set) and its egress is allowed. It is the
	// summary of all other conditions. Ready says whether the server serves, not which
	// version does: while a stdio server's new version has not rolled out, the previous
	// version's pod keeps serving and Ready stays True (its message says so), and
	// Reconciling, or Stalled, says why the new version does not run yet.
	ConditionReady = "Ready"

	// ConditionConnected is True while a live MCP session to the server exists and its
	// health probes pass.
	ConditionConnected = "Connected"

	// ConditionToolsDiscovered is True once the server's tools (and resources and prompts,
	// where offered) have been listed and published into status.
	ConditionToolsDiscovered = "ToolsDiscovered"

	// ConditionEgressAllowed is True when the egress policies that select the server allow
	// its endpoint. False names the policy that denies it.
	ConditionEgressAllowed = "EgressAllowed"

	// ConditionWorkloadAvailable is True when the Deployment that runs a stdio server
	// has an available replica, of its current pod template or, during a rolling update,
	// of the previous one (the message then says the current one has not rolled out).
	// While it has none, False says why, from what the kubelet, the scheduler and
	// admission reported about the newest pod of its current ReplicaSet: reason
	// ImagePullFailed, ContainerConfigInvalid, ContainerStartFailed, ServerExited,
	// BridgeInstallFailed, PodRejected or Unschedulable, and WorkloadUnavailable while a
	// pod is being created, started or replaced. Only stdio servers carry it.
	ConditionWorkloadAvailable = "WorkloadAvailable"

	// ConditionToolsPinned is True while the published tools match
	// spec.tools.pinnedDigest and False, with reason ToolsChanged, while they differ; the
	// gateway then refuses every tools/call of the server. Only servers that pin their
	// tools carry it.
	ConditionToolsPinned = "ToolsPinned"

	// ConditionAuthenticated is True while the server accepts the OAuth token the
	// operator obtained with spec.http.auth.oauth2.clientCredentials or
	// workloadIdentity, and False with reason TokenRequestFailed, InvalidClient,
	// InvalidGrant, MetadataMismatch, InsufficientScope or WorkloadTokenUnavailable
	// when no usable token could be had. Its message names the token endpoint's origin,
	// never a secret. Only servers with spec.http.auth carry it.
	ConditionAuthenticated = "Authenticated"

	// ConditionAccepted is True on an MCPEgressPolicy whose rules compiled and are being
	// enforced.
	ConditionAccepted = "Accepted"

	// ConditionReconciling is True while the controller works towards the desired state
	// (kstatus "abnormal-true" condition: absent when not reconciling). On a Ready stdio
	// server it says that the current generation's pod has not rolled out yet, with
	// reason RollingOut, or the reason it cannot run (ImagePullFailed, ServerExited,
	// ...), while the previous version keeps serving.
	ConditionReconciling = "Reconciling"

	// ConditionStalled is True when the controller cannot make progress without a change
	// to the spec or its references (kstatus "abnormal-true" condition: absent otherwise).
	// A stdio server is Stalled too when its Deployment exceeded its progress deadline
	// (ProgressDeadlineExceeded, as kstatus judges a Deployment): the reason is why its
	// new pod does not run, and the message says whether the previous version serves.
	ConditionStalled = "Stalled"
)

// Condition reasons. They are stable API: users and alerts match on them.
const (
	// ReasonSucceeded means the condition holds.
	ReasonSucceeded = "Succeeded"

	// ReasonProgressing means the controller is working on the latest generation.
	ReasonProgressing = "Progressing"

	// ReasonConnecting means a session is being established or re-established.
	ReasonConnecting = "Connecting"

	// ReasonSuspended means spec.suspend is true and the operator holds no session.
	ReasonSuspended = "Suspended"

	// ReasonInvalidSpec means the spec passed admission but cannot be acted on; the
	// message says what to change.
	ReasonInvalidSpec = "InvalidSpec"

	// ReasonSecretNotFound means a Secret or Secret key the spec references is missing.
	// The message names the Secret and key, never a value.
	ReasonSecretNotFound = "SecretNotFound"

	// ReasonEgressDenied means an egress policy (or the default posture) denies the
	// endpoint or an address it resolves to.
	ReasonEgressDenied = "EgressDenied"

	// ReasonRedirectDenied means the server answered with a redirect the redirect policy
	// does not allow.
	ReasonRedirectDenied = "RedirectDenied"

	// ReasonDNSFailure means the server's host name did not resolve.
	ReasonDNSFailure = "DNSFailure"

	// ReasonConnectionRefused means nothing accepted the TCP connection.
	ReasonConnectionRefused = "ConnectionRefused"

	// ReasonTLSError means the TLS handshake failed (for example an untrusted certificate).
	ReasonTLSError = "TLSError"

	// ReasonUnauthorized means the server answered 401 or 403.
	ReasonUnauthorized = "Unauthorized"

	// ReasonNotFound means the endpoint answered 404 outside an MCP session.
	ReasonNotFound = "NotFound"

	// ReasonProtocolError means the server does not speak MCP as expected.
	ReasonProtocolError = "ProtocolError"

	// ReasonSessionEnded means the server ended a live session (it closed the stream or
	// forgot the session, as a restarting server does); the operator reconnects with
	// backoff.
	ReasonSessionEnded = "SessionEnded"

	// ReasonTimeout means the server did not answer within spec.timeout.
	ReasonTimeout = "Timeout"

	// ReasonLimitExceeded means the server sent more than the connector accepts (response
	// size, item count, page count).
	ReasonLimitExceeded = "LimitExceeded"

	// ReasonWorkloadUnavailable means the stdio server's Deployment has no available
	// replica and nothing has failed: its pod is being created, scheduled, started or
	// replaced (the message names the pod, and the one it replaces), or its bridge has
	// not yet passed its readiness probe.
	ReasonWorkloadUnavailable = "WorkloadUnavailable"

	// ReasonRollingOut means a Ready stdio server's Deployment is rolling out its
	// current pod template and nothing has failed: the new pod is being created,
	// scheduled or started, or its bridge has not yet passed its readiness probe. The
	// previous version's pod keeps serving until the new one is available. It is the
	// reason of Reconciling, while Ready stays True.
	ReasonRollingOut = "RollingOut"

	// ReasonImagePullFailed means the kubelet cannot pull an image of the stdio server's
	// pod (ErrImagePull, ImagePullBackOff, InvalidImageName): the message names the
	// container, the image and what the kubelet reported. The kubelet keeps retrying, so
	// a pushed image, or a fixed spec.stdio.image, heals it.
	ReasonImagePullFailed = "ImagePullFailed"

	// ReasonContainerConfigInvalid means the kubelet cannot create a container of the
	// stdio server's pod from its configuration (CreateContainerConfigError), such as
	// "container has runAsNonRoot and image will run as root", or a missing Secret or
	// ConfigMap an env entry references. The message is the kubelet's.
	ReasonContainerConfigInvalid = "ContainerConfigInvalid"

	// ReasonContainerStartFailed means the container runtime could not create or start a
	// container of the stdio server's pod (CreateContainerError, RunContainerError,
	// StartError), such as an executable that is not in the image. The message is the
	// kubelet's.
	ReasonContainerStartFailed = "ContainerStartFailed"

	// ReasonServerExited means the stdio server's container exited (or keeps exiting:
	// CrashLoopBackOff). The message gives its exit code and reason, how often it was
	// restarted and the last lines of its log: the bridge exits, with a line that names
	// the command and how it failed, when the command is not in the image or its server
	// exits at once. Log lines are the server's output, cut short and stripped of
	// control characters.
	ReasonServerExited = "ServerExited"

	// ReasonBridgeInstallFailed means the init container that copies the switchboard
	// bridge into the stdio server's pod exited with an error; the message gives its exit
	// code and the last lines of its log.
	ReasonBridgeInstallFailed = "BridgeInstallFailed"

	// ReasonPodRejected means the stdio server's ReplicaSet cannot create its pod: the
	// API server refused it (FailedCreate), for example Pod Security admission in a
	// namespace that enforces "restricted" refusing an image that runs as root, or a
	// ResourceQuota. The message is the refusal.
	ReasonPodRejected = "PodRejected"

	// ReasonUnschedulable means the scheduler found no node for the stdio server's pod;
	// the message is the scheduler's (insufficient resources, taints, node selectors).
	ReasonUnschedulable = "Unschedulable"

	// ReasonToolsChanged means the published tools no longer match
	// spec.tools.pinnedDigest: a person has to review them and pin the new
	// status.toolsDigest.
	ReasonToolsChanged = "ToolsChanged"

	// ReasonToolsMatchPinned means the published tools match spec.tools.pinnedDigest.
	ReasonToolsMatchPinned = "ToolsMatchPinned"

	// ReasonTokenRequestFailed means no OAuth token could be obtained: a metadata
	// document or the token endpoint could not be reached (the egress policy denies it,
	// it is not https, it answered an error or an oversized document), or the server
	// rejected a token it had just been issued.
	ReasonTokenRequestFailed = "TokenRequestFailed"

	// ReasonInvalidClient means the token endpoint rejected the client credentials
	// (invalid_client, unauthorized_client: for workloadIdentity, the client may not
	// use the JWT-bearer grant), or the configured private key cannot be used to sign a
	// client assertion.
	ReasonInvalidClient = "InvalidClient"

	// ReasonMetadataMismatch means the protected resource metadata names another
	// resource than the server's URL, or not the authorization server that
	// spec.http.auth.oauth2.clientCredentials.issuer pins, or the authorization server
	// metadata another issuer than the authorization server it was fetched for. No token
	// is requested.
	ReasonMetadataMismatch = "MetadataMismatch"

	// ReasonInsufficientScope means the server answered insufficient_scope (or the
	// token endpoint invalid_scope); the message names the scope asked for.
	ReasonInsufficientScope = "InsufficientScope"

	// ReasonInvalidGrant means the token endpoint refused the grant (invalid_grant): for
	// spec.http.auth.oauth2.workloadIdentity, the workload JWT is expired, names
	// another audience, or comes from an issuer the authorization server does not
	// trust. The same JWT is not presented again for ten minutes; a new one (a renewed
	// ServiceAccount token, a rotated Secret) is.
	ReasonInvalidGrant = "InvalidGrant"

	// ReasonDiscoveredPerCaller (ToolsDiscovered True): the server's credentials follow
	// the caller (enterpriseManaged or tokenExchange) and no operator credential is
	// configured, so the operator cannot list its tools; each caller sees the tools the
	// server offers it through the gateway, and status publishes none.
	ReasonDiscoveredPerCaller = "DiscoveredPerCaller"

	// ReasonWorkloadTokenUnavailable means no workload JWT could be had for
	// spec.http.auth.oauth2.workloadIdentity: the ServiceAccount does not exist, the
	// API server refused the TokenRequest (the manager may not create
	// serviceaccounts/token), or the Secret holds no JWT. The message names the
	// ServiceAccount or Secret, never a token.
	ReasonWorkloadTokenUnavailable = "WorkloadTokenUnavailable"

	// ReasonInvalidPolicy means an MCPEgressPolicy could not be compiled.
	ReasonInvalidPolicy = "InvalidPolicy"

	// ReasonIdentityProviderNotFound means the MCPIdentityProvider a per-caller mode
	// (tokenExchange or enterpriseManaged) names does not exist. The server is Stalled
	// until a cluster admin creates it; it is reconciled again when one appears.
	ReasonIdentityProviderNotFound = "IdentityProviderNotFound"

	// ReasonTokenExchangeNotConfigured means the MCPIdentityProvider a per-caller mode
	// names has no spec.tokenExchange, or (for enterpriseManaged) lists no
	// tokenExchange.authorizationServers: no cluster admin said where its callers'
	// tokens may go, so none goes anywhere.
	ReasonTokenExchangeNotConfigured = "TokenExchangeNotConfigured"

	// ReasonNamespaceNotAllowed means the MCPIdentityProvider a per-caller mode names
	// does not list the MCPServer's namespace in spec.tokenExchange.namespaces.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"

	// ReasonAuthorizationServerNotAllowed means the authorization server an
	// enterpriseManaged server's protected resource metadata names is not one of its
	// MCPIdentityProvider's tokenExchange.authorizationServers: no identity assertion
	// grant is requested for it, and callers are refused.
	ReasonAuthorizationServerNotAllowed = "AuthorizationServerNotAllowed"

	// ReasonAudienceNotAllowed means a tokenExchange server asks for an audience
	// (spec.http.auth.oauth2.tokenExchange.audience) its MCPIdentityProvider does not
	// list in spec.tokenExchange.audiences: no caller's token is exchanged for it, so
	// the server's author cannot have callers' tokens issued for another service.
	ReasonAudienceNotAllowed = "AudienceNotAllowed"

	// ReasonScopeNotAllowed means a per-caller server asks for a scope (tokenExchange.scopes
	// or enterpriseManaged.scopes) its MCPIdentityProvider does not list in
	// spec.tokenExchange.scopes: no caller's token is exchanged with it.
	ReasonScopeNotAllowed = "ScopeNotAllowed"

	// ReasonCallerNotAllowed is the refusal a caller of a per-caller server gets when its
	// token was not vouched for by the MCPIdentityProvider the server names (a
	// Kubernetes ServiceAccount, or another provider's user): its token is sent nowhere.
	// It is a caller's refusal, never a server condition.
	ReasonCallerNotAllowed = "CallerNotAllowed"

	// ReasonPerUserNotConfigured means the MCPIdentityProvider a perUser server names
	// has no spec.perUser: no cluster admin said where its persons may authorize, so
	// nobody is sent anywhere.
	ReasonPerUserNotConfigured = "PerUserNotConfigured"

	// ReasonResourceNotAllowed means a perUser server's URL is not among (or beneath)
	// its MCPIdentityProvider's spec.perUser.resources: no person's token is obtained
	// for it.
	ReasonResourceNotAllowed = "ResourceNotAllowed"

	// ReasonClientRegistrationNotAllowed means a perUser server names no clientID and
	// its MCPIdentityProvider does not set spec.perUser.dynamicClientRegistration: no
	// client is registered at the server's authorization server.
	ReasonClientRegistrationNotAllowed = "ClientRegistrationNotAllowed"

	// ReasonAuthorizationRequired is the answer a caller of a perUser server gets while
	// it holds no grant for the server (or its grant was refused on refresh): the
	// person authorizes at the URL the gateway elicits. It is a caller's answer, never
	// a server condition.
	ReasonAuthorizationRequired = "AuthorizationRequired"
)

// Condition types and reasons of an MCPToolset.
const (
	// ConditionServersReady is True when every server the toolset selects is Ready;
	// False names those that are not.
	ConditionServersReady = "ServersReady"

	// ConditionNamesUnique is True when every exposed tool name, resource URI, resource
	// template and prompt name of the toolset is unique and valid. False names both
	// origins of each collision (neither colliding origin is served under that name), every
	// tool or prompt whose exposed name is invalid, and every resource of an origin
	// without prefix whose URI looks like another origin's wrapped URI (none of them is
	// served).
	ConditionNamesUnique = "NamesUnique"

	// ReasonNoServers means the toolset's entries select no MCPServer.
	ReasonNoServers = "NoServers"

	// ReasonServersNotReady means none, or not all, of the selected servers are Ready.
	ReasonServersNotReady = "ServersNotReady"

	// ReasonNameCollision means two tools, resources, resource templates or prompts would
	// be exposed under the same name or URI.
	ReasonNameCollision = "NameCollision"

	// ReasonInvalidToolName means an exposed tool or prompt name does not match
	// ExposedToolNamePattern, or a resource URI of an origin without prefix looks like
	// another origin's wrapped URI, so it is not exposed.
	ReasonInvalidToolName = "InvalidToolName"
)

// Condition reasons of an MCPIdentityProvider, besides ReasonSucceeded, ReasonProgressing
// and ReasonSecretNotFound.
const (
	// ReasonDiscoveryFailed means the issuer's discovery document or key set could not
	// be fetched or did not fit the spec (another issuer, no keys, an untrusted
	// certificate). The message names the issuer and what failed; the controller retries
	// with backoff.
	ReasonDiscoveryFailed = "DiscoveryFailed"

	// ReasonInvalidClaimValidationRule means a claimValidationRules expression does not
	// compile or does not evaluate to a bool; the message names the rule by index.
	ReasonInvalidClaimValidationRule = "InvalidClaimValidationRule"

	// ReasonInvalidCertificateAuthority means the certificateAuthority Secret key holds
	// no PEM certificate.
	ReasonInvalidCertificateAuthority = "InvalidCertificateAuthority"

	// ReasonIssuerConflict means an older MCPIdentityProvider has the same issuer URL:
	// this one is not applied until that one is changed or deleted. The message names it.
	ReasonIssuerConflict = "IssuerConflict"

	// ReasonPrefixConflict means a username or groups prefix of this provider equals,
	// begins or is begun by a username or groups prefix of an older MCPIdentityProvider,
	// so one issuer could map a name of the other's: this one is not applied until one
	// prefix changes or that provider is deleted. The message names it and both prefixes.
	ReasonPrefixConflict = "PrefixConflict"

	// ReasonTokenPrefixConflict means an older MCPIdentityProvider introspects the opaque
	// tokens of the same introspection.tokenPrefix (or, like this one, has none): this
	// one is not applied, so that no token is sent to two introspection endpoints. The
	// message names the older provider.
	ReasonTokenPrefixConflict = "TokenPrefixConflict"
)

// Condition reasons of an MCPAccessPolicy, besides ReasonSucceeded and ReasonInvalidSpec
// (its targetSelector cannot be parsed).
const (
	// ReasonInvalidExpression means a rule's `when` expression does not compile, does
	// not evaluate to a bool, or may cost more than an expression may spend. The message
	// names the rule by index and says what is wrong. Until it is fixed the policy denies
	// every request to the targets it selects (in Enforce mode).
	ReasonInvalidExpression = "InvalidExpression"

	// ReasonReconcileFailed is Ready's reason (status Unknown) when a step of the
	// MCPServer's reconcile failed before it could observe the server (listing its
	// egress policies, reading its Secrets from the API server): the message says which
	// step and why; the reconcile is retried, or the server is Stalled when the error
	// cannot pass by itself.
	ReasonReconcileFailed = "ReconcileFailed"
)
