// Package identity says who a caller of the gateway and the catalogue is. It owns the one
// Caller type (username, UID, groups, extra, a key per identity computed in one place,
// the token's expiry and the provider that vouched) and the Authenticator that returns
// it: Kubernetes tokens are checked locally against the cluster's ServiceAccount issuer
// keys and then reviewed with TokenReview (bounded, cached by digest, in lanes no flood
// of unknown tokens can fill); the tokens of MCPIdentityProviders' OpenID issuers are
// verified here too.
//
// Providers holds the applied MCPIdentityProviders. The controller calls Apply with each
// provider's ProviderConfig (which fetches the issuer's discovery document and key set at
// once, so that Ready means "tokens can be verified now") and Forget when one goes away;
// the gateway and the catalogue call Authenticate with a bearer token and get a Caller:
// the mapped Kubernetes username and groups that SubjectAccessReviews ask about, and a
// Key per identity (never per token) for caches, rate limits and sessions.
//
// What it guarantees:
//   - A JWT is judged by the one provider its (unverified) iss names, never by trying
//     every provider: go-oidc checks the signature against the keys that issuer
//     publishes (refetched on an unknown key id, at most once per KeySetMinRefresh),
//     iss exactly, exp and nbf; then aud must name one of the provider's audiences, the
//     username claim must be a non-empty string, no mapped name may start with
//     "system:", and every CEL claim validation rule must hold.
//   - An opaque token is judged by RFC 7662 introspection at one provider, the one whose
//     introspection token prefix is the longest that begins it, else the one without a
//     token prefix, and is sent to no other: active, for one of the audiences (aud, or
//     client_id when the answer has no aud), not expired; answers are remembered by
//     token digest, bounded, never past exp; requests in flight are bounded. A token no
//     provider takes, or shaped as a Kubernetes bootstrap token, is never sent out.
//   - No two applied providers claim the same issuer, overlapping name prefixes
//     (username or groups, either of one beginning either of the other) or the same
//     opaque tokens: Conflicts decides which may be applied (the older keeps its claim),
//     and Apply keeps the applied set free of conflicts whatever order it is called in.
//   - A username or group with a control character, or not UTF-8, refuses the token, and
//     a Caller's Key (computed by NewCaller alone) encodes every field with its length,
//     so no name reads as two.
//   - The claims routed, mapped and checked by rules are decoded once, strictly:
//     duplicate keys, and keys that differ from a registered claim only in case, are
//     refused, so go-oidc's own (case-insensitive) reading of iss, aud and exp agrees
//     with it.
//   - Every request to an issuer goes through one client that dials no link-local or
//     cloud metadata address (judged on the resolved address), speaks http only with
//     AllowInsecureHTTP and then only to loopback, trusts only the configured CA when one
//     is set, follows no redirect, uses no proxy, and bounds time and answer sizes; its
//     transports and bounded bodies are internal/httpclient's, the connector's own.
//   - Errors are typed: a *TokenError matches ErrUnauthenticated (401) or
//     ErrIssuerUnavailable (503) and an *ApplyError says whether it is Transient. No
//     message carries a token, a secret, a query string or a claim beyond the mapped
//     username.
//
// The Authenticator logs only whether ServiceAccount tokens can be verified locally; a
// Caller prints and logs as its username and provider only.
//
// It must not: log anything else (callers decide what to log, from the typed errors),
// import the gateway, the catalogue or the controllers, or keep a token itself in memory
// (caches are keyed by digest; a Caller holds no token).
package identity
