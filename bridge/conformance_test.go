package bridge_test

import (
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/bridge"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// needClientCapabilities are the conformance scenarios in which the server asks the
// client for sampling or elicitation during a call. In Shared mode the bridge initializes
// the one process without client capabilities, since such a request could not be routed
// to one client, so the server refuses those tools.
var needClientCapabilities = map[string]bool{
	"tools-call-sampling":          true,
	"tools-call-elicitation":       true,
	"elicitation-sep1034-defaults": true,
	"elicitation-sep1330-enums":    true,
}

// needLogMessages are the conformance scenarios in which the client must receive the
// server's log messages. In Shared mode the bridge passes none on, since over stdio a log
// message cannot be told to belong to one session's call rather than another's.
var needLogMessages = map[string]bool{
	"tools-call-with-logging": true,
}

// failsInShared reports whether a scenario cannot pass in Shared mode, and why.
func failsInShared(name string) (string, bool) {
	switch {
	case needClientCapabilities[name]:
		return "declares no client capabilities: is the bridge forwarding a client's?", true
	case needLogMessages[name]:
		return "passes no log message on: is the bridge passing one session's logs to another?", true
	}
	return "", false
}

// The official MCP conformance suite judges the bridge: every server scenario that
// passes against go-sdk's conformance server over Streamable HTTP passes with the same
// server run over stdio behind the bridge in PerSession mode, and in Shared mode every
// one but those that need a client capability or the server's log messages. The suite opens a session per scenario
// and never ends one, so it also shows that abandoned sessions lock no client out of the
// default four.
func TestConformanceThroughTheBridgeMatchesTheServerDirectly(t *testing.T) {
	direct := testenv.RunConformanceServerSuite(t, testenv.StartConformanceServer(t))
	direct.Name = "direct"
	if len(direct.Passed()) == 0 {
		t.Fatalf("nothing passed directly: the comparison would be empty\n%s", direct.Output)
	}
	stdioServer := testenv.BuildGoBinary(t, testenv.GoSDKConformanceServer)

	perSession := startBridge(t, bridge.Options{Command: []string{stdioServer}, GracePeriod: time.Second})
	throughPerSession := testenv.RunConformanceServerSuite(t, perSession.url)
	throughPerSession.Name = "bridge PerSession"
	shared := startBridge(t, bridge.Options{Command: []string{stdioServer}, GracePeriod: time.Second, SessionMode: bridge.Shared})
	throughShared := testenv.RunConformanceServerSuite(t, shared.url)
	throughShared.Name = "bridge Shared"
	t.Logf("conformance: %d of %d pass directly, %d through the bridge in PerSession mode, %d in Shared mode\n%s",
		len(direct.Passed()), len(direct.Scenarios), len(throughPerSession.Passed()), len(throughShared.Passed()),
		direct.Table(throughPerSession, throughShared))

	for _, problem := range testenv.DiffConformance(direct, throughPerSession) {
		t.Error(problem)
	}
	for _, name := range direct.Passed() {
		outcome := throughShared.Scenarios[name]
		why, fails := failsInShared(name)
		switch {
		case !outcome.Passed && !fails:
			t.Errorf("conformance scenario %s passes directly but fails in Shared mode: %v", name, outcome.Failures)
		case outcome.Passed && fails:
			t.Errorf("conformance scenario %s passes in Shared mode, which %s", name, why)
		}
	}
	for _, expected := range []map[string]bool{needClientCapabilities, needLogMessages} {
		for name := range expected {
			if _, ran := direct.Scenarios[name]; !ran {
				t.Errorf("the suite no longer has scenario %s: update the scenarios expected to fail in Shared mode", name)
			}
		}
	}
}

// The 2026-07-28 edition of the suite judges the bridge's sessionless front: every
// scenario that passes against go-sdk's conformance server over Streamable HTTP in
// stateless mode passes with the same server over stdio behind the bridge, in both
// session modes (sessionless requests have a process of their own in either).
func TestConformance2026ThroughTheBridgeMatchesTheServerDirectly(t *testing.T) {
	direct := testenv.RunConformanceServerSuite2026(t, testenv.StartStatelessConformanceServer(t))
	direct.Name = "direct"
	if len(direct.Passed()) == 0 {
		t.Fatalf("nothing passed directly: the comparison would be empty\n%s", direct.Output)
	}
	stdioServer := testenv.BuildGoBinary(t, testenv.GoSDKConformanceServer)
	perSession := startBridge(t, bridge.Options{Command: []string{stdioServer}, GracePeriod: time.Second})
	throughPerSession := testenv.RunConformanceServerSuite2026(t, perSession.url)
	throughPerSession.Name = "bridge PerSession"
	shared := startBridge(t, bridge.Options{Command: []string{stdioServer}, GracePeriod: time.Second, SessionMode: bridge.Shared})
	throughShared := testenv.RunConformanceServerSuite2026(t, shared.url)
	throughShared.Name = "bridge Shared"
	t.Logf("conformance %s: %d of %d pass directly, %d through the bridge in PerSession mode, %d in Shared mode\n%s",
		testenv.ConformanceRevision2026, len(direct.Passed()), len(direct.Scenarios), len(throughPerSession.Passed()),
		len(throughShared.Passed()), direct.Table(throughPerSession, throughShared))
	for _, through := range []testenv.ConformanceResults{throughPerSession, throughShared} {
		for _, problem := range testenv.DiffConformance(direct, through) {
			t.Errorf("%s: %s", through.Name, problem)
		}
	}
}
