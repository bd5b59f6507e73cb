package bridge_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/bridge"
)

// BenchmarkBridgeToolsCall compares one tools/call round trip through the bridge with the
// same call over a direct stdio connection (go-sdk's CommandTransport) to the same server
// command. Each iteration makes one call each way, alternating, so that both see the same
// machine load; it reports both means and their ratio (the target is within 1.3x).
//
// The server is the helper Go server, fast and deterministic, so that the server's own
// cost does not hide the bridge's.
func BenchmarkBridgeToolsCall(b *testing.B) {
	argv, env := testServerCommand(b)
	benchmarkToolsCall(b, argv, env)
}

// BenchmarkBridgeToolsCallServerEverything is the same comparison against the npm
// reference server.
func BenchmarkBridgeToolsCallServerEverything(b *testing.B) {
	benchmarkToolsCall(b, serverEverything(b), nil)
}

func benchmarkToolsCall(b *testing.B, argv, env []string) {
	ctx := context.Background()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v1"}, nil)
	direct, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	r := startBridge(b, bridge.Options{Command: argv, Env: env, GracePeriod: time.Second})
	bridged := r.mustConnect(b)

	call := func(cs *mcp.ClientSession) time.Duration {
		// Fresh params each time: the client writes protocol metadata into them.
		params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "ping"}}
		start := time.Now()
		if _, err := cs.CallTool(ctx, params); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	call(direct) // warm up both paths
	call(bridged)

	var directTotal, bridgedTotal time.Duration
	n := 0
	for b.Loop() {
		if n%2 == 0 {
			directTotal += call(direct)
			bridgedTotal += call(bridged)
		} else {
			bridgedTotal += call(bridged)
			directTotal += call(direct)
		}
		n++
	}
	directMean, bridgedMean := directTotal/time.Duration(n), bridgedTotal/time.Duration(n)
	ratio := float64(bridgedMean) / float64(directMean)
	b.ReportMetric(float64(directMean.Nanoseconds()), "direct-ns/call")
	b.ReportMetric(float64(bridgedMean.Nanoseconds()), "bridge-ns/call")
	b.ReportMetric(ratio, "ratio")
	if n >= 100 {
		b.Logf("tools/call round trip: direct stdio %v, through the bridge %v, ratio %.2fx (target 1.3x)",
			directMean, bridgedMean, ratio)
	}
}
