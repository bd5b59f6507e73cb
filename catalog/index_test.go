package catalog

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

func testServer(ns, name, desc string, tools ...mcpv1alpha1.ToolInfo) *mcpv1alpha1.MCPServer {
	return &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       mcpv1alpha1.MCPServerSpec{Description: desc},
		Status:     mcpv1alpha1.MCPServerStatus{Tools: tools, ToolCount: int32(len(tools))},
	}
}

func toolNames(ms []match) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.tool.server.key.name+"/"+m.tool.tool.Name)
	}
	return out
}

func everyTool(*toolEntry) bool { return true }

func TestTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"search_issues", []string{"search", "issues"}},
		{"getUserInfo now", []string{"getuserinfo", "get", "user", "info", "now"}},
		{"Créer un fichier", []string{"créer", "un", "fichier"}},
		{"a--b  a", []string{"a", "b"}},
		{"", nil},
	} {
		if got := tokens(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("tokens(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSearchRanksNameAboveTitleAboveDescription(t *testing.T) {
	t.Parallel()
	ix := newIndex()
	ix.upsert(newServerEntry(testServer("a", "s1", "",
		mcpv1alpha1.ToolInfo{Name: "list_files", Description: "Lists the weather of files"},
		mcpv1alpha1.ToolInfo{Name: "forecast", Title: "Weather forecast"},
		mcpv1alpha1.ToolInfo{Name: "get_weather"},
		mcpv1alpha1.ToolInfo{Name: "other"},
	)))
	ix.upsert(newServerEntry(testServer("a", "weather-station", "", mcpv1alpha1.ToolInfo{Name: "ping"})))
	ix.upsert(newServerEntry(testServer("a", "s3", "", mcpv1alpha1.ToolInfo{Name: "weather"})))
	ix.upsert(newServerEntry(testServer("a", "s4", "Weather data", mcpv1alpha1.ToolInfo{Name: "pong"})))

	got, more := ix.searchTools(parseQuery("weather"), nil, 10, everyTool)
	want := []string{"s3/weather", "s1/get_weather", "s1/forecast", "s1/list_files", "s4/pong", "weather-station/ping"}
	if !slices.Equal(toolNames(got), want) || more {
		t.Fatalf("search weather = %q (more %v), want %q", toolNames(got), more, want)
	}
	// Prefixes match, and every term must match.
	got, _ = ix.searchTools(parseQuery("weath file"), nil, 10, everyTool)
	if want := []string{"s1/list_files"}; !slices.Equal(toolNames(got), want) {
		t.Fatalf("search 'weath file' = %q, want %q", toolNames(got), want)
	}
}

func TestIndexFollowsUpdatesAndDeletes(t *testing.T) {
	t.Parallel()
	ix := newIndex()
	ix.upsert(newServerEntry(testServer("b", "x", "", mcpv1alpha1.ToolInfo{Name: "alpha"})))
	ix.upsert(newServerEntry(testServer("a", "x", "", mcpv1alpha1.ToolInfo{Name: "alpha"}, mcpv1alpha1.ToolInfo{Name: "beta"})))
	ix.upsert(newServerEntry(testServer("a", "x", "", mcpv1alpha1.ToolInfo{Name: "gamma"})))

	if got, _ := ix.searchTools(parseQuery("beta"), nil, 10, everyTool); len(got) != 0 {
		t.Fatalf("a removed tool is still found: %q", toolNames(got))
	}
	all, _ := ix.searchTools(parseQuery(""), nil, 10, everyTool)
	if want := []string{"x/gamma", "x/alpha"}; !slices.Equal(toolNames(all), want) {
		t.Fatalf("all tools = %q, want %q", toolNames(all), want)
	}
	if ns := ix.Namespaces(); !slices.Equal(ns, []string{"a", "b"}) {
		t.Fatalf("namespaces = %q", ns)
	}
	ix.delete(serverKey{"b", "x"})
	if ns := ix.Namespaces(); !slices.Equal(ns, []string{"a"}) {
		t.Fatalf("namespaces after delete = %q", ns)
	}
	if len(ix.tools.vocab) != 1 || ix.tools.vocab[0] != "gamma" {
		t.Fatalf("vocabulary after delete = %q, want only gamma", ix.tools.vocab)
	}
}

func TestSearchPagesWithCursor(t *testing.T) {
	t.Parallel()
	ix := newIndex()
	for i := range 7 {
		ix.upsert(newServerEntry(testServer("ns", fmt.Sprintf("s%d", i), "",
			mcpv1alpha1.ToolInfo{Name: "find_thing"}, mcpv1alpha1.ToolInfo{Name: "other", Description: "find"})))
	}
	for _, q := range []string{"find", ""} {
		var seen []string
		var after *toolCursor
		for range 20 {
			page, more := ix.searchTools(parseQuery(q), after, 3, everyTool)
			seen = append(seen, toolNames(page)...)
			if !more {
				break
			}
			last := page[len(page)-1]
			after = &toolCursor{score: last.score, key: last.tool.server.key, tool: last.tool.tool.Name}
		}
		full, _ := ix.searchTools(parseQuery(q), nil, 100, everyTool)
		if !slices.Equal(seen, toolNames(full)) || len(seen) != 14 {
			t.Fatalf("query %q: pages = %q, want %q", q, seen, toolNames(full))
		}
	}
}

func TestRedactEndpoint(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://mcp.example.com/mcp":                    "https://mcp.example.com/mcp",
		"https://user:pw@mcp.example.com/mcp?key=s3cr3t": "https://mcp.example.com/mcp",
		"http://10.0.0.1:8080/mcp?#frag":                 "http://10.0.0.1:8080/mcp",
		"not a url":                                      "",
		"https://%zz/":                                   "",
		"":                                               "",
	} {
		if got := redactEndpoint(in); got != want {
			t.Errorf("redactEndpoint(%q) = %q, want %q", in, got, want)
		}
	}
}

// After any sequence of upserts and deletes, the incrementally maintained index answers
// exactly like one built from scratch with the surviving servers.
func TestIncrementalIndexMatchesRebuild(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	words := []string{"alpha", "beta", "gamma", "delta", "alps", "betamax", "gam"}
	randomServer := func(name string) *mcpv1alpha1.MCPServer {
		var tools []mcpv1alpha1.ToolInfo
		for i := range rng.IntN(5) {
			w := func() string { return words[rng.IntN(len(words))] }
			tools = append(tools, mcpv1alpha1.ToolInfo{Name: fmt.Sprintf("%s_%d", w(), i), Title: w(), Description: w() + " " + w()})
		}
		return testServer(fmt.Sprintf("ns%d", rng.IntN(3)), name, words[rng.IntN(len(words))], tools...)
	}
	live := newIndex()
	current := map[string]*mcpv1alpha1.MCPServer{}
	for range 400 {
		name := fmt.Sprintf("s%d", rng.IntN(12))
		if rng.IntN(4) == 0 {
			if obj, ok := current[name]; ok {
				live.delete(serverKey{obj.Namespace, obj.Name})
				delete(current, name)
			}
			continue
		}
		if old, ok := current[name]; ok {
			live.delete(serverKey{old.Namespace, old.Name})
		}
		obj := randomServer(name)
		current[name] = obj
		live.upsert(newServerEntry(obj))
	}
	rebuilt := newIndex()
	for _, obj := range current {
		rebuilt.upsert(newServerEntry(obj))
	}
	if !slices.Equal(live.tools.vocab, rebuilt.tools.vocab) || !slices.Equal(live.serverText.vocab, rebuilt.serverText.vocab) {
		t.Fatalf("vocabularies differ:\n%q\n%q", live.tools.vocab, rebuilt.tools.vocab)
	}
	for _, q := range append(words, "", "al", "a", "beta gam", "zzz") {
		got, _ := live.searchTools(parseQuery(q), nil, 1000, everyTool)
		want, _ := rebuilt.searchTools(parseQuery(q), nil, 1000, everyTool)
		if !slices.Equal(toolNames(got), toolNames(want)) {
			t.Errorf("query %q: incremental %q, rebuilt %q", q, toolNames(got), toolNames(want))
		}
	}
}
