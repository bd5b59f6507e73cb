package catalog

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

func TestNewResourceMetadataRefusesUnsafePublicURLs(t *testing.T) {
	for _, bad := range []string{
		"mcp.example.com",
		"/relative",
		"ftp://mcp.example.com",
		"http://mcp.example.com",
		"https://user:pass@mcp.example.com",
		"https://mcp.example.com/?q=1",
		"https://mcp.example.com/#frag",
	} {
		if _, err := NewResourceMetadata(bad, nil, nil); err == nil {
			t.Errorf("NewResourceMetadata(%q) accepted it", bad)
		} else if strings.Contains(err.Error(), "pass") {
			t.Errorf("error %q carries the URL's userinfo", err)
		}
	}
	// A quote in the path is escaped: it can never end the challenge's quoted string.
	m, err := NewResourceMetadata(`https://mcp.example.com/a"b\c`, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Challenge("/mcp"); strings.Count(got, `"`) != 2 || strings.Contains(got, `\`) {
		t.Errorf("Challenge = %s; want the path's quote and backslash escaped", got)
	}
	for _, good := range []string{"https://mcp.example.com", "https://mcp.example.com/base/", "http://127.0.0.1:8082", "http://localhost:1"} {
		if _, err := NewResourceMetadata(good, nil, nil); err != nil {
			t.Errorf("NewResourceMetadata(%q): %v", good, err)
		}
	}
}

func TestResourceMetadataChallenges(t *testing.T) {
	m, err := NewResourceMetadata("https://mcp.example.com/base/", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/mcp":                                 `Bearer resource_metadata="https://mcp.example.com/base/.well-known/oauth-protected-resource/mcp"`,
		"/mcp/namespaces/team-a/servers/notes": `Bearer resource_metadata="https://mcp.example.com/base/.well-known/oauth-protected-resource/mcp/namespaces/team-a/servers/notes"`,
		"/mcp/namespaces/team-a/toolsets/t.1":  `Bearer resource_metadata="https://mcp.example.com/base/.well-known/oauth-protected-resource/mcp/namespaces/team-a/toolsets/t.1"`,
		// Paths that are no endpoint get no metadata, whatever a caller put in them.
		`/mcp/namespaces/team-a/servers/a"b`:    plainChallenge,
		"/mcp/namespaces/Team-A/servers/notes":  plainChallenge,
		"/mcp/namespaces/team-a/secrets/notes":  plainChallenge,
		"/mcp/namespaces/team-a/servers/notes/": plainChallenge,
		"/api/v1/servers":                       plainChallenge,
	} {
		if got := m.Challenge(path); got != want {
			t.Errorf("Challenge(%q) = %s; want %s", path, got, want)
		}
	}
	var unpublished *ResourceMetadata
	if got := unpublished.Challenge("/mcp"); got != plainChallenge {
		t.Errorf("Challenge without a public URL = %s; want %s", got, plainChallenge)
	}
	if none, _ := NewResourceMetadata("", nil, nil); none.Challenge("/mcp") != plainChallenge {
		t.Errorf("Challenge with an empty public URL = %s; want %s", none.Challenge("/mcp"), plainChallenge)
	}
}

// The metadata names the endpoint's public URL and the advertised issuers of Ready
// providers; a forgotten provider disappears from it; other paths and an unpublished
// gateway answer 404, whatever Host the request names.
func TestResourceMetadataDocuments(t *testing.T) {
	op := newSmallOP(t)
	providers := providersFor(t, op)
	m, err := NewResourceMetadata("https://mcp.example.com", DefaultResourceScopes, providers)
	if err != nil {
		t.Fatal(err)
	}
	get := func(m *ResourceMetadata, path string) (*httptest.ResponseRecorder, oauthex.ProtectedResourceMetadata) {
		req := httptest.NewRequest(http.MethodGet, "http://evil.example/"+strings.TrimPrefix(path, "/"), nil)
		req.Host = "evil.example"
		rec := httptest.NewRecorder()
		m.ServeHTTP(rec, req)
		var md oauthex.ProtectedResourceMetadata
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &md); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
		return rec, md
	}

	rec, md := get(m, ResourceMetadataPathPrefix+"/mcp/namespaces/team-a/servers/notes")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if md.Resource != "https://mcp.example.com/mcp/namespaces/team-a/servers/notes" {
		t.Errorf("resource = %q", md.Resource)
	}
	if !slices.Equal(md.AuthorizationServers, []string{op.URL()}) {
		t.Errorf("authorization_servers = %q; want [%s]", md.AuthorizationServers, op.URL())
	}
	if !slices.Equal(md.BearerMethodsSupported, []string{"header"}) || !slices.Equal(md.ScopesSupported, DefaultResourceScopes) {
		t.Errorf("bearer_methods_supported = %q, scopes_supported = %q", md.BearerMethodsSupported, md.ScopesSupported)
	}
	if strings.Contains(rec.Body.String(), "client-secret") || strings.Contains(rec.Body.String(), "switchboard-gateway") {
		t.Errorf("metadata carries the introspection client's credentials: %s", rec.Body)
	}

	if _, md := get(m, ResourceMetadataPathPrefix+"/mcp"); md.Resource != "https://mcp.example.com/mcp" {
		t.Errorf("catalogue's resource = %q", md.Resource)
	}

	providers.Forget("corp")
	if _, md := get(m, ResourceMetadataPathPrefix+"/mcp"); len(md.AuthorizationServers) != 0 {
		t.Errorf("authorization_servers after the provider was forgotten = %q; want none", md.AuthorizationServers)
	}

	for _, path := range []string{
		ResourceMetadataPathPrefix + "/api/v1/servers",
		ResourceMetadataPathPrefix + "/mcp/namespaces/team-a/servers/notes/extra",
		ResourceMetadataPathPrefix + "/",
	} {
		if rec, _ := get(m, path); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s = %d; want 404", path, rec.Code)
		}
	}
	unpublished, _ := NewResourceMetadata("", nil, providers)
	if rec, _ := get(unpublished, ResourceMetadataPathPrefix+"/mcp"); rec.Code != http.StatusNotFound {
		t.Errorf("GET metadata without a public URL = %d; want 404", rec.Code)
	}
}
