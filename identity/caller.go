package identity

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
)

// Caller is who a request's bearer token belongs to, however it was authenticated: a
// Kubernetes user TokenReview named, or a user an MCPIdentityProvider's claim mappings
// named. The catalogue and the gateway decide on it, and the gateway derives from it the
// caller an upstream session acts for. Callers must not modify it: the Authenticator
// shares one Caller between every request of the same token while it is cached.
//
// A Caller holds no token. The one path that needs the caller's bearer token (a server
// whose upstream credentials follow the caller, which exchanges it) reads it from the
// request with [BearerToken]. Its String, Format, LogValue and MarshalLog name only the
// username and the provider, so a Caller printed or logged whole shows neither its
// extra (a ServiceAccount token's credential id and bound pod) nor its keys.
type Caller struct {
	// Username is the Kubernetes username SubjectAccessReviews ask about: TokenReview's,
	// or an MCPIdentityProvider's username prefix and username claim.
	Username string
	// UID is the user's UID as TokenReview gave it (a ServiceAccount's UID); empty for a
	// caller of an MCPIdentityProvider.
	UID string
	// Groups are the Kubernetes groups SubjectAccessReviews ask about; for a caller of an
	// MCPIdentityProvider its groups prefix and each value of the groups claim, sorted.
	Groups []string
	// Extra is TokenReview's extra (for a ServiceAccount token the credential id and
	// the pod it is bound to), sent along with SubjectAccessReviews; empty for a caller
	// of an MCPIdentityProvider.
	Extra map[string][]string

	// Key identifies the caller for caches, rate limits and session ownership: a digest
	// of Username, UID and Groups ([NewCaller] computes it), the same for every token of
	// one identity (rotated tokens, tokens of other pods, a provider's token and the same
	// user reviewed by the API server) and different for a ServiceAccount deleted and
	// created again under the same name (a new UID). Anything kept per caller is keyed by
	// it, so that more tokens buy neither more rate nor a session of their own.
	Key string

	// Expiry is when the caller's token expires, as far as the authenticator learnt it (a
	// JWT's exp, an introspection answer's exp); zero when unknown. Whatever is obtained
	// with the token on the caller's behalf lives no longer.
	Expiry time.Time

	// Provider is the MCPIdentityProvider whose issuer vouched for the caller's token;
	// empty for a Kubernetes token. A per-caller server exchanges only the tokens of
	// callers of the provider it names.
	Provider string

	// Claims are the verified claims of an MCPIdentityProvider caller's token that access
	// policies may judge (caller.claims), within bounds (see PolicyClaims): values that
	// are a string, a number (float64), a bool or a list of strings ([]string); nil for a
	// Kubernetes token. Never the token itself, and never logged.
	Claims map[string]any

	// extraKey is a digest of Extra; see AccessKey.
	extraKey string
}

// NewCaller returns the Caller user names, with its keys. It is the one place a caller's
// keys are computed.
func NewCaller(user authenticationv1.UserInfo) *Caller {
	c := &Caller{
		Username: user.Username,
		UID:      user.UID,
		Groups:   user.Groups,
		Key:      callerKey(user.Username, user.UID, user.Groups),
	}
	if len(user.Extra) > 0 {
		c.Extra = make(map[string][]string, len(user.Extra))
		for k, v := range user.Extra {
			c.Extra[k] = []string(v)
		}
		c.extraKey = extraKey(c.Extra)
	}
	return c
}

// Anonymous is the caller of every request when authentication is off (the catalogue's
// AuthNone, switchboard dev).
var Anonymous = &Caller{Username: "system:anonymous", Key: "anonymous"}

// clone returns a copy of c that shares nothing with it: remembered callers are handed
// out as copies.
func (c *Caller) clone() *Caller {
	cc := *c
	cc.Groups = slices.Clone(c.Groups)
	if c.Claims != nil {
		cc.Claims = make(map[string]any, len(c.Claims))
		for k, v := range c.Claims {
			if list, ok := v.([]string); ok {
				v = slices.Clone(list)
			}
			cc.Claims[k] = v
		}
	}
	if c.Extra != nil {
		cc.Extra = make(map[string][]string, len(c.Extra))
		for k, v := range c.Extra {
			cc.Extra[k] = slices.Clone(v)
		}
	}
	return &cc
}

