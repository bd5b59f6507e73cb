package identity

import "time"

// ProviderConfig is one MCPIdentityProvider as the identity package needs it: the spec
// with its Secrets resolved by the controller. It holds a client secret: never log it.
type ProviderConfig struct {
	// Name is the MCPIdentityProvider's name (cluster-scoped).
	Name string
	// Generation is the MCPIdentityProvider's metadata.generation this config was built
	// from.
	Generation int64
	// Created is the MCPIdentityProvider's creationTimestamp: of two providers whose
	// claims conflict (see Conflicts), the older is applied.
	Created time.Time

	// IssuerURL is the OpenID issuer; tokens must name it exactly in iss.
	IssuerURL string
	// DiscoveryURL, when set, is where the discovery document is fetched from instead of
	// IssuerURL + /.well-known/openid-configuration; it must still name IssuerURL.
	DiscoveryURL string
	// Audiences are the audiences a token must name one of in aud.
	Audiences []string
	// CACertPEM, when set, are the only certificate authorities trusted for the issuer's
	// endpoints (discovery, key set, introspection).
	CACertPEM []byte
	// AllowInsecureHTTP allows an http issuer, which must then be a loopback address.
	AllowInsecureHTTP bool

	// UsernameClaim and UsernamePrefix map a token to the Kubernetes username asked
	// about in SubjectAccessReviews: UsernamePrefix + the claim's value.
	UsernameClaim  string
	UsernamePrefix string
	// GroupsClaim and GroupsPrefix map a token's groups the same way; no GroupsClaim maps
	// none.
	GroupsClaim  string
	GroupsPrefix string
	// ValidationRules are CEL expressions over `claims` that must all be true.
	ValidationRules []ValidationRule

	// Advertise lists the issuer in the protected resource metadata of every endpoint.
	Advertise bool
	// Introspection, when set, admits opaque access tokens the issuer says are active
	// (RFC 7662), asked with these client credentials.
	Introspection *Introspection
}

// ValidationRule is one CEL claim validation rule.
type ValidationRule struct {
	// Expression is a CEL expression over `claims` that must evaluate to true.
	Expression string
	// Message is what a refused caller is told when it does not hold.
	Message string
}

// Introspection are the client credentials to ask an issuer's introspection endpoint
// with.
type Introspection struct {
	ClientID string
	// ClientSecret is a secret: never log it.
	ClientSecret string
	// TokenPrefix is how the opaque tokens this provider introspects begin: an opaque
	// token goes to the provider whose TokenPrefix is the longest that begins it, or,
	// when none does, to the one provider that introspects without a TokenPrefix, and to
	// no other.
	TokenPrefix string
}
