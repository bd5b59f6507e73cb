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
	// userLengths and groupLengths have bit n%64 set for every key of users and groups
	// n bytes long: a name whose bit is clear is not a key, and is not looked up.
	userLengths, groupLengths uint64
	// authenticated and unauthenticated are the rules of system:authenticated (every
	// caller but system:anonymous, listed in its groups or not) and of
	// system:unauthenticated (system:anonymous alone).
	authenticated, unauthenticated ruleSet
	// kinds are the rules that name each kind of request (by a glob).
	kinds [kindCount]ruleSet
	// deny are the Deny rules.
	deny ruleSet
}

// add records rule i, r, and its subjects.
func (x *ruleIndex) add(i int, r *rule, subjects []mcpv1alpha1.AccessPolicySubject) {
	bit := ruleSet(1) << i
	for _, s := range subjects {
		switch s := compileSubject(s); {
		case s.username != "":
			x.users = addTo(x.users, s.username, bit)
			x.userLengths |= lengthBit(s.username)
		case s.group == allAuthenticated:
			x.authenticated |= bit
		case s.group == allUnauthenticated:
			x.unauthenticated |= bit
		case s.group != "":
			x.groups = addTo(x.groups, s.group, bit)
			x.groupLengths |= lengthBit(s.group)
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

// lengthBit is the bit of name's length in userLengths and groupLengths.
func lengthBit(name string) uint64 {
	return 1 << (len(name) % 64)
}

func addTo(m map[string]ruleSet, key string, bit ruleSet) map[string]ruleSet {
	if m == nil {
		m = map[string]ruleSet{}
	}
	m[key] |= bit
	return m
}

// reachable returns the rules that name kind k (by a glob) and a subject of which is c.
func (x *ruleIndex) reachable(c *Caller, k requestKind) ruleSet {
	var s ruleSet
	if c.Username == anonymousUser {
		s = x.unauthenticated
	} else {
		s = x.authenticated
	}
	if x.userLengths&lengthBit(c.Username) != 0 {
		s |= x.users[c.Username]
	}
	if x.groupLengths != 0 {
		for _, g := range c.Groups {
			if x.groupLengths&lengthBit(g) != 0 {
				s |= x.groups[g]
			}
		}
	}
	return s & x.kinds[k]
}
