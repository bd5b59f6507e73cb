package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

func TestServerFilters(t *testing.T) {
	var (
		mu   sync.Mutex
		logs []string
	)
	c := startCatalog(t, catalog.AuthNone, func(o *catalog.Options) {
		o.Logger = funcr.New(func(prefix, args string) {
			mu.Lock()
			defer mu.Unlock()
			logs = append(logs, prefix+" "+args)
		}, funcr.Options{})
	})
	mu.Lock()
	warned := slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, "authentication is disabled") })
	mu.Unlock()
	if !warned {
		t.Errorf("no warning logged for --catalog-auth=none; logs: %q", logs)
	}
	ns := newNamespace(t)
	createServer(t, ns, serverSpec{name: "a-search", labels: map[string]string{"team": "search", "tier": "prod"}})
	createServer(t, ns, serverSpec{name: "b-search", labels: map[string]string{"team": "search", "tier": "dev"}, transport: mcpv1alpha1.TransportSSE})
	createServer(t, ns, serverSpec{name: "c-files", labels: map[string]string{"team": "files"}, transport: mcpv1alpha1.TransportStdio, notReady: true})
	c.waitServers(t, "", ns, 3)

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"a-search", "b-search", "c-files"}},
		{"labelSelector=team%3Dsearch", []string{"a-search", "b-search"}},
		{"labelSelector=team%3Dsearch,tier!%3Ddev", []string{"a-search"}},
		{"labelSelector=team+in+(files)", []string{"c-files"}},
		{"transport=SSE", []string{"b-search"}},
		{"transport=Stdio", []string{"c-files"}},
		{"ready=true", []string{"a-search", "b-search"}},
		{"ready=false", []string{"c-files"}},
		{"ready=true&transport=StreamableHTTP", []string{"a-search"}},
	} {
		var l catalog.ServerList
		c.getJSON(t, "", "/api/v1/servers?namespace="+ns+"&"+tc.query, &l)
		var got []string
		for _, s := range l.Items {
			got = append(got, s.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.query, got, tc.want)
		}
	}

	// Every entry says where an agent calls the server through the gateway.
	var all catalog.ServerList
	c.getJSON(t, "", "/api/v1/servers?namespace="+ns, &all)
	for _, s := range all.Items {
		if want := "/mcp/namespaces/" + ns + "/servers/" + s.Name; s.GatewayPath != want {
			t.Errorf("%s: gatewayPath %q, want %q", s.Name, s.GatewayPath, want)
		}
	}
	var one catalog.ServerDetail
	c.getJSON(t, "", "/api/v1/namespaces/"+ns+"/servers/c-files", &one)
	if want := "/mcp/namespaces/" + ns + "/servers/c-files"; one.GatewayPath != want {
		t.Errorf("server detail gatewayPath %q, want %q", one.GatewayPath, want)
	}

	for _, bad := range []string{
		"/api/v1/servers?labelSelector=%3D%3D%3D",
		"/api/v1/servers?transport=Carrier-Pigeon",
		"/api/v1/servers?ready=maybe",
		"/api/v1/servers?limit=0",
		"/api/v1/servers?limit=501",
		"/api/v1/servers?limit=ten",
		"/api/v1/servers?namespace=Not_A_Namespace",
		"/api/v1/servers?labelselector=team%3Dsearch",
		"/api/v1/servers?namespace=a&namespace=b",
		"/api/v1/servers?continue=garbage",
		"/api/v1/tools?q=" + strings.Repeat("x", catalog.MaxQueryLength+1),
		"/api/v1/tools?readOnly=yes-please",
	} {
		c.expectError(t, "", bad, http.StatusBadRequest)
	}
	c.expectError(t, "", "/api/v1/tools?q="+strings.Repeat("x", 5000), http.StatusRequestURITooLong)
	c.expectError(t, "", "/api/v1/nothing-here", http.StatusNotFound)
	c.expectError(t, "", "/api/v1/namespaces/"+ns+"/servers/missing", http.StatusNotFound)

	// Only GET and HEAD.
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, c.base+"/api/v1/servers", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") == "" {
		t.Errorf("POST: %d allow %q, want 405 with Allow", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestSearchRanksAndFilters(t *testing.T) {
	c := startCatalog(t, catalog.AuthNone)
	ns := newNamespace(t)
	createServer(t, ns, serverSpec{name: "alpha", tools: []mcpv1alpha1.ToolInfo{
		tool("create_issue", "Open a ticket", "Creates a new issue in the tracker"),
		tool("get_weather", "", "Current conditions"),
		{Name: "list_issues", Description: "Lists issues", ReadOnlyHint: new(true)},
	}})
	createServer(t, ns, serverSpec{name: "beta", tools: []mcpv1alpha1.ToolInfo{
		tool("forecast", "Weather forecast", ""),
		tool("summarize", "", "Summarizes the weather for a city"),
	}, notReady: true})
	createServer(t, ns, serverSpec{name: "weather-hub", description: "Everything weather", tools: []mcpv1alpha1.ToolInfo{tool("ping", "", "")}})

	c.waitServers(t, "", ns, 3)
	var l catalog.ToolList
	want := []string{ns + "/alpha/get_weather", ns + "/beta/forecast", ns + "/beta/summarize", ns + "/weather-hub/ping"}
	c.getJSON(t, "", "/api/v1/tools?namespace="+ns+"&q=weather", &l)
	if !slices.Equal(toolNames(l), want) {
		t.Fatalf("weather search = %q, want %q", toolNames(l), want)
	}
	if m := l.Items[0]; m.Server.Endpoint != "https://alpha.example.com/mcp" || m.Server.Transport != "StreamableHTTP" || !m.Server.Ready ||
		m.Server.GatewayPath != "/mcp/namespaces/"+ns+"/servers/alpha" {
		t.Errorf("match carries its server: %+v", m.Server)
	}

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"q=issue", []string{"alpha/create_issue", "alpha/list_issues"}},
		{"q=issue&readOnly=true", []string{"alpha/list_issues"}},
		{"q=issue&readOnly=false", []string{"alpha/create_issue"}},
		{"q=ticket", []string{"alpha/create_issue"}},
		{"q=weather&ready=false", []string{"beta/forecast", "beta/summarize"}},
		{"q=SUMMARIZE", []string{"beta/summarize"}},
		{"q=weather+city", []string{"beta/summarize"}},
		{"q=nothing-matches-this", nil},
	} {
		c.getJSON(t, "", "/api/v1/tools?namespace="+ns+"&"+tc.query, &l)
		var got []string
		for _, m := range l.Items {
			got = append(got, m.Server.Name+"/"+m.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.query, got, tc.want)
		}
	}
}

