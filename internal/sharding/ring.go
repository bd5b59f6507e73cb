// Package sharding splits the MCPServers among manager replicas. Each replica holds a
// Lease of its own in the manager's namespace ([Membership]); the replicas whose Leases
// are live form a [Ring], which assigns every server to exactly one of them by
// rendezvous hashing of its namespace/name. A replica joining or leaving moves only the
// servers it gains or held, about 1/N of them. Kubernetes Leases are the only
// coordination.
package sharding

import (
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Ring assigns keys to members by rendezvous (highest random weight) hashing: a key
// belongs to the member whose hash with it is highest. Adding a member moves to it only
// the keys it now wins, and removing one moves only its own keys; every other key stays
// where it was. The zero Ring has no members and owns nothing.
type Ring struct {
	members []string // sorted, distinct
}

// NewRing returns the ring of members; duplicates count once.
func NewRing(members ...string) Ring {
	m := slices.Clone(members)
	slices.Sort(m)
	return Ring{members: slices.Compact(m)}
}

// Members returns the ring's members, sorted.
func (r Ring) Members() []string { return slices.Clone(r.members) }

// Len returns how many members the ring has.
func (r Ring) Len() int { return len(r.members) }

// Has reports whether member is in the ring.
func (r Ring) Has(member string) bool {
	_, found := slices.BinarySearch(r.members, member)
	return found
}

// Equal reports whether both rings have the same members.
func (r Ring) Equal(o Ring) bool { return slices.Equal(r.members, o.members) }

// Owner returns the member key belongs to, or "" for a ring without members.
func (r Ring) Owner(key string) string {
	var owner string
	var best uint64
	for _, m := range r.members {
		// Every replica computes the same weight: xxhash is unseeded and stable.
		d := xxhash.New()
		_, _ = d.WriteString(m)
		_, _ = d.WriteString("\x00")
		_, _ = d.WriteString(key)
		if w := d.Sum64(); owner == "" || w > best {
			owner, best = m, w
		}
	}
	return owner
}
