package testenv

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
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

// fakeSuite2026 mimics conformance 0.2's command line and output for
// --requirements 2026-07-28: the whole run passes "good" (one check skipped), fails "bad",
// runs the tasks extension scenario "tasks-x" and the pending "pend" (all checks skipped),
// prints the summary and what it did not score; with HANG set it hangs in "hangs" after
// "good" instead. A scenario run on its own that is not run at the 2026-07-28 wire with
// --force fails with "wrong wire". tools_call is a client scenario: running it against a
// server is a harness bug, so it "passes" for the test to notice.
const fakeSuite2026 = `#!/bin/sh
save() { # save SCENARIO STATUS MESSAGE [STATUS2]: write checks.json the way the suite does
  d="$OUT/server-$1-2026-12-01T11-00-25-108Z"; mkdir -p "$d"
  printf '[{"id":"x","name":"Check","description":"desc","status":"%s","errorMessage":"%s"},{"id":"y","name":"Other","description":"d","status":"%s"}]' "$2" "$3" "${4:-SKIPPED}" >"$d/checks.json"
  echo "Results saved to $d"
}
start() { echo; echo "=== Running scenario: $1 ==="; echo "Running client scenario '$1' against server: $URL"; }
URL="$3"
case "$1" in
list)
  [ "$2 $3" = "--requirements 2026-07-28" ] || { echo "usage" >&2; exit 1; }
  printf 'Required for 2026-07-28 (5 scenarios, frozen; run at the 2026-07-28 wire):\n\n'
  printf 'Server scenarios (test against a server):\n  - good\n  - hangs\n  - bad\n\n'
  printf 'Client scenarios (test against a client):\n  - tools_call\n\n'
  printf 'Run and reported, but never scored:\n  extension (2):\n    - auth/x [client]\n    - tasks-x [server]\n  pending (1):\n    - pend [server]\n\n' ;;
server)
  if [ "$4" = "--requirements" ]; then
    [ "$5" = 2026-07-28 ] || exit 1
    OUT="$7"
    echo "Running requirements 2026-07-28 (5 scenarios) against $URL"
    start good; save good SUCCESS ""
    if [ -n "$HANG" ]; then start hangs; exec sleep 60; fi
    start bad; save bad FAILURE "wrong content"
    start tasks-x; save tasks-x FAILURE "no tasks"
    start pend; save pend SKIPPED "" SKIPPED
    printf '\n\n=== SUMMARY ===\n'
    printf '✓ good: 1 passed, 0 failed\n✗ bad: 0 passed, 1 failed\n✗ tasks-x: 0 passed, 1 failed\n✓ pend: 0 passed, 0 failed\n'
    printf '\nTotal: 1 passed, 2 failed\n'
    printf '\nNot scored for 2026-07-28: 2 scenario(s) run, 1 failing. These do not affect conformance.\n'
    printf '  ✗ tasks-x (extension)\n  ✓ pend (pending)\n'
    exit 1
  fi
  OUT="${10}"
  echo "Running client scenario '$5' against server: $URL"
  if [ "$6 $7 $8" != "--spec-version 2026-07-28 --force" ]; then save "$5" FAILURE "wrong wire"; exit 1; fi
  case "$5" in
  bad) save bad FAILURE "wrong content" ;;
  tasks-x) save tasks-x FAILURE "no tasks" ;;
  pend) save pend SKIPPED "" SKIPPED ;;
  *) save "$5" SUCCESS "" SUCCESS ;;
  esac ;;
esac
`

