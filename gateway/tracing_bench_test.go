package gateway_test

import (
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// BenchmarkMetaCost measures what a trace context in params._meta alone costs a
// 2025-11-25 tools/call between a go-sdk client and go-sdk's conformance server, with no
// gateway between them: every other call carries `_meta.traceparent`, as every traced
// call the gateway sends upstream does, while an untraced session-era call carries no
// _meta at all. go-sdk reads the _meta of a call in its client and its server (as
// released, into maps its JSON decoder makes with room for 64 members, four times over:
// see third_party/README.md for what Switchboard's build of it changed): this is the
// part of the tracing cost that BenchmarkTracingCost's session era pays and the
// sessionless era does not (a 2026-07-28 call carries _meta whether traced or not). It
// reports the p50 of each half and their ratio:
//
//	go test -run '^$' -bench MetaCost -benchtime 6000x -count 3 ./gateway/
func BenchmarkMetaCost(b *testing.B) {
	url := testenv.StartConformanceServer(b)
	plain := &mcp.CallToolParams{Name: "test_simple_text"}
	withMeta := &mcp.CallToolParams{Name: "test_simple_text",
		Meta: mcp.Meta{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	// Call by call: nothing but the params changes between the halves.
	withOut, with := alternateCalls(b, [2]string{url, url}, sessionEra, 1, 0, func(half int) *mcp.CallToolParams {
		if half == 1 {
			return withMeta
		}
		return plain
	})
	if len(with) == 0 {
		return // the framework's first round of one call
	}
	p50 := func(d []time.Duration) float64 { return float64(d[len(d)/2].Microseconds()) }
	b.ReportMetric(p50(withOut), "µs-p50-plain")
	b.ReportMetric(p50(with), "µs-p50-meta")
	b.ReportMetric(p50(with)/p50(withOut), "p50-meta/plain")
}
