package gateway_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
)

// Every 401 of a gateway endpoint points to that endpoint's protected resource metadata
// under the configured public URL; a 403 does not, since logging in again would not help.
func TestUnauthenticatedCallersAreToldWhereToLogIn(t *testing.T) {
	md, err := catalog.NewResourceMetadata("https://mcp.example.com", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var reviews atomic.Int32
	sar := grants(t, map[string][]string{"oidc:alice@example.com": {"notes"}}, &reviews)
	h := newHarness(t, harnessOptions{gateway: func(o *gateway.Options) {
		o.Authenticator = tokens{callerToken: "oidc:alice@example.com"}
		o.Access = sar.AuthorizationV1().SubjectAccessReviews()
		o.ResourceMetadata = md
	}})
	for _, path := range []string{gatewaypath.Server(namespace, "notes"), gatewaypath.Toolset(namespace, "tools")} {
		for _, token := range []string{"", "forged"} {
			resp := initialize(t, h.front.URL+path, token)
			want := `Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource` + path + `"`
			if resp.status != http.StatusUnauthorized || resp.header.Get("WWW-Authenticate") != want {
				t.Errorf("%s with token %q = %d, WWW-Authenticate %s; want 401 and %s", path, token, resp.status, resp.header.Get("WWW-Authenticate"), want)
			}
		}
	}
	resp := initialize(t, h.front.URL+gatewaypath.Server(namespace, "billing"), callerToken)
	if resp.status != http.StatusForbidden || resp.header.Get("WWW-Authenticate") != "" {
		t.Errorf("no use: %d, WWW-Authenticate %q; want 403 without a challenge", resp.status, resp.header.Get("WWW-Authenticate"))
	}
}
