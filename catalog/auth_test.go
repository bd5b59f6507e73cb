package catalog_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

	// Every token was reviewed once: tokenA, tokenB, nobody and not-a-jwt. Repeats,
	// failures included, came from the cache; the forged one, whose signature does not
	// verify with the cluster's keys, was never reviewed.
	if misses := cacheLookups(t, c, "token", "miss"); misses != 4 {
		t.Errorf("TokenReviews = %v, want 4 (one per distinct token, none for the forged one)", misses)
	}
}

// A caller allowed to list mcpservers cluster-wide sees every namespace.
func TestClusterWideReaderSeesEveryNamespace(t *testing.T) {
	c := startCatalog(t, catalog.AuthTokenReview)
	nsA, nsB := newNamespace(t), newNamespace(t)
	createServer(t, nsA, serverSpec{name: "one"})
	createServer(t, nsB, serverSpec{name: "two"})
	token := newCaller(t, nsA, "cluster-reader", false)
	ctx := context.Background()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: nsA + "-mcpserver-reader"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{mcpv1alpha1.GroupVersion.Group}, Resources: []string{"mcpservers"}, Verbs: []string{"list"},
		}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: nsA, Name: "cluster-reader"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), obj) })
	}
	// The binding reaches the authorizer asynchronously and the catalogue caches a denial
	// for its TTL, so wait for the API server first.
	grantList(t, nsB, nsA, "cluster-reader")
	c.waitServers(t, token, nsA, 1)
	var l catalog.ServerList
	c.getJSON(t, token, "/api/v1/servers?limit=500", &l)
	names := serverNames(l)
	if !slices.Contains(names, nsA+"/one") || !slices.Contains(names, nsB+"/two") {
		t.Errorf("cluster-wide reader sees %q, want both %s/one and %s/two", names, nsA, nsB)
	}
}

// cacheLookups returns the value of the auth cache counter for cache and result.
func cacheLookups(t *testing.T, c *running, cache, result string) float64 {
	t.Helper()
	families, err := c.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "switchboard_catalog_auth_cache_lookups_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["cache"] == cache && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
