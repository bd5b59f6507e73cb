package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeSuite mimics the conformance suite's command line and output: the whole-suite run
// passes "good" and then hangs in "hangs"; "bad" fails when run on its own.
const fakeSuite = `#!/bin/sh
save() { # save SCENARIO STATUS: write checks.json the way the suite does
  d="$OUT/server-$1-2026-12-01T11-00-25-108Z"; mkdir -p "$d"
  printf '[{"id":"x","name":"Check","description":"desc","status":"%s","errorMessage":"%s"}]' "$2" "$3" >"$d/checks.json"
  echo "Results saved to $d"
}
case "$1" in
list) printf 'Server scenarios (test against a server):\n  - good [2025-11-25]\n  - hangs [2025-11-25]\n  - bad [2025-11-25]\n' ;;
server)
  OUT="$7"
  if [ "$4" = "--suite" ]; then
    echo "Running all suite (3 scenarios) against $3"
    echo "=== Running scenario: good ==="
    echo "Running client scenario 'good' against server: $3"
    save good SUCCESS ""
    echo "=== Running scenario: hangs ==="
    echo "Running client scenario 'hangs' against server: $3"
    exec sleep 60
  fi
  echo "Running client scenario '$5' against server: $3"
  save "$5" FAILURE "wrong content"
  exit 1 ;;
esac
`

// TestSuiteRunSurvivesAHangingScenario: a scenario that hangs (a relay that drops a
// stream) is reported as failed, and the scenarios after it still run and are reported.
func TestSuiteRunSurvivesAHangingScenario(t *testing.T) {
	saved := conformanceScenarioTimeout
	conformanceScenarioTimeout = time.Second
	t.Cleanup(func() { conformanceScenarioTimeout = saved })
	suite := filepath.Join(t.TempDir(), "conformance")
	if err := os.WriteFile(suite, []byte(fakeSuite), 0o700); err != nil {
		t.Fatal(err)
	}

	through := runConformanceServerSuite(t, suite, "http://127.0.0.1:1/mcp")

	if got := through.Passed(); len(got) != 1 || got[0] != "good" {
		t.Errorf("passed = %v, want [good]", got)
	}
	if got := strings.Join(through.Scenarios["hangs"].Failures, "; "); !strings.Contains(got, "no result within 1s") {
		t.Errorf("hangs failures = %q, want the timeout", got)
	}
	if got := strings.Join(through.Scenarios["bad"].Failures, "; "); got != "Check: wrong content" {
		t.Errorf("bad failures = %q, want the failed check and its message", got)
	}

	direct := ConformanceResults{Scenarios: map[string]ConformanceScenario{
		"good": {Passed: true}, "hangs": {Passed: true}, "bad": {Passed: true}, "absent": {Passed: true},
	}}
	problems := strings.Join(DiffConformance(direct, through), "\n")
	for _, want := range []string{"absent passes directly but did not run", "bad passes directly but fails through http://127.0.0.1:1/mcp: Check: wrong content", "hangs passes directly but fails"} {
		if !strings.Contains(problems, want) {
			t.Errorf("DiffConformance does not say %q:\n%s", want, problems)
		}
	}
	if strings.Contains(problems, "good") {
		t.Errorf("DiffConformance reports a scenario that passes both ways:\n%s", problems)
	}

	through.Name = "gateway"
	table := direct.Table(through)
	for _, row := range []string{"| scenario | direct | gateway |", "| absent | pass | - |", "| bad | pass | FAIL |", "| good | pass | pass |", "| **passed** | 4/4 | 1/3 |"} {
		if !strings.Contains(table, row) {
			t.Errorf("table lacks %q:\n%s", row, table)
		}
	}
}

// minScenarios2026 is well under the 50 server scenarios conformance 0.2.0-alpha.12 runs
// for 2026-07-28 (37 required, 10 of the tasks extension, 3 pending): a run that reports
// fewer did not run the requirement set we think it did.
const minScenarios2026 = 40

// TestConformance2026AgainstGoSDKStatelessServerDirectly is the 2026-07-28 baseline the
// bridge and gateway are compared against: the suite runs its 2026-07-28 requirement set
// against go-sdk's stateless conformance server, every scenario it scores passes (tools,
// resources, prompts, completion, caching, input_required round trips), and what fails is
// only the optional tasks extension, which go-sdk's server does not implement. The same
// suite against the session-only server fails tools-list: the suite really speaks
// stateless 2026-07-28, so passing here means something.
func TestConformance2026AgainstGoSDKStatelessServerDirectly(t *testing.T) {
	url := StartStatelessConformanceServer(t)

	direct := RunConformanceServerSuite2026(t, url)
	direct.Name = "stateless"

	stateful := RunConformanceServerSuite2026(t, StartConformanceServer(t))
	stateful.Name = "sessions only"
	t.Logf("conformance %s suite against go-sdk's stateless server directly: %d of %d scenarios passed in %s; against the session server (-stateless=false): %d of %d\n%s",
		ConformanceRevision2026, len(direct.Passed()), len(direct.Scenarios), direct.Duration.Round(time.Millisecond),
		len(stateful.Passed()), len(stateful.Scenarios), direct.Table(stateful))

	if len(direct.Scenarios) < minScenarios2026 {
		t.Fatalf("the suite reported %d scenarios, want at least %d:\n%s", len(direct.Scenarios), minScenarios2026, direct.Output)
	}
	for _, want := range []string{"server-stateless", "tools-list", "tools-call-simple-text", "resources-read-text", "prompts-get-with-args", "input-required-result-basic-elicitation"} {
		if s, ok := direct.Scenarios[want]; !ok || !s.Passed {
			t.Errorf("scenario %s did not pass directly against go-sdk's stateless server: %v", want, s.Failures)
		}
	}
	for _, name := range direct.Failed() {
		if !strings.HasPrefix(name, "tasks-") || direct.NotScored[name] != "extension" {
			t.Errorf("scenario %s fails directly against go-sdk's stateless server, want only the tasks extension to fail: %v", name, direct.Scenarios[name].Failures)
		}
	}
	if s := stateful.Scenarios["tools-list"]; s.Passed {
		t.Errorf("tools-list passes at %s against the session-only server, want it to fail (the suite sends no initialize)", ConformanceRevision2026)
	}
}
