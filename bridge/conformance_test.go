package bridge_test

import (
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/bridge"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// The official MCP conformance suite judges the bridge: every server scenario that
// passes against go-sdk's conformance server over Streamable HTTP passes with the same
// server run over stdio behind the bridge. The suite opens a session per scenario and
// never ends one, so it also shows that abandoned sessions lock no client out.
func TestConformanceThroughTheBridgeMatchesTheServerDirectly(t *testing.T) {
	direct := testenv.RunConformanceServerSuite(t, testenv.StartConformanceServer(t))
	direct.Name = "direct"
	if len(direct.Passed()) == 0 {
		t.Fatalf("nothing passed directly: the comparison would be empty\n%s", direct.Output)
	}
	stdioServer := testenv.BuildGoBinary(t, testenv.GoSDKConformanceServer)

	r := startBridge(t, bridge.Options{Command: []string{stdioServer}, GracePeriod: time.Second})
	through := testenv.RunConformanceServerSuite(t, r.url)
	through.Name = "bridge"
	t.Logf("conformance: %d of %d pass directly (%s), %d through the bridge (%s)\n%s",
		len(direct.Passed()), len(direct.Scenarios), direct.Duration.Round(time.Millisecond),
		len(through.Passed()), through.Duration.Round(time.Millisecond), direct.Table(through))
	for _, problem := range testenv.DiffConformance(direct, through) {
		t.Error(problem)
	}
}
