//go:build !race

package connector

// The heap test runs without the race detector: its shadow memory and its slowdown (the
// hostile servers send about 700 MiB) would distort the very heap figures it checks.
// `make test` runs it in a pass of its own.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	runtimemetrics "runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// hostileServersEnv, set to a count, makes the test binary a helper process that serves
// that many hostile MCP servers on loopback instead of running tests: the servers' own
// allocations then stay out of the heap the tests measure.
const hostileServersEnv = "SWITCHBOARD_TEST_HOSTILE_SERVERS"

func TestMain(m *testing.M) {
	if n := os.Getenv(hostileServersEnv); n != "" {
		os.Exit(serveHostileServers(n))
	}
	os.Exit(m.Run())
}

// Hostile servers stay within every per-server bound: 300 tools, each with a 100 KiB
// input schema and a 16 KiB description, 20 tools a page (about 2.3 MiB, under the
// 4 MiB event bound); 30 MiB of schemas and 300 KiB of cut descriptions, under the
// 32 MiB discovery bound.
const (
	hostileTools    = 300
	hostilePageSize = 20
)

// hostileSchema is an object schema of about 100 KiB: 350 properties with descriptions,
// the shape of a real oversized schema rather than one long string.
func hostileSchema() json.RawMessage {
	props := make(map[string]any, 350)
	for i := range 350 {
		props[fmt.Sprintf("field_%03d", i)] = map[string]any{
			"type":        "string",
			"description": strings.Repeat(fmt.Sprintf("property %03d of a hostile schema. ", i), 7),
		}
	}
	data, err := json.Marshal(map[string]any{"type": "object", "properties": props})
	if err != nil {
		panic(err)
	}
	return data
}

// newHostileServer returns a go-sdk server offering hostileTools tools that share one
// schema value, so that serving many of them costs the helper little.
func newHostileServer(schema json.RawMessage, description string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "hostile", Version: "1"}, &mcp.ServerOptions{PageSize: hostilePageSize})
	for i := range hostileTools {
		s.AddTool(&mcp.Tool{Name: fmt.Sprintf("hostile-%03d", i), Description: description, InputSchema: schema},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
	}
	return s
}

// serveHostileServers is the helper process: it prints one URL a line, then serves
// until its standard input closes.
func serveHostileServers(count string) int {
	n, err := strconv.Atoi(count)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	server := newHostileServer(hostileSchema(), strings.Repeat("a hostile tool description. ", 16<<10/28))
	handler := statelessHandler(server)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() { _ = (&http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}).Serve(ln) }() //nolint:gosec // loopback test server
		fmt.Printf("http://%s/mcp\n", ln.Addr())
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// startHostileServers runs the helper process and returns the URLs of n hostile servers.
func startHostileServers(t *testing.T, n int) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$") //nolint:noctx // stopped through its stdin
	cmd.Env = append(os.Environ(), hostileServersEnv+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	var urls []string
	lines := bufio.NewScanner(stdout)
	for len(urls) < n && lines.Scan() {
		urls = append(urls, lines.Text())
	}
	if len(urls) < n {
		t.Fatalf("helper printed %d of %d server URLs", len(urls), n)
	}
	return urls
}

// heapSampler records the peak of the live heap (runtime/metrics /gc/heap/live:bytes,
// what the last GC found reachable) and of HeapInuse while it runs.
type heapSampler struct {
	stop chan struct{}
	done chan struct{}
	live uint64
	peak uint64
}

func sampleHeap() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		sample := []runtimemetrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
		for {
			runtimemetrics.Read(sample)
			h.live = max(h.live, sample[0].Value.Uint64())
			h.peak = max(h.peak, sample[1].Value.Uint64()+sample[2].Value.Uint64())
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

// Stop ends sampling and returns the peaks of the live heap and of HeapInuse.
func (h *heapSampler) Stop() (live, inuse uint64) {
	close(h.stop)
	<-h.done
	return h.live, h.peak
}

// waitSettled waits, for at most ten minutes (the hostile servers send about 700 MiB
// between them, slow under the race detector), until no key is Connecting.
func waitSettled(t *testing.T, p *Pool, keys []Key) map[Key]Snapshot {
	t.Helper()
	out := make(map[Key]Snapshot, len(keys))
	deadline := time.Now().Add(10 * time.Minute)
	for _, k := range keys {
		for {
			snap, _ := p.Snapshot(k)
			if snap.State != StateConnecting {
				out[k] = snap
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still connecting after ten minutes", k)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return out
}

func TestHostileServersStayWithinTheDiscoveryMemoryBudget(t *testing.T) {
	const budget = 128 << 20
	hostile := startHostileServers(t, 20)
	runtime.GC()
	h := sampleHeap()
	p := testPool(t, func(o *Options) {
		o.DiscoveryMemoryBudget = budget
		o.InitialBackoff, o.MaxBackoff = time.Minute, time.Minute
	})
	var hostileKeys, goodKeys []Key
	for i, u := range hostile {
		key := Key{"tenant-hostile", fmt.Sprintf("hostile-%02d", i)}
		cfg := fastConfig(u)
		cfg.Protocol = ProtocolStreamableHTTP
		cfg.Timeout, cfg.ConnectTimeout = 2*time.Minute, 2*time.Minute
		p.Ensure(key, cfg)
		hostileKeys = append(hostileKeys, key)
	}
	for i := range 5 {
		key := Key{"tenant-good", fmt.Sprintf("good-%d", i)}
		p.Ensure(key, fastConfig(serveStreamable(t, newServer(3, nil), nil).URL))
		goodKeys = append(goodKeys, key)
	}
	good := waitSettled(t, p, goodKeys)
	bad := waitSettled(t, p, hostileKeys)
	live, inuse := h.Stop()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("peak live heap %d MiB, peak HeapInuse %d MiB, budget %d MiB; live heap once settled %d MiB",
		live>>20, inuse>>20, budget>>20, ms.HeapAlloc>>20)

	if live >= budget {
		t.Errorf("peak live heap %d MiB, over the %d MiB budget", live>>20, budget>>20)
	}
	for k, snap := range good {
		if snap.State != StateReady || len(snap.Tools) != 3 {
			t.Errorf("%s next to hostile servers: state %s, %d tools, error %v", k, snap.State, len(snap.Tools), snap.LastError)
		}
	}
	ready := 0
	for k, snap := range bad {
		switch {
		case snap.State == StateReady && len(snap.Tools) == hostileTools:
			ready++
		case snap.LastError != nil && snap.LastError.Reason == ReasonLimitExceeded &&
			strings.Contains(snap.LastError.Message, "discovery memory budget"):
			t.Logf("%s: %s", k, snap.LastError.Message)
		case snap.LastError != nil && snap.LastError.Reason == ReasonTimeout:
			// A hostile server that waited too long for room in its namespace's share
			// is turned away like a slow one; what matters is that the heap held and
			// the good servers did not wait for it.
			t.Logf("%s: %s", k, snap.LastError.Message)
		default:
			t.Errorf("%s: state %s, %d tools, error %v", k, snap.State, len(snap.Tools), snap.LastError)
		}
	}
	t.Logf("%d of %d hostile servers discovered", ready, len(bad))
}
