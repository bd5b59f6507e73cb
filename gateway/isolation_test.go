//go:build !race

// The race detector's shadow memory and slowdown would distort the heap figures, so this
// test runs in make test's second, race-free step.

package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// hungSessions is how many sessions wait on the hung server at once.
const hungSessions = 1000

// maxHeapPerHungSession bounds the heap one hung session may hold, everything in this
// process counted: the agent's go-sdk client, the gateway's session and upstream, and
// the hung server's own session.
const maxHeapPerHungSession = 256 << 10

// A thousand sessions waiting on a server that never answers leave the calls of another
// server through the same gateway unaffected, and hold a bounded heap.
func TestAThousandSessionsOnAHungServerLeaveOtherServersAlone(t *testing.T) {
	h := newHarness(t, harnessOptions{timeout: 10 * time.Minute,
		gateway: func(o *gateway.Options) {
			o.MaxSessions = 2 * hungSessions
			withoutSessionQuotas(o)
		}})
	var waiting atomic.Int32
	release := make(chan struct{})
	mcp.AddTool(h.upstream.mcp, &mcp.Tool{Name: "hang"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		waiting.Add(1)
		defer waiting.Add(-1)
		select {
		case <-ctx.Done():
		case <-release:
		}
		return &mcp.CallToolResult{}, nil, nil
	})

	// A second, healthy server behind the same gateway.
	healthy := newUpstream(t)
	healthyKey := connector.Key{Namespace: namespace, Name: "healthy"}
	cfg := h.config(loopbackRules(t))
	cfg.URL = healthy.URL
	h.pool.Ensure(healthyKey, cfg)
	testutil.Eventually(t, 10*time.Second, "the healthy server's session", func() error {
		if snap, _ := h.pool.Snapshot(healthyKey); snap.State != connector.StateReady {
			return fmt.Errorf("state %s", snap.State)
		}
		return nil
	})
	h.gw.Update(readyServer(healthyKey))

	before := heapInUse()
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(transport.CloseIdleConnections)
	ctx, cancel := context.WithCancel(context.Background())
	var calls sync.WaitGroup
	t.Cleanup(func() {
		close(release)
		cancel()
		calls.Wait()
	})
	opening := make(chan struct{}, 32)
	for range hungSessions {
		opening <- struct{}{}
		calls.Go(func() {
			client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
			cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
				Endpoint: h.url(), HTTPClient: &http.Client{Transport: transport}, DisableStandaloneSSE: true, MaxRetries: -1,
			}, sessionEraClient)
			<-opening
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("opening a session: %v", err)
				}
				return
			}
			defer cs.Close()
			_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "hang"})
		})
	}
	testutil.Eventually(t, 2*time.Minute, "every hung call to reach the server", func() error {
		if n := waiting.Load(); n < hungSessions {
			return fmt.Errorf("%d of %d waiting", n, hungSessions)
		}
		return nil
	})
	held := heapInUse() - before

	other := h.connectTo(healthyKey)
	for i := range 20 {
		callCtx, done := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		res, err := other.CallTool(callCtx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": fmt.Sprint(i)}})
		done()
		if err != nil || res.IsError {
			t.Fatalf("call %d to the healthy server while %d calls hang: %v %v", i, hungSessions, res, err)
		}
		if i == 0 {
			t.Logf("a call to the healthy server while %d calls hang on the other: %s", hungSessions, time.Since(start))
		}
	}
	t.Logf("heap held by %d hung sessions (client, gateway and server sides): %.1f MiB, %.0f KiB each; %d goroutines",
		hungSessions, float64(held)/(1<<20), float64(held)/hungSessions/1024, runtime.NumGoroutine())
	if held > hungSessions*maxHeapPerHungSession {
		t.Errorf("%d hung sessions hold %d MiB of heap; want at most %d KiB each", hungSessions, held>>20, maxHeapPerHungSession>>10)
	}
}

// heapInUse returns the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
