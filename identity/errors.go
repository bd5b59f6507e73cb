package identity

import (
	"errors"
	"fmt"
)

// Reason says in one PascalCase word why a token was refused or a provider could not be
// applied. It suits a condition reason, a metric label and an audit line: it never
// carries a token, a claim or a secret.
type Reason string

// Reasons a token is refused. All of them but ReasonIssuerUnavailable are the caller's
// to fix (HTTP 401).
const (
	// ReasonMalformed: the token is empty, too long, or a JWT that does not parse.
	ReasonMalformed Reason = "Malformed"
	// ReasonUnknownIssuer: no applied provider has the JWT's issuer, or the token is
	// opaque and no provider introspects opaque tokens.
	ReasonUnknownIssuer Reason = "UnknownIssuer"
	// ReasonBadSignature: the JWT is not signed by a key its issuer publishes.
	ReasonBadSignature Reason = "BadSignature"
	// ReasonWrongAudience: the token names none of the provider's audiences.
	ReasonWrongAudience Reason = "WrongAudience"
	// ReasonExpired: the token's exp has passed.
	ReasonExpired Reason = "Expired"
	// ReasonNotYetValid: the token's nbf lies in the future.
	ReasonNotYetValid Reason = "NotYetValid"
	// ReasonInactive: the issuer's introspection endpoint says the token is not active.
	ReasonInactive Reason = "Inactive"
	// ReasonInvalidClaims: a claim the provider maps or checks has the wrong type, the
	// username claim is missing or empty, or email_verified is not true.
	ReasonInvalidClaims Reason = "InvalidClaims"
	// ReasonReservedName: the mapped username or a mapped group starts with "system:",
	// which Kubernetes reserves for itself.
	ReasonReservedName Reason = "ReservedName"
	// ReasonRuleFailed: a claim validation rule did not hold.
	ReasonRuleFailed Reason = "RuleFailed"
	// ReasonIssuerUnavailable: the issuer could not be asked (key set or introspection
	// endpoint unreachable, or it answered with an error). Not the caller's fault: 503.
	ReasonIssuerUnavailable Reason = "IssuerUnavailable"
)

// Errors a TokenError matches with errors.Is, by whether it heals by itself.
var (
	// ErrUnauthenticated matches every refusal that is the token's fault, and every
	// error of an Authenticator that means the request carries no valid bearer token:
	// answer 401.
	ErrUnauthenticated = errors.New("a valid bearer token (a ServiceAccount token) is required")
	// ErrIssuerUnavailable matches a refusal because the issuer could not be asked:
	// answer 503, the caller may try again.
	ErrIssuerUnavailable = errors.New("identity provider unavailable")
)

// TokenError is why Authenticate refused a token. Its message names at most the provider
// and the mapped username; never the token, a claim's value or a secret.
type TokenError struct {
	// Reason says why, in one word.
	Reason Reason
	// Provider is the MCPIdentityProvider that judged the token, "" when none was
	// selected.
	Provider string
	// Unavailable is set when the issuer could not be asked: the refusal is not the
	// token's fault and may heal by itself (503 rather than 401).
	Unavailable bool

	msg string
}

// Error returns a message fit for the caller and the log.
func (e *TokenError) Error() string {
	if e.Provider == "" {
		return e.msg
	}
	return fmt.Sprintf("identity provider %s: %s", e.Provider, e.msg)
}

// Is matches ErrIssuerUnavailable when e.Unavailable is set and ErrUnauthenticated
// otherwise.
func (e *TokenError) Is(target error) bool {
	switch target {
	case ErrIssuerUnavailable:
		return e.Unavailable
	case ErrUnauthenticated:
		return !e.Unavailable
	}
	return false
}

func refuse(provider string, reason Reason, format string, args ...any) *TokenError {
	return &TokenError{Reason: reason, Provider: provider, msg: fmt.Sprintf(format, args...)}
}

func unavailable(provider string, format string, args ...any) *TokenError {
	return &TokenError{Reason: ReasonIssuerUnavailable, Provider: provider, Unavailable: true, msg: fmt.Sprintf(format, args...)}
}

// Reasons Apply fails, fit for the Ready condition of an MCPIdentityProvider.
const (
	// ReasonInvalidConfig: the configuration cannot work as written (issuer URL,
	// audiences, claim mappings, certificate authority, a rule that does not compile).
	ReasonInvalidConfig Reason = "InvalidConfig"
	// ReasonIssuerConflict: an older provider has the same issuer URL.
	ReasonIssuerConflict Reason = "IssuerConflict"
	// ReasonPrefixConflict: a username or groups prefix equals, begins or is begun by a
	// username or groups prefix of an older provider.
	ReasonPrefixConflict Reason = "PrefixConflict"
	// ReasonTokenPrefixConflict: an older provider introspects the opaque tokens of the
	// same introspection token prefix (or, like this one, has none).
	ReasonTokenPrefixConflict Reason = "TokenPrefixConflict"
	// ReasonAddressRefused: the issuer's endpoints resolve to a link-local or cloud
	// metadata address (or, over http, to an address that is not loopback).
	ReasonAddressRefused Reason = "AddressRefused"
	// ReasonDiscoveryFailed: the discovery document could not be fetched or is not
	// usable.
	ReasonDiscoveryFailed Reason = "DiscoveryFailed"
	// ReasonKeySetFailed: the key set could not be fetched or holds no usable key.
	ReasonKeySetFailed Reason = "KeySetFailed"
)

// ApplyError is why Apply could not make a provider ready. Its message is meant for the
// MCPIdentityProvider's status: it names URLs without their query strings and never a
// secret.
type ApplyError struct {
	// Reason says why, in one word.
	Reason Reason
	// Transient is set when trying again later with the same configuration may succeed
	// (the issuer was unreachable or answered with an error); unset when the
	// configuration must change first.
	Transient bool

	msg string
}

// Error returns the message.
func (e *ApplyError) Error() string { return e.msg }

func applyErr(reason Reason, transient bool, format string, args ...any) *ApplyError {
	return &ApplyError{Reason: reason, Transient: transient, msg: fmt.Sprintf(format, args...)}
}

// Permanent reports whether the configuration must change before Apply can succeed: the
// MCPIdentityProvider controller then reports the provider Stalled, not Reconciling.
func (e *ApplyError) Permanent() bool { return !e.Transient }
