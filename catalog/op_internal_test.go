package catalog

import (
	"context"
	"testing"

	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// newSmallOP starts testutil's OpenID provider.
func newSmallOP(t *testing.T) *testutil.OP {
	t.Helper()
	return testutil.StartOP(t)
}

// providersFor applies one advertised provider for op.
func providersFor(t *testing.T, op *testutil.OP) *identity.Providers {
	t.Helper()
	ps := identity.NewProviders(identity.Options{})
	err := ps.Apply(context.Background(), identity.ProviderConfig{
		Name:              "corp",
		Generation:        1,
		IssuerURL:         op.URL(),
		Audiences:         []string{"https://mcp.example.com"},
		AllowInsecureHTTP: true,
		UsernameClaim:     "email",
		UsernamePrefix:    "oidc:",
		GroupsClaim:       "groups",
		GroupsPrefix:      "oidc:",
		Advertise:         true,
	})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return ps
}
