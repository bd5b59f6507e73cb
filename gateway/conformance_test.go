package gateway_test

import (
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// The official MCP conformance suite judges the gateway: every server scenario that
// passes against go-sdk's conformance server directly passes through the gateway.
func TestConformanceThroughTheGatewayMatchesTheServerDirectly(t *testing.T) {
	upstream := testenv.StartConformanceServer(t)
	h := newHarness(t, harnessOptions{upstreamURL: upstream})

	direct := testenv.RunConformanceServerSuite(t, upstream)
	direct.Name = "direct"
	through := testenv.RunConformanceServerSuite(t, h.url())
	through.Name = "through the gateway"
	t.Logf("conformance: %d of %d pass directly (%s), %d through the gateway (%s)\n%s",
		len(direct.Passed()), len(direct.Scenarios), direct.Duration.Round(time.Millisecond),
		len(through.Passed()), through.Duration.Round(time.Millisecond), direct.Table(through))
	if len(direct.Passed()) == 0 {
		t.Fatalf("nothing passed directly: the comparison would be empty\n%s", direct.Output)
	}
	for _, problem := range testenv.DiffConformance(direct, through) {
		t.Error(problem)
	}
}
