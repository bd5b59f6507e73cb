package catalog_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
)

// Each ServiceAccount sees exactly the namespace it may list mcpservers in; a caller
// without a valid token gets 401 and one that may list nothing gets empty results.
func TestCallersSeeOnlyTheirNamespaces(t *testing.T) {
	c := startCatalog(t, catalog.AuthTokenReview)
	nsA, nsB := newNamespace(t), newNamespace(t)
	createServer(t, nsA, serverSpec{name: "github", tools: []mcpv1alpha1.ToolInfo{tool("search_issues", "", "Search issues")}})
	createServer(t, nsA, serverSpec{name: "jira", tools: []mcpv1alpha1.ToolInfo{tool("search_tickets", "", "Search tickets")}})
	createServer(t, nsB, serverSpec{name: "gitlab", tools: []mcpv1alpha1.ToolInfo{tool("search_merge_requests", "", "Search MRs")}})
	tokenA := newCaller(t, nsA, "agent-a", true)
	tokenB := newCaller(t, nsB, "agent-b", true)
	tokenNobody := newCaller(t, nsA, "nobody", false)
	c.waitServers(t, tokenA, nsA, 2)
	c.waitServers(t, tokenB, nsB, 1)

	for _, tc := range []struct {
		token       string
		wantServers []string
		wantTools   []string
	}{
		{tokenA, []string{nsA + "/github", nsA + "/jira"}, []string{nsA + "/github/search_issues", nsA + "/jira/search_tickets"}},
		{tokenB, []string{nsB + "/gitlab"}, []string{nsB + "/gitlab/search_merge_requests"}},
		{tokenNobody, nil, nil},
	} {
		var servers catalog.ServerList
		c.getJSON(t, tc.token, "/api/v1/servers", &servers)
		if got := serverNames(servers); !slices.Equal(got, tc.wantServers) {
			t.Errorf("servers = %q, want %q", got, tc.wantServers)
		}
		var tools catalog.ToolList
		c.getJSON(t, tc.token, "/api/v1/tools?q=search", &tools)
		if got := toolNames(tools); !slices.Equal(got, tc.wantTools) {
			t.Errorf("tools = %q, want %q", got, tc.wantTools)
		}
		if servers.Items == nil || tools.Items == nil {
			t.Errorf("empty results must be [] rather than null")
		}
	}

	var detail catalog.ServerDetail
	c.getJSON(t, tokenA, "/api/v1/namespaces/"+nsA+"/servers/github", &detail)
	if detail.Endpoint != "https://github.example.com/mcp" || len(detail.Tools) != 1 || !detail.Ready {
		t.Errorf("server detail = %+v", detail)
	}
	c.expectError(t, tokenA, "/api/v1/namespaces/"+nsB+"/servers/gitlab", http.StatusForbidden)
	c.expectError(t, tokenA, "/api/v1/servers?namespace="+nsB, http.StatusForbidden)
	c.expectError(t, tokenA, "/api/v1/tools?namespace="+nsB, http.StatusForbidden)
	c.expectError(t, tokenA, "/api/v1/namespaces/"+nsA+"/servers/missing", http.StatusNotFound)

	// Unauthenticated callers: no token, a malformed header, a forged token.
	forged := tokenA[:len(tokenA)-8] + "AAAAAAAA"
	for _, token := range []string{"", "not-a-jwt", forged} {
		for _, path := range []string{"/api/v1/servers", "/api/v1/tools?q=search", "/api/v1/namespaces/" + nsA + "/servers/github"} {
			resp := c.get(t, token, path)
			if resp.code != http.StatusUnauthorized || !strings.Contains(string(resp.body), `"reason":"Unauthorized"`) {
				t.Errorf("GET %s with token %.10q: %d %s, want 401", path, token, resp.code, resp.body)
			}
			if resp.header.Get("WWW-Authenticate") == "" {
				t.Errorf("GET %s: 401 without WWW-Authenticate", path)
			}
		}
	}
	resp := c.get(t, "", "/api/v1/servers", "Authorization: Basic dXNlcjpwYXNz")
	if resp.code != http.StatusUnauthorized {
		t.Errorf("basic auth: %d, want 401", resp.code)
	}
	if code := mcpStatus(t, c, ""); code != http.StatusUnauthorized {
		t.Errorf("MCP without a token: %d, want 401", code)
	}
	if code := mcpStatus(t, c, forged); code != http.StatusUnauthorized {
		t.Errorf("MCP with a forged token: %d, want 401", code)
	}
}
