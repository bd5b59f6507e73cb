package catalog

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// benchIndex builds an index of 500 servers with 20 tools each.
func benchIndex() *index {
	rng := rand.New(rand.NewPCG(1, 2))
	verbs := strings.Fields("get list create update delete search find sync export import summarize translate analyze validate render schedule notify archive restore compare")
	nouns := strings.Fields("issue pull_request repository file user invoice ticket weather forecast calendar event document page dataset model metric alert deployment pod secret_scan email message channel order customer payment report image video transcript")
	words := strings.Fields("the a for with from into of on by and or returns given current latest all matching filtered paginated structured summary details status history owner project team region cluster account workspace folder branch commit label comment review release build pipeline job query index table record field schema version audit log trace span budget quota limit")
	ix := newIndex()
	for i := range 500 {
		var tools []mcpv1alpha1.ToolInfo
		seen := map[string]bool{}
		for len(tools) < 20 {
			verb, noun := verbs[rng.IntN(len(verbs))], nouns[rng.IntN(len(nouns))]
			if seen[verb+"_"+noun] {
				continue
			}
			seen[verb+"_"+noun] = true
			desc := make([]string, 16)
			for k := range desc {
				desc[k] = words[rng.IntN(len(words))]
			}
			tools = append(tools, mcpv1alpha1.ToolInfo{Name: verb + "_" + noun, Title: verb + " " + noun, Description: strings.Join(desc, " ") + " " + noun})
		}
		ix.upsert(newServerEntry(testServer(fmt.Sprintf("ns-%d", i%5), fmt.Sprintf("server-%03d", i), "Benchmark server", tools...)))
	}
	return ix
}

func BenchmarkIndexSearch(b *testing.B) {
	ix := benchIndex()
	for _, q := range []string{"issue", "search", "create ticket", "the", "val", "a", ""} {
		pq := parseQuery(q)
		b.Run(strings.ReplaceAll(q, " ", "_")+"_", func(b *testing.B) {
			for b.Loop() {
				ix.searchTools(pq, nil, DefaultLimit, everyTool)
			}
		})
	}
}

func BenchmarkIndexUpsert(b *testing.B) {
	ix := benchIndex()
	obj := testServer("ns-0", "server-250", "Benchmark server",
		mcpv1alpha1.ToolInfo{Name: "get_issue", Description: "Returns one issue"},
		mcpv1alpha1.ToolInfo{Name: "list_issues", Description: "Lists issues"})
	for b.Loop() {
		ix.upsert(newServerEntry(obj))
	}
}

// fleetBenchServers is the fleet size of the churn and search benchmarks.
const fleetBenchServers = 10000

// fleetIndex returns an index of the first n servers of the fleet, and the servers.
func fleetIndex(n int) (*index, []*mcpv1alpha1.MCPServer) {
	objs := make([]*mcpv1alpha1.MCPServer, n)
	ix := newIndex()
	for i := range objs {
		objs[i] = fleetServer(i)
		ix.upsert(newServerEntry(objs[i]))
	}
	return ix, objs
}

// BenchmarkFleetChurn measures the informer's events against a fleet of 10,000 servers:
// an update that replaces a server, and a delete followed by an add.
func BenchmarkFleetChurn(b *testing.B) {
	ix, objs := fleetIndex(fleetBenchServers)
	b.Run("update", func(b *testing.B) {
		i := 0
		for b.Loop() {
			ix.upsert(newServerEntry(objs[i%len(objs)]))
			i += 7919 // a prime: updates land all over the key order
		}
	})
	b.Run("delete_add", func(b *testing.B) {
		i := 0
		for b.Loop() {
			obj := objs[i%len(objs)]
			ix.delete(serverKey{namespace: obj.Namespace, name: obj.Name})
			ix.upsert(newServerEntry(obj))
			i += 7919
		}
	})
}

// BenchmarkFleetDeleteAll measures removing every server of a 10,000 server fleet, as
// when the catalogue's informer loses a namespace or the fleet is torn down.
func BenchmarkFleetDeleteAll(b *testing.B) {
	for range b.N {
		b.StopTimer()
		ix, objs := fleetIndex(fleetBenchServers)
		b.StartTimer()
		for _, obj := range objs {
			ix.delete(serverKey{namespace: obj.Namespace, name: obj.Name})
		}
	}
}

// BenchmarkFleetSearch measures searches of a 10,000 server fleet, and of the same fleet
// after 4,000 of its servers were removed, so that searches step over what they left.
func BenchmarkFleetSearch(b *testing.B) {
	ix, objs := fleetIndex(fleetBenchServers)
	queries := []string{"issue", "pull request", "search code", "re", "github-01234", ""}
	run := func(b *testing.B) {
		for _, q := range queries {
			pq := parseQuery(q)
			b.Run(strings.ReplaceAll(q, " ", "_")+"_", func(b *testing.B) {
				for b.Loop() {
					ix.searchTools(pq, nil, DefaultLimit, everyTool)
				}
			})
		}
	}
	b.Run("full", run)
	for _, obj := range objs[:4000] {
		ix.delete(serverKey{namespace: obj.Namespace, name: obj.Name})
	}
	b.Run("after_removals", run)
}
