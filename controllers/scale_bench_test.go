package controllers_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// BenchmarkThousandServersReady measures how long 1,000 MCPServers, applied at once, take
// to all be Ready with their tools, and the Go heap the manager (with the test server, in
// the same process) peaks at. Run it once:
//
//	go test -run '^$' -bench ThousandServers -benchtime 1x ./controllers/
func BenchmarkThousandServersReady(b *testing.B) {
	const servers = 1000
	ctx := context.Background()
	for range b.N {
		ns := newNamespace(b)
		// The production defaults: probes every 30s, 8 parallel reconciles.
		startOperator(b, ns, withProbeInterval(30*time.Second), withMaxConcurrentReconciles(8))
		srv := newMCPServer(b, 14)

		var peak uint64
		stopSampling := sampleHeap(&peak)
		start := time.Now()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16) // the API server's client-side parallelism
		for i := range servers {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := k8sClient.Create(ctx, httpServer(ns, fmt.Sprintf("s-%04d", i), srv.url())); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		applied := time.Since(start)

		deadline := time.Now().Add(5 * time.Minute)
		ready := 0
		for time.Now().Before(deadline) {
			var list mcpv1alpha1.MCPServerList
			if err := k8sClient.List(ctx, &list); err != nil {
				b.Fatal(err)
			}
			ready = 0
			for _, s := range list.Items {
				if s.Namespace == ns && s.Status.ToolCount == 14 && meta.IsStatusConditionTrue(s.Status.Conditions, mcpv1alpha1.ConditionReady) {
					ready++
				}
			}
			if ready == servers {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		elapsed := time.Since(start)
		stopSampling()
		if ready != servers {
			b.Fatalf("only %d of %d servers Ready after %v", ready, servers, elapsed)
		}
		b.ReportMetric(elapsed.Seconds(), "s-to-all-ready")
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		b.Logf("%d servers applied in %v, all Ready with tools after %v; peak Go heap %.0f MiB (manager and test server in one process)",
			servers, applied.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(peak)/(1<<20))
	}
}

// sampleHeap records the peak heap in use every 100ms until the returned func is called.
func sampleHeap(peak *uint64) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			*peak = max(*peak, m.HeapInuse)
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() { close(done); <-stopped }
}
