package conformance

import (
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// minScenarios is fewer than the 32 server scenarios conformance 0.1.16 has: a run that
// reports fewer did not run the suite we think it did.
const minScenarios = 20

// TestConformanceSuiteAgainstGoSDKServerDirectly is the baseline: the suite runs against
// go-sdk's conformance server over Streamable HTTP and reports every scenario, and the
// table goes to the log for notes.
func TestConformanceSuiteAgainstGoSDKServerDirectly(t *testing.T) {
	url := testenv.StartConformanceServer(t)

	direct := testenv.RunConformanceServerSuite(t, url)

	t.Logf("conformance suite against go-sdk's server directly: %d of %d scenarios passed in %s\n%s",
		len(direct.Passed()), len(direct.Scenarios), direct.Duration.Round(time.Millisecond), direct.Table())
	if len(direct.Scenarios) < minScenarios {
		t.Fatalf("the suite reported %d scenarios, want at least %d:\n%s", len(direct.Scenarios), minScenarios, direct.Output)
	}
	// The gateway and bridge tests only compare what passes here, so a baseline with
	// nothing passing would make them pass vacuously.
	if len(direct.Passed()) < minScenarios {
		t.Errorf("only %d scenarios passed directly against go-sdk's server, want at least %d; failing: %v",
			len(direct.Passed()), minScenarios, direct.Failed())
	}
	for _, name := range direct.Failed() {
		t.Logf("fails directly (not compared through Switchboard): %s: %v", name, direct.Scenarios[name].Failures)
	}
}
