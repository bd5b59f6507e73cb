package conformance

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// BenchmarkToolsCall measures a tools/call round trip to go-sdk's conformance server
// directly and through ToolHive's thv proxy, the peer the gateway's target is set
// against. It skips the thv case when thv is not built (hack/test-servers.sh --thv).
func BenchmarkToolsCall(b *testing.B) {
	url := testenv.StartConformanceServer(b)
	b.Run("direct", func(b *testing.B) { benchmarkToolsCall(b, url) })
	b.Run("thv", func(b *testing.B) { benchmarkToolsCall(b, testenv.StartThvProxy(b, url)) })
}

func benchmarkToolsCall(b *testing.B, url string) {
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-bench", Version: "v0"}, nil)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true}, nil)
	if err != nil {
		b.Fatalf("connecting to %s: %v", url, err)
	}
	defer session.Close()
	params := &mcp.CallToolParams{Name: "test_simple_text"}
	for b.Loop() {
		res, err := session.CallTool(ctx, params)
		if err != nil {
			b.Fatal(err)
		}
		if res.IsError || len(res.Content) == 0 {
			b.Fatalf("test_simple_text returned %+v", res)
		}
	}
}
