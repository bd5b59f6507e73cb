package catalog_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
)

// Benchmark shape, from issue 6: 10,000 tools across 500 servers, searched at 1,000
// requests/s on loopback with authentication cached, against a bare net/http handler
// that returns a precomputed response of the same size.
const (
	benchServers        = 500
	benchToolsPerServer = 20
	benchNamespaces     = 5
	benchRate           = 1000 // requests per second, open loop
	benchDuration       = 5 * time.Second
	benchWorkers        = 64
)

var (
	benchVerbs = []string{"get", "list", "create", "update", "delete", "search", "find", "sync", "export", "import",
		"summarize", "translate", "analyze", "validate", "render", "schedule", "notify", "archive", "restore", "compare"}
	benchNouns = []string{"issue", "pull_request", "repository", "file", "user", "invoice", "ticket", "weather",
		"forecast", "calendar", "event", "document", "page", "dataset", "model", "metric", "alert", "deployment",
		"pod", "secret_scan", "email", "message", "channel", "order", "customer", "payment", "report", "image",
		"video", "transcript"}
	benchWords = strings.Fields("the a for with from into of on by and or returns given current latest all " +
		"matching filtered paginated structured summary details status history owner project team region " +
		"cluster account workspace folder branch commit label comment review release build pipeline job " +
		"query index table record field schema version audit log trace span budget quota limit")
	benchQueries = []string{"issue", "create ticket", "weather forecast", "search", "repository branch",
		"list users", "invoice payment", "deploy", "summarize document", "alert metric", "email", "pod",
		"export dataset", "calendar event", "translate", "audit log", "customer order", "release", "image", "val"}
)

// populateBench creates the benchmark's servers in benchNamespaces namespaces and returns
// the namespaces.
func populateBench(b *testing.B) []string {
	b.Helper()
	rng := rand.New(rand.NewPCG(6, 6))
	var namespaces []string
	for range benchNamespaces {
		namespaces = append(namespaces, newNamespace(b))
	}
	for i := range benchServers {
		var tools []mcpv1alpha1.ToolInfo
		seen := map[string]bool{}
		for len(tools) < benchToolsPerServer {
			verb, noun := benchVerbs[rng.IntN(len(benchVerbs))], benchNouns[rng.IntN(len(benchNouns))]
			name := verb + "_" + noun
			if seen[name] {
				continue
			}
			seen[name] = true
			words := make([]string, 12+rng.IntN(12))
			for k := range words {
				words[k] = benchWords[rng.IntN(len(benchWords))]
			}
			tools = append(tools, mcpv1alpha1.ToolInfo{
				Name:         name,
				Title:        strings.ToUpper(verb[:1]) + verb[1:] + " " + strings.ReplaceAll(noun, "_", " "),
				Description:  strings.Join(words[:4], " ") + " " + noun + " " + strings.Join(words[4:], " "),
				ReadOnlyHint: new(verb == "get" || verb == "list" || verb == "search" || verb == "find"),
			})
		}
		slices.SortFunc(tools, func(a, b mcpv1alpha1.ToolInfo) int { return strings.Compare(a.Name, b.Name) })
		createServer(b, namespaces[i%benchNamespaces], serverSpec{
			name:        fmt.Sprintf("server-%03d", i),
			description: "Benchmark server for " + benchNouns[i%len(benchNouns)],
			tools:       tools,
		})
	}
	return namespaces
}

// loadResult is what the fixed-rate runs against one target measured.
type loadResult struct {
	latencies []time.Duration
	elapsed   time.Duration
	errors    int
}

func (r *loadResult) percentile(p int) time.Duration {
	return r.latencies[len(r.latencies)*p/100]
}

func (r *loadResult) throughput() float64 {
	return float64(len(r.latencies)) / r.elapsed.Seconds()
}

// loadTarget is one side of an alternating load: a base URL and the paths to cycle
// through.
type loadTarget struct {
	base  string
	paths []string
}

// alternateLoad runs benchDuration of one-second rounds against first and second by
// turns, so that whatever else runs on the machine weighs on both alike, and returns
// what each measured. The benchmark's timer runs only meanwhile.
func alternateLoad(b *testing.B, token string, first, second loadTarget) (loadResult, loadResult) {
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: benchWorkers,
		MaxConnsPerHost:     benchWorkers,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	var one, two loadResult
	b.ResetTimer()
	for range int(benchDuration / time.Second) {
		runLoad(client, first.base, token, first.paths, &one)
		runLoad(client, second.base, token, second.paths, &two)
	}
	b.StopTimer()
	return one, two
}

// loadRound is how long one runLoad sends requests.
const loadRound = time.Second

