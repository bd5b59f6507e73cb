package identity

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Claim is what one MCPIdentityProvider claims as its own: its issuer, the prefixes of the
// Kubernetes names it maps tokens to, and the opaque tokens it introspects. Two providers
// must never claim the same thing, or one issuer could speak for another's users.
type Claim struct {
	// Name is the provider's name.
	Name string
	// Created is the provider's creationTimestamp: of two providers that conflict, the
	// older (then the one whose name sorts first) keeps its claim.
	Created time.Time
	// IssuerURL is the issuer whose JWTs the provider judges.
	IssuerURL string
	// UsernamePrefix is put before every username the provider maps.
	UsernamePrefix string
	// MapsGroups is set when the provider maps a groups claim, and GroupsPrefix is then
	// put before every group it maps.
	MapsGroups   bool
	GroupsPrefix string
	// Introspects is set when the provider introspects opaque tokens.
	Introspects bool
	// TokenPrefix is how the opaque tokens it introspects begin; "" takes every opaque
	// token no other provider's TokenPrefix matches.
	TokenPrefix string
}

// claim returns what cfg claims.
func (cfg *ProviderConfig) claim() Claim {
	c := Claim{Name: cfg.Name, Created: cfg.Created, IssuerURL: cfg.IssuerURL, UsernamePrefix: cfg.UsernamePrefix}
	if cfg.GroupsClaim != "" {
		c.MapsGroups, c.GroupsPrefix = true, cfg.GroupsPrefix
	}
	if cfg.Introspection != nil {
		c.Introspects, c.TokenPrefix = true, cfg.Introspection.TokenPrefix
	}
	return c
}

// Conflict is why a provider is not applied: an older provider claims the same issuer, an
// overlapping name prefix, or the same opaque tokens.
type Conflict struct {
	// Reason is ReasonIssuerConflict, ReasonPrefixConflict or ReasonTokenPrefixConflict.
	Reason Reason
	// With is the older provider that keeps its claim.
	With string
	// Message says what collides and what to change, naming both providers.
	Message string
}

// older reports whether a was created before b: by creationTimestamp, then by name. Of
// two providers that conflict the older keeps its claim, so a provider that works is
// never displaced by one created after it, and every replica picks the same one.
func older(a, b Claim) bool {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c < 0
	}
	return a.Name < b.Name
}

// Conflicts decides, for every provider in claims, whether it may be applied: the ones it
// returns, by name, may not; every other may. It is a pure function of its input, so
// every replica that sees the same providers decides the same.
//
// A provider is not applied while an older one conflicts with it (see conflictBetween),
// whether or not that older one is itself applied or Ready: a claim belongs to the older
// provider for as long as it exists, so that a passing outage of one issuer never hands
// its users to another. Where several older providers conflict, the oldest is named.
func Conflicts(claims []Claim) map[string]Conflict {
	sorted := slices.Clone(claims)
	slices.SortFunc(sorted, func(a, b Claim) int {
		if older(a, b) {
			return -1
		}
		if older(b, a) {
			return 1
		}
		return cmp.Compare(a.IssuerURL, b.IssuerURL)
	})
	out := map[string]Conflict{}
	for i, younger := range sorted {
		for _, older := range sorted[:i] {
			if older.Name == younger.Name {
				continue
			}
			if c := conflictBetween(older, younger); c != nil {
				out[younger.Name] = *c
				break
			}
		}
	}
	return out
}

// conflictBetween returns why younger may not be applied beside older, or nil when the
// two claim nothing in common. The checks, in order:
//
//   - the same issuer URL (IssuerConflict): a JWT names one issuer, and must be judged by
//     one provider;
//   - a name prefix of one equal to, or a prefix of, a name prefix of the other, the
//     username prefix and the groups prefix (when it maps groups) of each compared with
//     both of the other's (PrefixConflict). Within one kind, that is exactly what lets
//     one issuer mint a name the other maps: prefix "oidc:" with claim value
//     "corp:alice" is the name "oidc:corp:alice" of a provider with prefix "oidc:corp:".
//     Across kinds RBAC keeps users and groups apart, yet a name that reads as one
//     provider's user and another's group is how a RoleBinding or an access policy
//     grants the wrong one; so every prefix belongs to one provider, and a name to at
//     most one issuer;
//   - both introspect opaque tokens with the same TokenPrefix, or both without one
//     (TokenPrefixConflict): an opaque token goes to one introspection endpoint.
func conflictBetween(older, younger Claim) *Conflict {
	conflict := func(reason Reason, format string, args ...any) *Conflict {
		return &Conflict{Reason: reason, With: older.Name, Message: fmt.Sprintf(format, args...)}
	}
	if older.IssuerURL == younger.IssuerURL {
		return conflict(ReasonIssuerConflict,
			"identity provider %s, which is older, already has issuer %s: an issuer may be configured once",
			older.Name, younger.IssuerURL)
	}
	for _, y := range namePrefixes(younger) {
		for _, o := range namePrefixes(older) {
			if strings.HasPrefix(y.prefix, o.prefix) || strings.HasPrefix(o.prefix, y.prefix) {
				return conflict(ReasonPrefixConflict,
					"the %s prefix %q overlaps the %s prefix %q of identity provider %s, which is older: a name one maps could be mapped by the other; choose prefixes of which neither begins with the other",
					y.kind, y.prefix, o.kind, o.prefix, older.Name)
			}
		}
	}
	if older.Introspects && younger.Introspects && older.TokenPrefix == younger.TokenPrefix {
		if younger.TokenPrefix == "" {
			return conflict(ReasonTokenPrefixConflict,
				"identity provider %s, which is older, already introspects the opaque tokens no tokenPrefix matches: give one of them introspection.tokenPrefix",
				older.Name)
		}
		return conflict(ReasonTokenPrefixConflict,
			"identity provider %s, which is older, already introspects the opaque tokens that begin with %q: an opaque token goes to one introspection endpoint",
			older.Name, younger.TokenPrefix)
	}
	return nil
}

type namePrefix struct{ kind, prefix string }

// namePrefixes returns the prefixes of the names c maps.
func namePrefixes(c Claim) []namePrefix {
	out := []namePrefix{{"username", c.UsernamePrefix}}
	if c.MapsGroups {
		out = append(out, namePrefix{"groups", c.GroupsPrefix})
	}
	return out
}
