package connector

import "time"

// Caller is the gateway caller an upstream session acts for. A server whose upstream
// credentials follow the caller (Config.PerCaller) gets, for each caller, tokens
// obtained by exchanging the caller's own token; other servers ignore it.
type Caller struct {
	// Key identifies the caller across its tokens (identity.Caller.Key): upstream
	// tokens are cached per server and Key, and never served to another Key.
	Key string
	// Token is the bearer token the caller presented to the gateway, the subject of
	// the exchange. It is a secret: it goes only to the token endpoint of the identity
	// provider that vouched for it, and only when that is the provider the server's
	// per-caller config names.
	Token string
	// Provider is the MCPIdentityProvider whose issuer vouched for Token; empty for a
	// Kubernetes (ServiceAccount) token, which is never exchanged anywhere.
	Provider string
	// Username is the caller's username (identity.Caller.Username), kept with a
	// person's grant for the admin's list of grants; not a secret.
	Username string
	// Expiry is when Token expires; zero when unknown. Upstream tokens obtained with
	// it are dropped then.
	Expiry time.Time
}