func writeFakeSuite(t *testing.T, script string) string {
	t.Helper()
	suite := filepath.Join(t.TempDir(), "conformance")
	if err := os.WriteFile(suite, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return suite
}

// TestSuite2026RunReportsWhatTheSuiteDoesNotScore: a 2026-07-28 requirements run is read
// like a 0.1.16 run, and the table says which scenarios the suite does not score (the
// tasks extension, pending ones) and which only skipped their checks.
func TestSuite2026RunReportsWhatTheSuiteDoesNotScore(t *testing.T) {
	suite := writeFakeSuite(t, fakeSuite2026)

	got := runConformanceSuite(t, conformance2026, suite, "http://127.0.0.1:1/mcp")

	if passed := got.Passed(); !slices.Equal(passed, []string{"good", "pend"}) {
		t.Errorf("passed = %v, want [good pend]", passed)
	}
	if failures := strings.Join(got.Scenarios["bad"].Failures, "; "); failures != "Check: wrong content" {
		t.Errorf("bad failures = %q, want the failed check and its message", failures)
	}
	if want := map[string]string{"tasks-x": "extension", "pend": "pending"}; !maps.Equal(got.NotScored, want) {
		t.Errorf("NotScored = %v, want %v", got.NotScored, want)
	}
	table := got.Table()
	for _, row := range []string{"| good | pass |", "| bad | FAIL |", "| tasks-x (extension, not scored) | FAIL |", "| pend (pending, not scored) | skipped |", "| **passed** | 2/4 |"} {
		if !strings.Contains(table, row) {
			t.Errorf("table lacks %q:\n%s", row, table)
		}
	}
}

// TestSuite2026RunSurvivesAHangingScenario: when a 2026-07-28 run hangs, the scenarios
// after the hung one still run, one by one at the 2026-07-28 wire (an extension
// included), and the client scenarios the requirements list names are not run against
// the server.
func TestSuite2026RunSurvivesAHangingScenario(t *testing.T) {
	savedTimeout, savedGrace := conformanceScenarioTimeout, conformanceWatchdogGrace
	conformanceScenarioTimeout, conformanceWatchdogGrace = time.Second, time.Second
	t.Cleanup(func() { conformanceScenarioTimeout, conformanceWatchdogGrace = savedTimeout, savedGrace })
	t.Setenv("HANG", "1")
	suite := writeFakeSuite(t, fakeSuite2026)

	got := runConformanceSuite(t, conformance2026, suite, "http://127.0.0.1:1/mcp")

	names := slices.Sorted(maps.Keys(got.Scenarios))
	if want := []string{"bad", "good", "hangs", "pend", "tasks-x"}; !slices.Equal(names, want) {
		t.Errorf("scenarios = %v, want %v", names, want)
	}
	if failures := strings.Join(got.Scenarios["hangs"].Failures, "; "); !strings.Contains(failures, "no result within 2s") {
		t.Errorf("hangs failures = %q, want the timeout", failures)
	}
	for name, want := range map[string]string{"bad": "Check: wrong content", "tasks-x": "Check: no tasks"} {
		if failures := strings.Join(got.Scenarios[name].Failures, "; "); failures != want {
			t.Errorf("%s failures = %q, want %q (run on its own as the requirements run runs it)", name, failures, want)
		}
	}
	if s := got.Scenarios["pend"]; !s.Passed || s.Skipped != 2 {
		t.Errorf("pend = %+v, want passed with its 2 checks skipped", s)
	}
	if want := map[string]string{"tasks-x": "extension", "pend": "pending"}; !maps.Equal(got.NotScored, want) {
		t.Errorf("NotScored = %v, want %v", got.NotScored, want)
	}
}

// A check that succeeds directly and only warns through is a difference; a check that
// warns both ways is not.
func TestDiffConformanceComparesChecksOneByOne(t *testing.T) {
	direct := ConformanceResults{Scenarios: map[string]ConformanceScenario{
		"server-stateless": {Passed: true, Checks: []string{"listen-delivers SUCCESS", "slow-path WARNING"}},
	}}
	through := ConformanceResults{URL: "http://gateway/mcp", Scenarios: map[string]ConformanceScenario{
		"server-stateless": {Passed: true, Warnings: 2, Warned: []string{"listen-delivers: no notification arrived", "slow-path: slow"}},
	}}
	problems := DiffConformance(direct, through)
	if len(problems) != 1 || !strings.Contains(problems[0], "check listen-delivers succeeds directly but warns through http://gateway/mcp: listen-delivers: no notification arrived") {
		t.Errorf("problems = %q; want the one check that only warns through", problems)
	}
}
