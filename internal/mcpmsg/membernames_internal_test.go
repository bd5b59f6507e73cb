package mcpmsg

import (
	"fmt"
	"testing"
)

// Past fewMembers an object's names are kept by folded form, so that checking a name
// costs one lookup, not a comparison with every name before it: what keeps one wide
// object from costing time in the square of its width.
func TestMemberNamesKeepAWideObjectByFoldedName(t *testing.T) {
	var names memberNames
	const width = 10 * fewMembers
	for i := range width {
		if err := names.add(fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(names.folded) != width {
		t.Fatalf("after %d names, %d are kept by folded form; want all of them", width, len(names.folded))
	}
	for _, twin := range []string{"M0", fmt.Sprintf("M%d", fewMembers-1), fmt.Sprintf("M%d", width-1)} {
		if err := names.add([]byte(twin)); err == nil {
			t.Errorf("%s was taken beside its lower-case twin", twin)
		}
	}
}
