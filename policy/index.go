package policy

import (
	"math/bits"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// maxRules is the number of rules a policy may have (the CRD's MaxItems on spec.rules):
// a policy's rules fit a ruleSet.
const maxRules = 64

// ruleSet is a set of a policy's rules, bit i for rule i.
type ruleSet uint64

// next returns the lowest rule of s and s without it; ok is false when s is empty.
func (s ruleSet) next() (i int, rest ruleSet, ok bool) {
	if s == 0 {
		return 0, 0, false
	}
	return bits.TrailingZeros64(uint64(s)), s & (s - 1), true
}

// ruleIndex says, once per policy, which rules a caller and a kind of request can reach,
// so that Decide looks at no rule whose subjects are not the caller: a rule applies to a
// caller when a subject names the caller's username, one of its groups, or one of the
// two groups every caller is in one of.
type ruleIndex struct {
	// users and groups are the rules of each username and group subjects name.
	users, groups map[string]ruleSet
	// authenticated and unauthenticated are the rules of system:authenticated (every
	// caller but system:anonymous, listed in its groups or not) and of
	// system:unauthenticated (system:anonymous alone).
	authenticated, unauthenticated ruleSet
	// kinds are the rules that name each kind of request (by a glob).
	kinds [kindCount]ruleSet
	// deny are the Deny rules.
	deny ruleSet
}

// add records rule i.
func (x *ruleIndex) add(i int, r *rule) {
	bit := ruleSet(1) << i
	for _, s := range r.subjects {
		switch {
		case s.username != "":
			x.users = addTo(x.users, s.username, bit)
		case s.group == allAuthenticated:
			x.authenticated |= bit
		case s.group == allUnauthenticated:
			x.unauthenticated |= bit
		case s.group != "":
			x.groups = addTo(x.groups, s.group, bit)
		}
	}
	for k := range kindCount {
		if len(r.globs[k]) > 0 {
			x.kinds[k] |= bit
		}
	}
	if r.action == mcpv1alpha1.AccessPolicyDeny {
		x.deny |= bit
	}
}

func addTo(m map[string]ruleSet, key string, bit ruleSet) map[string]ruleSet {
	if m == nil {
		m = map[string]ruleSet{}
	}
	m[key] |= bit
	return m
}

// reachable returns the rules whose subjects name c and that name kind k: the rules
// rule.appliesTo and a glob of kind k would let through.
func (x *ruleIndex) reachable(c *Caller, k requestKind) ruleSet {
	var s ruleSet
	if c.Username == anonymousUser {
		s = x.unauthenticated
	} else {
		s = x.authenticated
	}
	if len(x.users) > 0 {
		s |= x.users[c.Username]
	}
	if len(x.groups) > 0 {
		for _, g := range c.Groups {
			s |= x.groups[g]
		}
	}
	return s & x.kinds[k]
}
