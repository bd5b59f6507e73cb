package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// BenchmarkToolsCall measures a tools/call round trip to go-sdk's conformance server
// called directly, through the gateway, and through ToolHive's `thv proxy` (the peer the
// gateway's target is set against; left out when thv is not built, see
// hack/test-servers.sh --thv), at 1 and at 64 concurrent sessions. Besides ns/op it
// reports the median and 90th percentile of one call's latency, which is what the target
// (gateway median within 1.3x of direct, and below thv's) is about:
//
//	go test -run '^$' -bench ToolsCall -benchtime 2000x -count 3 ./gateway/
func BenchmarkToolsCall(b *testing.B) {
	upstream := testenv.StartConformanceServer(b)
	h := newHarness(b, harnessOptions{upstreamURL: upstream, gateway: func(o *gateway.Options) {
		// The manager's audit log: zap's JSON encoder, here into nothing.
		o.Audit = zap.New(zap.WriteTo(io.Discard), zap.UseDevMode(false))
	}})
	targets := []struct{ name, url string }{{"direct", upstream}, {"gateway", h.url()}}
	if _, err := testenv.Thv(); err == nil {
		targets = append(targets, struct{ name, url string }{"thv", testenv.StartThvProxy(b, upstream)})
	} else {
		b.Logf("thv left out: %v", err)
	}
	for _, sessions := range []int{1, 64} {
		for _, target := range targets {
			b.Run(fmt.Sprintf("sessions=%d/%s", sessions, target.name), func(b *testing.B) {
				benchmarkToolsCall(b, target.url, sessions)
			})
		}
	}
}

// benchmarkToolsCall calls test_simple_text b.N times in all over n sessions, each
// session calling in a loop of its own.
func benchmarkToolsCall(b *testing.B, url string, n int) {
	ctx := context.Background()
	transport := &http.Transport{MaxIdleConnsPerHost: n + 4}
	defer transport.CloseIdleConnections()
	sessions := make([]*mcp.ClientSession, n)
	for i := range sessions {
		client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-bench", Version: "v0"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint: url, HTTPClient: &http.Client{Transport: transport}, DisableStandaloneSSE: true,
		}, nil)
		if err != nil {
			b.Fatalf("connecting to %s: %v", url, err)
		}
		defer cs.Close()
		sessions[i] = cs
	}
	params := &mcp.CallToolParams{Name: "test_simple_text"}
	latencies := make([][]time.Duration, n)
	var left atomic.Int64
	left.Store(int64(b.N))
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	for i, cs := range sessions {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				start := time.Now()
				res, err := cs.CallTool(ctx, params)
				latencies[i] = append(latencies[i], time.Since(start))
				if err == nil && (res.IsError || len(res.Content) == 0) {
					err = fmt.Errorf("test_simple_text returned %+v", res)
				}
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	all := slices.Concat(latencies...)
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "µs-p50")
	b.ReportMetric(float64(all[len(all)*9/10].Microseconds()), "µs-p90")
}
