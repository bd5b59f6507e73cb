package toolsets_test

import (
	"testing"

	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/internal/toolsets"
)

// The catalogue owns the gateway's path prefix; a toolset's path must start with it, or
// the gateway would never see the toolset's requests.
func TestGatewayPathSharesTheCataloguePrefix(t *testing.T) {
	if toolsets.GatewayPathPrefix != catalog.GatewayPathPrefix {
		t.Fatalf("toolsets.GatewayPathPrefix %q, catalog.GatewayPathPrefix %q", toolsets.GatewayPathPrefix, catalog.GatewayPathPrefix)
	}
	if got := toolsets.GatewayPath("team-a", "support-agent"); got != "/mcp/namespaces/team-a/toolsets/support-agent" {
		t.Fatalf("GatewayPath = %q", got)
	}
}

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