// UserInfo returns the caller as a Kubernetes user, for SubjectAccessReviews.
func (c *Caller) UserInfo() authenticationv1.UserInfo {
	u := authenticationv1.UserInfo{Username: c.Username, UID: c.UID, Groups: slices.Clone(c.Groups)}
	if len(c.Extra) > 0 {
		u.Extra = make(map[string]authenticationv1.ExtraValue, len(c.Extra))
		for k, v := range c.Extra {
			u.Extra[k] = slices.Clone(v)
		}
	}
	return u
}

// AccessKey identifies the caller for caches of SubjectAccessReview answers: Key and a
// digest of Extra. A SubjectAccessReview sends extra along (see AccessReview), and an
// authorizer may decide on it (a webhook on the pod a token is bound to, say), so an
// answer given for one token's extra is not reused for another's. That costs one review
// per server or namespace when a token rotates, about once an hour per pod.
func (c *Caller) AccessKey() string {
	x := c.extraKey
	if x == "" && len(c.Extra) > 0 {
		x = extraKey(c.Extra) // a Caller built without NewCaller
	}
	if x == "" {
		return c.Key
	}
	return c.Key + "+" + x
}

// AccessReview returns the SubjectAccessReview that asks whether the caller may do what
// attrs describe.
func (c *Caller) AccessReview(attrs authorizationv1.ResourceAttributes) *authorizationv1.SubjectAccessReview {
	extra := make(map[string]authorizationv1.ExtraValue, len(c.Extra))
	for k, v := range c.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               c.Username,
		UID:                c.UID,
		Groups:             c.Groups,
		Extra:              extra,
		ResourceAttributes: &attrs,
	}}
}

// String names the caller by its username, and the provider that vouched for it when
// one did; nothing else.
func (c *Caller) String() string {
	if c == nil {
		return "<nil>"
	}
	if c.Provider == "" {
		return fmt.Sprintf("caller %q", c.Username)
	}
	return fmt.Sprintf("caller %q of identity provider %s", c.Username, c.Provider)
}

// Format prints String for every verb, %+v and %#v too, so that no verb prints the
// caller's fields.
func (c *Caller) Format(f fmt.State, _ rune) {
	_, _ = f.Write([]byte(c.String()))
}

// LogValue is what log/slog logs for a caller: its username and provider.
func (c *Caller) LogValue() slog.Value {
	if c == nil {
		return slog.StringValue("<nil>")
	}
	return slog.GroupValue(slog.String("username", c.Username), slog.String("provider", c.Provider))
}

// MarshalLog is what logr logs for a caller: its username and provider.
func (c *Caller) MarshalLog() any {
	if c == nil {
		return nil
	}
	return struct {
		Username string `json:"username"`
		Provider string `json:"provider,omitempty"`
	}{c.Username, c.Provider}
}

// callerKey identifies a Kubernetes identity for caches, rate limits and session
// ownership: the hex SHA-256 of its fields, each encoded as a tag byte ('u' username, 'i'
// UID, 'g' group), its length as 8 bytes big-endian, and its bytes; the groups sorted and
// without repeats. No two identities share an encoding, whatever bytes their names hold.
// Extra is left out on purpose: for a ServiceAccount it carries the token's credential id
// and the pod the token is bound to, so it differs between two tokens of the same caller
// (a rotated token, another replica), which would otherwise count as another caller for
// rate limits and session ownership. NewCaller is its only caller, so one identity has
// one key however it authenticated (TokenReview or an MCPIdentityProvider).
func callerKey(username, uid string, groups []string) string {
	h := sha256.New()
	field := func(tag byte, s string) {
		var head [9]byte
		head[0] = tag
		binary.BigEndian.PutUint64(head[1:], uint64(len(s)))
		h.Write(head[:])
		h.Write([]byte(s))
	}
	field('u', username)
	field('i', uid)
	sorted := slices.Clone(groups)
	slices.Sort(sorted)
	for _, g := range slices.Compact(sorted) {
		field('g', g)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// extraKey is a digest of a user's extra, "" when it has none: every key and value
// length-prefixed, keys sorted, each key followed by the number of its values.
func extraKey(extra map[string][]string) string {
	if len(extra) == 0 {
		return ""
	}
	h := sha256.New()
	write := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		write(k)
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(extra[k])))
		h.Write(n[:])
		for _, v := range extra[k] {
			write(v)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