// Pages stay consistent while servers come and go: no item is returned twice, and every
// item that existed throughout is returned.
func TestPaginationAcrossUpdates(t *testing.T) {
	c := startCatalog(t, catalog.AuthNone)
	ns := newNamespace(t)
	for _, name := range []string{"s02", "s04", "s06", "s08", "s10", "s12", "s14"} {
		createServer(t, ns, serverSpec{name: name, tools: []mcpv1alpha1.ToolInfo{tool("lookup", "", ""), tool("lookup_more", "", "")}})
	}
	c.waitServers(t, "", ns, 7)

	var page catalog.ServerList
	c.getJSON(t, "", "/api/v1/servers?namespace="+ns+"&limit=3", &page)
	got := serverNames(page)
	var tools catalog.ToolList
	c.getJSON(t, "", "/api/v1/tools?q=lookup&namespace="+ns+"&limit=5", &tools)
	gotTools := toolNames(tools)

	// Between pages: one server appears before the cursor, one after, one is deleted.
	createServer(t, ns, serverSpec{name: "s01", tools: []mcpv1alpha1.ToolInfo{tool("lookup", "", "")}})
	createServer(t, ns, serverSpec{name: "s13", tools: []mcpv1alpha1.ToolInfo{tool("lookup", "", "")}})
	del := &mcpv1alpha1.MCPServer{}
	del.Namespace, del.Name = ns, "s10"
	if err := k8sClient.Delete(context.Background(), del); err != nil {
		t.Fatal(err)
	}
	c.waitServers(t, "", ns, 8)

	for i := 0; page.Continue != "" && i < 10; i++ {
		cont := page.Continue
		page = catalog.ServerList{}
		c.getJSON(t, "", "/api/v1/servers?namespace="+ns+"&limit=3&continue="+cont, &page)
		got = append(got, serverNames(page)...)
	}
	want := []string{ns + "/s02", ns + "/s04", ns + "/s06", ns + "/s08", ns + "/s12", ns + "/s13", ns + "/s14"}
	if !slices.Equal(got, want) {
		t.Errorf("server pages = %q, want %q", got, want)
	}

	for i := 0; tools.Continue != "" && i < 10; i++ {
		cont := tools.Continue
		tools = catalog.ToolList{}
		c.getJSON(t, "", "/api/v1/tools?q=lookup&namespace="+ns+"&limit=5&continue="+cont, &tools)
		gotTools = append(gotTools, toolNames(tools)...)
	}
	// Exact name matches ("lookup") rank first, then prefix matches ("lookup_more").
	var wantTools []string
	for _, s := range []string{"s02", "s04", "s06", "s08", "s12", "s13", "s14"} {
		wantTools = append(wantTools, ns+"/"+s+"/lookup")
	}
	for _, s := range []string{"s02", "s04", "s06", "s08", "s12", "s14"} {
		wantTools = append(wantTools, ns+"/"+s+"/lookup_more")
	}
	// s10 was deleted after the first page, which it was on.
	wantTools = slices.Insert(wantTools, 4, ns+"/s10/lookup")
	if !slices.Equal(gotTools, wantTools) {
		t.Errorf("tool pages = %q, want %q", gotTools, wantTools)
	}

	// A continue token belongs to its query.
	c.getJSON(t, "", "/api/v1/servers?namespace="+ns+"&limit=1", &page)
	c.expectError(t, "", "/api/v1/servers?namespace="+ns+"&transport=SSE&continue="+page.Continue, http.StatusBadRequest)
}

