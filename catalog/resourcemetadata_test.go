package catalog_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/switchboard-mcp/switchboard/catalog"
)

// With a public URL, the catalogue's /mcp answers 401 pointing to its protected resource
// metadata, which the catalogue serves, for /mcp and for every gateway endpoint; REST
// keeps its own realm. Without one, no metadata is served.
func TestCatalogueServesProtectedResourceMetadata(t *testing.T) {
	md, err := catalog.NewResourceMetadata("https://mcp.example.com", catalog.DefaultResourceScopes, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := startCatalog(t, catalog.AuthTokenReview, func(o *catalog.Options) { o.ResourceMetadata = md })

	if code := mcpStatus(t, c, ""); code != http.StatusUnauthorized {
		t.Fatalf("/mcp without a token = %d; want 401", code)
	}
	resp := c.get(t, "", "/mcp")
	if got, want := resp.header.Get("WWW-Authenticate"), `Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp"`; got != want {
		t.Errorf("/mcp 401 WWW-Authenticate = %s; want %s", got, want)
	}
	if got := c.get(t, "forged-token", "/api/v1/servers").header.Get("WWW-Authenticate"); got != `Bearer realm="switchboard-catalog"` {
		t.Errorf("REST 401 WWW-Authenticate = %s", got)
	}

	for path, resource := range map[string]string{
		"/.well-known/oauth-protected-resource/mcp":                             "https://mcp.example.com/mcp",
		"/.well-known/oauth-protected-resource/mcp/namespaces/ns/servers/a":     "https://mcp.example.com/mcp/namespaces/ns/servers/a",
		"/.well-known/oauth-protected-resource/mcp/namespaces/ns/toolsets/tool": "https://mcp.example.com/mcp/namespaces/ns/toolsets/tool",
	} {
		resp := c.get(t, "", path)
		var doc struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			BearerMethods        []string `json:"bearer_methods_supported"`
		}
		if resp.code != http.StatusOK || json.Unmarshal(resp.body, &doc) != nil {
			t.Fatalf("GET %s = %d %s", path, resp.code, resp.body)
		}
		if doc.Resource != resource || len(doc.BearerMethods) != 1 || doc.BearerMethods[0] != "header" || len(doc.AuthorizationServers) != 0 {
			t.Errorf("GET %s = %s", path, resp.body)
		}
	}

	plain := startCatalog(t, catalog.AuthTokenReview)
	if resp := plain.get(t, "", "/.well-known/oauth-protected-resource/mcp"); resp.code != http.StatusNotFound {
		t.Errorf("metadata without --gateway-public-url = %d; want 404", resp.code)
	}
	if got := plain.get(t, "", "/mcp").header.Get("WWW-Authenticate"); got != `Bearer realm="switchboard"` {
		t.Errorf("/mcp 401 without --gateway-public-url: WWW-Authenticate = %s", got)
	}
}