// runLoad sends benchRate requests per second for loadRound to base, cycling through paths, and
// adds to res each latency measured from the request's scheduled start, so a stalled
// server cannot hide queueing delay.
func runLoad(client *http.Client, base, token string, paths []string, res *loadResult) {
	total := int(loadRound.Seconds() * benchRate)
	interval := time.Second / benchRate
	type sample struct {
		latency time.Duration
		end     time.Time
		ok      bool
	}
	samples := make([]sample, total)
	next := make(chan int, total)
	start := time.Now().Add(20 * time.Millisecond)
	for i := range total {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range benchWorkers {
		wg.Go(func() {
			for i := range next {
				due := start.Add(time.Duration(i) * interval)
				time.Sleep(time.Until(due))
				samples[i] = sample{ok: fetch(client, base+paths[i%len(paths)], token)}
				samples[i].end = time.Now()
				samples[i].latency = samples[i].end.Sub(due)
			}
		})
	}
	wg.Wait()
	var last time.Time
	for _, s := range samples {
		if !s.ok {
			res.errors++
			continue
		}
		res.latencies = append(res.latencies, s.latency)
		if s.end.After(last) {
			last = s.end
		}
	}
	res.elapsed += last.Sub(start)
}

// fetch GETs url and reads the whole body, reporting success.
func fetch(client *http.Client, url, token string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err == nil && resp.StatusCode == http.StatusOK
}

// BenchmarkSearchLoopback measures the catalogue's search under a fixed load and compares
// it with a bare handler serving the same bytes. Run it alone:
//
//	go test -run '^$' -bench BenchmarkSearchLoopback -benchtime 1x ./catalog/
func BenchmarkSearchLoopback(b *testing.B) {
	namespaces := populateBench(b)
	token := newCaller(b, namespaces[0], "bench-agent", true)
	for _, ns := range namespaces[1:] {
		grantList(b, ns, namespaces[0], "bench-agent")
	}
	c := startCatalog(b, catalog.AuthTokenReview, func(o *catalog.Options) { o.AuthCacheTTL = 10 * time.Minute })
	for _, ns := range namespaces {
		c.waitServers(b, token, ns, benchServers/benchNamespaces)
	}
	var all catalog.ToolList
	c.getJSON(b, token, "/api/v1/tools?limit=500", &all)

	// The same queries against both servers; the bare handler returns exactly the bytes
	// the catalogue returned for each, precomputed.
	var paths []string
	bodies := map[string][]byte{}
	for _, q := range benchQueries {
		path := "/api/v1/tools?q=" + url.QueryEscape(q)
		resp := c.get(b, token, path)
		if resp.code != http.StatusOK {
			b.Fatalf("GET %s: %d %s", path, resp.code, resp.body)
		}
		paths = append(paths, path)
		bodies[path] = resp.body
	}
	bare := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body := bodies[r.URL.RequestURI()]
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = bare.Serve(ln) }()
	defer bare.Close()

	cat, base := alternateLoad(b, token, loadTarget{c.base, paths}, loadTarget{"http://" + ln.Addr().String(), paths})
	if len(cat.latencies) == 0 || len(base.latencies) == 0 {
		b.Fatalf("no request succeeded: catalogue errors %d, bare errors %d", cat.errors, base.errors)
	}
	slices.Sort(cat.latencies)
	slices.Sort(base.latencies)

	var size int
	for _, body := range bodies {
		size += len(body)
	}
	fmt.Printf("catalogue search: %d servers, %d tools (%d visible to the caller), %d queries, mean response %d bytes, %d req/s offered for %s\n",
		benchServers, benchServers*benchToolsPerServer, len(all.Items), len(paths), size/len(bodies), benchRate, benchDuration)
	for _, r := range []struct {
		name string
		res  *loadResult
	}{{"catalogue:   ", &cat}, {"bare handler:", &base}} {
		fmt.Printf("  %s p50 %7.3f ms  p90 %7.3f ms  p99 %7.3f ms  max %7.3f ms  %6.0f req/s  %d requests, %d errors\n",
			r.name, ms(r.res.percentile(50)), ms(r.res.percentile(90)), ms(r.res.percentile(99)),
			ms(r.res.latencies[len(r.res.latencies)-1]), r.res.throughput(), len(r.res.latencies), r.res.errors)
	}
	p50, p99 := cat.percentile(50), cat.percentile(99)
	fmt.Printf("  ratio catalogue/bare: p50 %.2fx  p99 %.2fx  (target: catalogue p99 under 10 ms)\n",
		float64(p50)/float64(base.percentile(50)), float64(p99)/float64(base.percentile(99)))
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	b.ReportMetric(cat.throughput(), "req/s")
	b.ReportMetric(ms(base.percentile(50)), "bare-p50-ms")
	b.ReportMetric(ms(base.percentile(99)), "bare-p99-ms")
	b.ReportMetric(float64(p99)/float64(base.percentile(99)), "p99-ratio")
	if cat.errors > 0 || base.errors > 0 {
		b.Errorf("errors: catalogue %d, bare %d", cat.errors, base.errors)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