func TestETag(t *testing.T) {
	c := startCatalog(t, catalog.AuthNone)
	ns := newNamespace(t)
	obj := createServer(t, ns, serverSpec{name: "etag", tools: []mcpv1alpha1.ToolInfo{tool("one", "", "")}})
	path := "/api/v1/namespaces/" + ns + "/servers/etag"
	c.waitServers(t, "", ns, 1)
	first := c.get(t, "", path)
	etag := first.header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag} {
		resp := c.get(t, "", path, "If-None-Match: "+inm)
		if resp.code != http.StatusNotModified || len(resp.body) != 0 || resp.header.Get("ETag") != etag {
			t.Errorf("If-None-Match %s: %d %q", inm, resp.code, resp.body)
		}
	}
	if resp := c.get(t, "", path, `If-None-Match: "other"`); resp.code != http.StatusOK {
		t.Errorf("a stale ETag: %d, want 200", resp.code)
	}
	for _, list := range []string{"/api/v1/servers?namespace=" + ns, "/api/v1/tools?namespace=" + ns} {
		resp := c.get(t, "", list)
		if resp.code != http.StatusOK {
			t.Fatalf("%s: %d", list, resp.code)
		}
		if again := c.get(t, "", list, "If-None-Match: "+resp.header.Get("ETag")); again.code != http.StatusNotModified {
			t.Errorf("%s: %d, want 304", list, again.code)
		}
	}

	// A change gives a new ETag.
	obj.Status.Tools = append(obj.Status.Tools, tool("two", "", ""))
	obj.Status.ToolCount = 2
	if err := k8sClient.Status().Update(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "a new ETag after the change", func() error {
		if code := c.get(t, "", path, "If-None-Match: "+etag).code; code != http.StatusOK {
			return fmt.Errorf("status %d for the old ETag", code)
		}
		return nil
	})
}

func TestOpenAPIAndMetrics(t *testing.T) {
	c := startCatalog(t, catalog.AuthTokenReview)
	resp := c.get(t, "", "/api/v1/openapi.json")
	if resp.code != http.StatusOK {
		t.Fatalf("openapi.json without a token: %d", resp.code)
	}
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(resp.body, &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/api/v1/servers", "/api/v1/namespaces/{namespace}/servers/{name}", "/api/v1/tools", "/api/v1/toolsets"} {
		if _, ok := doc.Paths[p]["get"]; !ok {
			t.Errorf("openapi.json does not describe GET %s", p)
		}
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi version %q", doc.OpenAPI)
	}

	c.get(t, "", "/api/v1/tools?q=x")
	c.get(t, "", "/api/v1/servers")
	n, err := promtestutil.GatherAndCount(c.registry, "switchboard_catalog_requests_total", "switchboard_catalog_request_duration_seconds", "switchboard_catalog_index_entries")
	if err != nil {
		t.Fatal(err)
	}
	if n < 3+2+3 {
		t.Errorf("metric series = %d, want requests and latency for 3 routes and 3 index sizes", n)
	}
	families, err := c.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, f := range families {
		if f.GetName() != "switchboard_catalog_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == "tools" && labels["code"] == "401" && m.GetCounter().GetValue() == 1 {
				found = true
			}
		}
	}
	if !found {
		t.Error("no requests_total{route=tools,code=401} = 1")
	}
}

// Request bodies are bounded: an oversized MCP message is refused before it is parsed.
func TestRequestBodiesAreBounded(t *testing.T) {
	c := startCatalog(t, catalog.AuthNone)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"pad":"` + strings.Repeat("x", 128<<10) + `"}}`
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, c.base+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("128 KiB MCP request: %d, want 413", resp.StatusCode)
	}
}
