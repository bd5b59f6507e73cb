package connector

import (
	"strings"
	"testing"
	"unsafe"
)

// TestKeptTextIsHeldOnce: what discovery keeps of a server's text is the one canonical
// copy, so that servers listing the same tools (a fleet of one server image) hold each
// name and description once, and none of it pins the decoder's buffer it came from.
func TestKeptTextIsHeldOnce(t *testing.T) {
	buf1 := []byte("Search the issue tracker for open issues")
	buf2 := []byte("Search the issue tracker for open issues")
	k := &keeper{max: DefaultMaxDescriptionBytes}
	a := k.text(unsafe.String(&buf1[0], len(buf1)))
	b := k.text(unsafe.String(&buf2[0], len(buf2)))
	if a != b {
		t.Fatalf("kept %q and %q, want equal text", a, b)
	}
	if unsafe.StringData(a) != unsafe.StringData(b) {
		t.Error("two servers' equal descriptions are held twice; want one copy")
	}
	for _, buf := range [][]byte{buf1, buf2} {
		if unsafe.StringData(a) == &buf[0] {
			t.Error("kept text points into the decoder's buffer")
		}
	}
	copy(buf1, strings.Repeat("x", len(buf1)))
	if a != "Search the issue tracker for open issues" {
		t.Errorf("kept text changed with the buffer it came from: %q", a)
	}
}
