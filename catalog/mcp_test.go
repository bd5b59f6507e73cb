package catalog_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
)

// An agent with any MCP client gets the same answers over MCP as over REST, scoped to
// what its token may see.
func TestMCPMatchesREST(t *testing.T) {
	c := startCatalog(t, catalog.AuthTokenReview)
	ns, other := newNamespace(t), newNamespace(t)
	createServer(t, ns, serverSpec{name: "docs", description: "Documentation search", tools: []mcpv1alpha1.ToolInfo{
		tool("search_docs", "Search documentation", "Full-text search over the docs"),
		{Name: "read_page", Title: "Read a page", Description: "Returns one page of the docs", ReadOnlyHint: new(true)},
	}})
	createServer(t, ns, serverSpec{name: "code", labels: map[string]string{"team": "dev"}, tools: []mcpv1alpha1.ToolInfo{
		tool("search_code", "", "Search the code base"),
	}})
	createServer(t, other, serverSpec{name: "secret-project", tools: []mcpv1alpha1.ToolInfo{tool("search_secrets", "", "")}})
	token := newCaller(t, ns, "agent", true)
	c.waitServers(t, token, ns, 2)

	// Both protocol eras get the same answers: 2026-07-28 without a session, 2025-11-25
	// after initialize.
	for _, version := range []string{statelessEra, sessionEra} {
		t.Run(version, func(t *testing.T) {
			session := mcpSessionAt(t, c, token, version)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			listed, err := session.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range listed.Tools {
				names = append(names, tl.Name)
				if tl.Description == "" || tl.InputSchema == nil || tl.OutputSchema == nil {
					t.Errorf("tool %s lacks a description or schemas", tl.Name)
				}
			}
			slices.Sort(names)
			if want := []string{"get_server", "list_servers", "list_toolsets", "search_tools"}; !slices.Equal(names, want) {
				t.Fatalf("MCP tools = %q, want %q", names, want)
			}

			for _, tc := range []struct {
				args map[string]any
				rest string
			}{
				{map[string]any{"query": "search"}, "/api/v1/tools?q=search"},
				{map[string]any{"query": "docs page"}, "/api/v1/tools?q=docs+page"},
				{map[string]any{"query": "", "readOnly": true}, "/api/v1/tools?readOnly=true"},
				{map[string]any{"query": "search", "namespace": ns, "limit": 1}, "/api/v1/tools?q=search&namespace=" + ns + "&limit=1"},
			} {
				var viaMCP, viaREST catalog.ToolList
				if res := callTool(t, session, "search_tools", tc.args, &viaMCP); res.IsError {
					t.Fatalf("search_tools %v: %v", tc.args, res.Content)
				}
				c.getJSON(t, token, tc.rest, &viaREST)
				if !reflect.DeepEqual(viaMCP, viaREST) || len(viaREST.Items) == 0 {
					t.Errorf("search_tools %v = %+v, REST %s = %+v", tc.args, viaMCP, tc.rest, viaREST)
				}
				for _, m := range viaMCP.Items {
					if m.Server.Namespace != ns {
						t.Errorf("result from a namespace the caller may not list: %+v", m.Server)
					}
					if want := "/mcp/namespaces/" + ns + "/servers/" + m.Server.Name; m.Server.GatewayPath != want {
						t.Errorf("search_tools: %s gatewayPath %q, want %q", m.Name, m.Server.GatewayPath, want)
					}
				}
			}

			var servers, restServers catalog.ServerList
			callTool(t, session, "list_servers", map[string]any{"labelSelector": "team=dev"}, &servers)
			c.getJSON(t, token, "/api/v1/servers?labelSelector=team%3Ddev", &restServers)
			if !reflect.DeepEqual(servers, restServers) || len(servers.Items) != 1 || servers.Items[0].Name != "code" ||
				servers.Items[0].GatewayPath != "/mcp/namespaces/"+ns+"/servers/code" {
				t.Errorf("list_servers = %+v, REST = %+v", servers, restServers)
			}
			var detail, restDetail catalog.ServerDetail
			callTool(t, session, "get_server", map[string]any{"namespace": ns, "name": "docs"}, &detail)
			c.getJSON(t, token, "/api/v1/namespaces/"+ns+"/servers/docs", &restDetail)
			if !reflect.DeepEqual(detail, restDetail) || len(detail.Tools) != 2 || detail.GatewayPath != "/mcp/namespaces/"+ns+"/servers/docs" {
				t.Errorf("get_server = %+v, REST = %+v", detail, restDetail)
			}

			// Errors come back as tool errors a model can read.
			res := callTool(t, session, "get_server", map[string]any{"namespace": other, "name": "secret-project"}, nil)
			if !res.IsError || !strings.Contains(toolText(res), "cannot list mcpservers") {
				t.Errorf("get_server in a forbidden namespace: %+v", res)
			}
			res = callTool(t, session, "search_tools", map[string]any{"query": "x", "limit": 1000}, nil)
			if !res.IsError || !strings.Contains(toolText(res), "limit") {
				t.Errorf("search_tools with limit 1000: %+v", res)
			}
		})
	}
}

func toolText(res *mcp.CallToolResult) string {
	b, _ := json.Marshal(res.Content)
	return string(b)
}
