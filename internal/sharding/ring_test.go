package sharding

import (
	"fmt"
	"testing"
)

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("team-%d/server-%05d", i%7, i)
	}
	return out
}

// Every key has exactly one owner, and the owners share the keys about evenly.
func TestRingSpreadsKeysEvenly(t *testing.T) {
	r := NewRing("replica-c", "replica-a", "replica-b", "replica-a")
	if r.Len() != 3 {
		t.Fatalf("members %v, want 3 distinct", r.Members())
	}
	count := map[string]int{}
	for _, k := range keys(30000) {
		count[r.Owner(k)]++
	}
	for _, m := range r.Members() {
		if share := float64(count[m]) / 30000; share < 0.30 || share > 0.37 {
			t.Errorf("%s owns %.1f%% of the keys, want about a third", m, 100*share)
		}
	}
	if len(count) != 3 {
		t.Errorf("owners %v, want only the ring's members", count)
	}
}

// A member joining takes about 1/N of the keys and only from the others, never moving
// a key between two old members; a member leaving hands over only its own keys.
func TestRingMovesOnlyTheJoiningOrLeavingMembersShare(t *testing.T) {
	before := NewRing("a", "b", "c")
	after := NewRing("a", "b", "c", "d")
	moved := 0
	all := keys(20000)
	for _, k := range all {
		was, is := before.Owner(k), after.Owner(k)
		if was == is {
			continue
		}
		moved++
		if is != "d" {
			t.Fatalf("%s moved from %s to %s; only the new member may gain keys", k, was, is)
		}
	}
	if share := float64(moved) / float64(len(all)); share < 0.22 || share > 0.28 {
		t.Errorf("%.1f%% of the keys moved when a fourth member joined, want about a quarter", 100*share)
	}

	// The reverse: d leaves again, and exactly its keys go back where they were.
	for _, k := range all {
		if after.Owner(k) != "d" && after.Owner(k) != before.Owner(k) {
			t.Fatalf("%s changed owner although d did not own it", k)
		}
	}
}

func TestAnEmptyRingOwnsNothing(t *testing.T) {
	var r Ring
	if got := r.Owner("ns/name"); got != "" {
		t.Errorf("owner in an empty ring: %q", got)
	}
	if !NewRing("b", "a").Equal(NewRing("a", "b")) || NewRing("a").Equal(NewRing("a", "b")) {
		t.Error("Equal compares members, in any order")
	}
}
