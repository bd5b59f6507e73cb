package toolsets_test

import (
	"testing"

	"github.com/switchboard-mcp/switchboard/internal/toolsets"
)

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{
		"gh_search.issues-2": true, "a": true, "": false, "repo/list": false, "with space": false,
		"x234567890123456789012345678901234567890123456789012345678901234":  true,
		"x2345678901234567890123456789012345678901234567890123456789012345": false,
	} {
		if got := toolsets.ValidName(name); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", name, got, want)
		}
	}
}
