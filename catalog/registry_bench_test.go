package catalog_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// Registry benchmark shape, from issue 51: 1,000 servers (10 tools each) in
// benchNamespaces namespaces, GET /v0.1/servers?search= at benchRate requests per second
// on loopback with authentication cached, beside the catalogue's own tool search over
// the same servers in the same run.
const registryBenchServers = 1000

var registryBenchSearches = []string{"", "server-0", "server-05", "7", "42", "server-999", "bench-", "nothing-matches", "3", "server-1"}

// BenchmarkRegistrySearchLoopback measures GET /v0.1/servers?search= and the catalogue's
// GET /api/v1/tools?q= in alternating one-second rounds. Run it alone:
//
//	go test -run '^$' -bench BenchmarkRegistrySearchLoopback -benchtime 1x ./catalog/
func BenchmarkRegistrySearchLoopback(b *testing.B) {
	var namespaces []string
	for range benchNamespaces {
		namespaces = append(namespaces, newNamespace(b))
	}
	for i := range registryBenchServers {
		var tools []mcpv1alpha1.ToolInfo
		for k := range 10 {
			verb, noun := benchVerbs[(i+k)%len(benchVerbs)], benchNouns[(i*7+k)%len(benchNouns)]
			tools = append(tools, tool(fmt.Sprintf("%s_%s_%d", verb, noun, k), verb+" "+noun, "Benchmark tool that can "+verb+" the "+noun))
		}
		slices.SortFunc(tools, func(a, b mcpv1alpha1.ToolInfo) int {
			if a.Name < b.Name {
				return -1
			}
			return 1
		})
		createServer(b, namespaces[i%benchNamespaces], serverSpec{
			name: fmt.Sprintf("server-%03d", i), description: "Benchmark server for " + benchNouns[i%len(benchNouns)], tools: tools,
		})
	}
	token := newCaller(b, namespaces[0], "bench-agent", true)
	for _, ns := range namespaces {
		if ns != namespaces[0] {
			grantList(b, ns, namespaces[0], "bench-agent")
		}
		grantUse(b, ns, namespaces[0], "bench-agent", "mcpservers")
	}
	metadata, err := catalog.NewResourceMetadata(registryPublicURL, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	c := startCatalog(b, catalog.AuthTokenReview, func(o *catalog.Options) {
		o.AuthCacheTTL = 10 * time.Minute
		o.ResourceMetadata = metadata
	})
	testutil.Eventually(b, 60*time.Second, "every server in the registry with its status", func() error {
		names, all := c.registryAll(b, token, "/v0.1/servers?limit=100")
		for _, s := range all {
			if s.Meta.Status.ToolCount != 10 {
				return fmt.Errorf("%s has no status yet", s.Server.Name)
			}
		}
		if len(names) != registryBenchServers {
			return fmt.Errorf("%d servers listed", len(names))
		}
		return nil
	})

	var registryPaths, toolPaths []string
	var size int
	for _, q := range registryBenchSearches {
		p := "/v0.1/servers?search=" + url.QueryEscape(q)
		resp := c.get(b, token, p)
		if resp.code != http.StatusOK {
			b.Fatalf("GET %s: %d %s", p, resp.code, resp.body)
		}
		size += len(resp.body)
		registryPaths = append(registryPaths, p)
	}
	for _, q := range benchQueries {
		p := "/api/v1/tools?q=" + url.QueryEscape(q)
		if resp := c.get(b, token, p); resp.code != http.StatusOK {
			b.Fatalf("GET %s: %d %s", p, resp.code, resp.body)
		}
		toolPaths = append(toolPaths, p)
	}

	reg, cat := alternateLoad(b, token, loadTarget{c.base, registryPaths}, loadTarget{c.base, toolPaths})
	if len(reg.latencies) == 0 || len(cat.latencies) == 0 {
		b.Fatalf("no request succeeded: registry errors %d, catalogue errors %d", reg.errors, cat.errors)
	}
	slices.Sort(reg.latencies)
	slices.Sort(cat.latencies)
	fmt.Printf("registry search: %d servers in %d namespaces, %d searches (mean answer %d bytes, page of %d), %d req/s offered for %s\n",
		registryBenchServers, benchNamespaces, len(registryPaths), size/len(registryPaths), catalog.DefaultRegistryLimit, benchRate, benchDuration)
	for _, r := range []struct {
		name string
		res  *loadResult
	}{{"registry /v0.1/servers?search=:", &reg}, {"catalogue /api/v1/tools?q=:     ", &cat}} {
		fmt.Printf("  %s p50 %7.3f ms  p90 %7.3f ms  p99 %7.3f ms  max %7.3f ms  %6.0f req/s  %d requests, %d errors\n",
			r.name, ms(r.res.percentile(50)), ms(r.res.percentile(90)), ms(r.res.percentile(99)),
			ms(r.res.latencies[len(r.res.latencies)-1]), r.res.throughput(), len(r.res.latencies), r.res.errors)
	}
	fmt.Println("  (target: registry p99 under 10 ms)")
	b.ReportMetric(ms(reg.percentile(50)), "p50-ms")
	b.ReportMetric(ms(reg.percentile(99)), "p99-ms")
	b.ReportMetric(reg.throughput(), "req/s")
	b.ReportMetric(ms(cat.percentile(50)), "catalogue-p50-ms")
	b.ReportMetric(ms(cat.percentile(99)), "catalogue-p99-ms")
	if reg.errors > 0 || cat.errors > 0 {
		b.Errorf("errors: registry %d, catalogue %d", reg.errors, cat.errors)
	}
}
