package testenv

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// GoSDKConformanceServer is the package of go-sdk's conformance server, the reference the
// conformance tests compare Switchboard's endpoints against. go.mod lists it as a tool,
// so it builds at the go-sdk version Switchboard uses. Without flags it serves stdio:
// BuildGoBinary(t, GoSDKConformanceServer) is the command a bridge test runs.
const GoSDKConformanceServer = "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"

// Variables so this package's tests can shorten them.
var (
	// conformanceScenarioTimeout bounds one scenario: each takes well under a second
	// against a healthy server, and a relay that drops a stream makes one hang for good.
	conformanceScenarioTimeout = 30 * time.Second
	// conformanceSuiteBudget bounds a whole run, retries of stalled scenarios included.
	conformanceSuiteBudget = 5 * time.Minute
	// conformanceWatchdogGrace is how much longer than conformanceScenarioTimeout a run
	// of a suite that times scenarios out itself (0.2) may go without starting one: the
	// suite's own timeout records a failed check and carries on, the watchdog is the
	// backstop for a suite that hangs anyway.
	conformanceWatchdogGrace = 15 * time.Second
)

// ConformanceRevision2026 is the MCP revision whose requirement set
// RunConformanceServerSuite2026 runs: stateless requests (server/discover, per-request
// _meta, Mcp-Method and Mcp-Name headers, input_required round trips).
const ConformanceRevision2026 = "2026-07-28"

// ConformanceSuite returns the command that runs the official MCP conformance suite (npm
// @modelcontextprotocol/conformance, a wrapper script that runs it with Node 22):
// SWITCHBOARD_CONFORMANCE when set (the Makefile sets it), otherwise what
// hack/test-servers.sh --conformance prints (installing Node 22 and the suite on first use).
func ConformanceSuite() (string, error) {
	if path := os.Getenv("SWITCHBOARD_CONFORMANCE"); path != "" {
		return path, nil
	}
	return runHackScript("test-servers.sh", "--conformance")
}

// ConformanceSuite2026 returns the command that runs the conformance suite's release for
// the 2026-07-28 revision (npm @modelcontextprotocol/conformance@0.2.0-alpha.12, a wrapper
// script that runs it with Node 22): SWITCHBOARD_CONFORMANCE_2026 when set (the Makefile
// sets it), otherwise what hack/test-servers.sh --conformance-2026 prints (installing
// Node 22 and the suite on first use).
func ConformanceSuite2026() (string, error) {
	if path := os.Getenv("SWITCHBOARD_CONFORMANCE_2026"); path != "" {
		return path, nil
	}
	return runHackScript("test-servers.sh", "--conformance-2026")
}

// StartConformanceServer runs go-sdk's conformance server over stateful Streamable HTTP on
// a free loopback port and returns its MCP endpoint URL once it answers. The server is
// killed when the test ends.
func StartConformanceServer(t testing.TB) string {
	t.Helper()
	bin := BuildGoBinary(t, GoSDKConformanceServer)
	addr := "127.0.0.1:" + strconv.Itoa(FreePort(t))
	// The server answers on every path; /mcp is the conventional one.
	url := "http://" + addr + "/mcp"
	cmd := exec.Command(bin, "-http", addr, "-stateless=false") //nolint:noctx // killed at cleanup
	StartHTTPServerProcess(t, "go-sdk conformance server", cmd, url)
	return url
}

// StartStatelessConformanceServer runs go-sdk's conformance server over stateless
// Streamable HTTP (2026-07-28 requests, no sessions) on a free loopback port and returns
// its MCP endpoint URL once it answers a 2026-07-28 server/discover request. The server
// is killed when the test ends.
func StartStatelessConformanceServer(t testing.TB) string {
	t.Helper()
	bin := BuildGoBinary(t, GoSDKConformanceServer)
	addr := "127.0.0.1:" + strconv.Itoa(FreePort(t))
	url := "http://" + addr + "/mcp"
	// Stateless is the server's default in go-sdk v1.8.0; said explicitly so a change of
	// default cannot turn this into the session server.
	cmd := exec.Command(bin, "-http", addr, "-stateless=true") //nolint:noctx // killed at cleanup
	p := startProcess(t, "go-sdk stateless conformance server", cmd)
	// A stateless server answers GET with 405, which is enough to know it listens; what
	// makes it ready is answering server/discover at 2026-07-28.
	p.waitForHTTP(t, url)
	p.waitForDiscover(t, url)
	return url
}

// waitForDiscover connects to url with go-sdk's client at 2026-07-28, which sends
// server/discover and falls back to initialize when the server does not answer it, and
// fails the test unless the server answered at 2026-07-28.
func (p *process) waitForDiscover(t testing.TB, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-testenv", Version: "v0.0.0"}, nil)
	transport := &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true, MaxRetries: -1}
	session, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: ConformanceRevision2026})
	if err != nil {
		t.Fatalf("%s at %s did not answer server/discover: %v\n%s", p.what, url, err, p.output)
	}
	defer func() { _ = session.Close() }()
	if got := session.InitializeResult().ProtocolVersion; got != ConformanceRevision2026 {
		t.Fatalf("%s at %s answered at protocol version %q, want %s (server/discover):\n%s",
			p.what, url, got, ConformanceRevision2026, p.output)
	}
}

// ConformanceScenario is the outcome of one conformance scenario.
type ConformanceScenario struct {
	// Passed is the suite's verdict: no check failed. Warnings do not fail a scenario.
	Passed bool
	// Succeeded, Failed and Warnings count the scenario's checks by status.
	Succeeded, Failed, Warnings int
	// Skipped counts the checks the suite skipped (0.2 and later): a scenario whose
	// checks were all skipped passes without having tested anything.
	Skipped int
	// Failures says what went wrong, one line per failed check ("Name: message"), or why
	// the scenario produced no checks.
	Failures []string
	// Warned says what the suite warned of, one line per check with status WARNING
	// ("id: message").
	Warned []string
	// Checks lists every check as "id STATUS" ("wif-assertion-verified SUCCESS"), in
	// the order the suite recorded them.
	Checks []string
}

// ConformanceResults is one run of the conformance suite's server scenarios.
type ConformanceResults struct {
	// Name heads this run's column in Table. Empty means "direct" for the first run and
	// "through" for the others.
	Name string
	// URL is the MCP endpoint the suite judged.
	URL string
	// Scenarios maps each scenario the suite ran to its outcome.
	Scenarios map[string]ConformanceScenario
	// NotScored maps each scenario of Scenarios that the suite ran and reported but does
	// not count towards conformance with the revision (2026 runs: "extension" for the
	// optional extensions such as tasks, "pending") to the suite's reason. Empty for the
	// 0.1.16 suite.
	NotScored map[string]string
	// Duration is how long the run took.
	Duration time.Duration
	// Output is what the suite printed, for failure messages.
	Output string
}

// Passed returns the names of the scenarios that passed, sorted.
func (r ConformanceResults) Passed() []string { return r.names(true) }

// Failed returns the names of the scenarios that failed, sorted.
func (r ConformanceResults) Failed() []string { return r.names(false) }

func (r ConformanceResults) names(passed bool) []string {
	var names []string
	for name, s := range r.Scenarios {
		if s.Passed == passed {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// DiffConformance lists the scenarios that pass directly but fail through (a bridge,
// the gateway), or that the run through did not report, one message per scenario; and,
// check by check, every check of a scenario that passes both ways that succeeds directly
// but ends in a warning through. It is empty when everything that works directly works
// through as well.
//
//	for _, problem := range testenv.DiffConformance(direct, through) {
//		t.Error(problem)
//	}
func DiffConformance(direct, through ConformanceResults) []string {
	var problems []string
	for _, name := range direct.Passed() {
		got, ok := through.Scenarios[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("conformance scenario %s passes directly but did not run through %s", name, through.URL))
		case !got.Passed:
			problems = append(problems, fmt.Sprintf("conformance scenario %s passes directly but fails through %s: %s", name, through.URL, strings.Join(got.Failures, "; ")))
		default:
			succeeded := map[string]bool{}
			for _, c := range direct.Scenarios[name].Checks {
				if id, ok := strings.CutSuffix(c, " SUCCESS"); ok {
					succeeded[id] = true
				}
			}
			for _, w := range got.Warned {
				id, _, _ := strings.Cut(w, ": ")
				if succeeded[id] {
					problems = append(problems, fmt.Sprintf("conformance scenario %s: check %s succeeds directly but warns through %s: %s", name, id, through.URL, w))
				}
			}
		}
	}
	return problems
}

// Table renders a markdown table with a row per scenario and a column per run: r first,
// then each of through. Cells read "pass", "pass (N warnings)", "skipped" (every check
// skipped), "FAIL" or "-" (not run). A scenario a run reports as not scored says why
// after its name: "tasks-lifecycle (extension, not scored)".
func (r ConformanceResults) Table(through ...ConformanceResults) string {
	runs := append([]ConformanceResults{r}, through...)
	var names []string
	notScored := map[string]string{}
	for _, run := range runs {
		for name := range run.Scenarios {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
		for name, reason := range run.NotScored {
			notScored[name] = reason
		}
	}
	slices.Sort(names)

	var b strings.Builder
	b.WriteString("| scenario |")
	for i, run := range runs {
		header := run.Name
		switch {
		case header != "":
		case i == 0:
			header = "direct"
		default:
			header = "through"
		}
		fmt.Fprintf(&b, " %s |", header)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(runs)) + "\n")
	for _, name := range names {
		if reason, ok := notScored[name]; ok {
			fmt.Fprintf(&b, "| %s (%s, not scored) |", name, reason)
		} else {
			fmt.Fprintf(&b, "| %s |", name)
		}
		for _, run := range runs {
			fmt.Fprintf(&b, " %s |", tableCell(run.Scenarios, name))
		}
		b.WriteString("\n")
	}
	b.WriteString("| **passed** |")
	for _, run := range runs {
		fmt.Fprintf(&b, " %d/%d |", len(run.Passed()), len(run.Scenarios))
	}
	b.WriteString("\n")
	return b.String()
}

func tableCell(scenarios map[string]ConformanceScenario, name string) string {
	s, ok := scenarios[name]
	switch {
	case !ok:
		return "-"
	case !s.Passed:
		return "FAIL"
	case s.Succeeded == 0 && s.Warnings == 0 && s.Skipped > 0:
		return "skipped"
	case s.Warnings == 1:
		return "pass (1 warning)"
	case s.Warnings > 1:
		return fmt.Sprintf("pass (%d warnings)", s.Warnings)
	default:
		return "pass"
	}
}

// RunConformanceServerSuite runs every server scenario of the official MCP conformance
// suite (pending ones included) against the MCP endpoint url and returns the outcome of
// each. A scenario that makes no progress within 30 seconds is recorded as failed and the
// rest run one at a time, so one hanging scenario does not hide the others. It fails the
// test only when the suite itself cannot run.
func RunConformanceServerSuite(t testing.TB, url string) ConformanceResults {
	t.Helper()
	suite, err := ConformanceSuite()
	if err != nil {
		t.Fatalf("locating the MCP conformance suite: %v", err)
	}
	return runConformanceServerSuite(t, suite, url)
}

// RunConformanceServerSuite2026 runs the server scenarios the 2026-07-28 revision
// requires (conformance 0.2.0-alpha.12 with --requirements 2026-07-28, which also runs and
// reports the optional extensions and pending scenarios, listed in NotScored) against the
// MCP endpoint url at the 2026-07-28 wire, and returns the outcome of each. The suite
// fails a scenario that takes over 30 seconds and goes on; a run that hangs regardless is
// handled as RunConformanceServerSuite does. It fails the test only when the suite itself
// cannot run.
func RunConformanceServerSuite2026(t testing.TB, url string) ConformanceResults {
	t.Helper()
	suite, err := ConformanceSuite2026()
	if err != nil {
		t.Fatalf("locating the MCP conformance suite for %s: %v", ConformanceRevision2026, err)
	}
	return runConformanceSuite(t, conformance2026, suite, url)
}

// conformanceEdition is how one release of the suite is driven.
type conformanceEdition struct {
	// all runs every scenario the edition judges against url, saving results under dir.
	all func(url, dir string) []string
	// one runs scenario alone, as all runs it.
	one func(url, scenario, dir string) []string
	// list lists the scenarios all runs.
	list []string
	// timesOut says the suite times scenarios out itself (--timeout): the watchdog then
	// allows conformanceWatchdogGrace more.
	timesOut bool
}

// conformance2025 drives conformance 0.1.16 (2025-11-25 and older, sessions): every
// server scenario, pending ones included.
var conformance2025 = conformanceEdition{
	all: func(url, dir string) []string {
		return []string{"server", "--url", url, "--suite", "all", "-o", dir}
	},
	one: func(url, scenario, dir string) []string {
		return []string{"server", "--url", url, "--scenario", scenario, "-o", dir}
	},
	list: []string{"list", "--server"},
}

// conformance2026 drives conformance 0.2.0-alpha.12 with the requirement set of
// 2026-07-28.
var conformance2026 = conformanceEdition{
	all: func(url, dir string) []string {
		return []string{"server", "--url", url, "--requirements", ConformanceRevision2026, "-o", dir, "--timeout", suiteTimeout()}
	},
	// The suite refuses --requirements with --scenario; --spec-version runs a scenario
	// at the revision's wire, and --force runs extensions too, which is what a
	// requirements run does for each scenario.
	one: func(url, scenario, dir string) []string {
		return []string{"server", "--url", url, "--scenario", scenario, "--spec-version", ConformanceRevision2026, "--force", "-o", dir, "--timeout", suiteTimeout()}
	},
	// Lists client scenarios too; listedServerScenarios keeps the server ones.
	list:     []string{"list", "--requirements", ConformanceRevision2026},
	timesOut: true,
}

// suiteTimeout is conformanceScenarioTimeout as the suite's --timeout (milliseconds).
func suiteTimeout() string {
	return strconv.FormatInt(conformanceScenarioTimeout.Milliseconds(), 10)
}

// watchdog is how long a run may go without starting a scenario before it is killed.
func (e conformanceEdition) watchdog() time.Duration {
	if e.timesOut {
		return conformanceScenarioTimeout + conformanceWatchdogGrace
	}
	return conformanceScenarioTimeout
}

func runConformanceServerSuite(t testing.TB, suite, url string) ConformanceResults {
	t.Helper()
	return runConformanceSuite(t, conformance2025, suite, url)
}

func runConformanceSuite(t testing.TB, edition conformanceEdition, suite, url string) (results ConformanceResults) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(conformanceSuiteBudget)
	results = ConformanceResults{URL: url, Scenarios: map[string]ConformanceScenario{}, NotScored: map[string]string{}}
	var output strings.Builder
	defer func() {
		results.Duration = time.Since(start)
		results.Output = output.String()
	}()

	run := runConformance(t, suite, edition.watchdog(), edition.all(url, t.TempDir())...)
	output.WriteString(run.output)
	for name, s := range run.scenarios() {
		results.Scenarios[name] = s
	}
	for name, reason := range run.notScored {
		results.NotScored[name] = reason
	}
	if !run.stalled {
		if !run.summarised {
			t.Fatalf("the MCP conformance suite printed no summary (%v):\n%s", run.err, run.output)
		}
		return results
	}

	// A scenario hung: record it and run those it kept from running one by one.
	if run.current != "" {
		results.Scenarios[run.current] = stalledScenario(edition.watchdog())
	}
	list := runConformance(t, suite, edition.watchdog(), edition.list...)
	if list.err != nil {
		t.Fatalf("listing the MCP conformance suite's server scenarios: %v\n%s", list.err, list.output)
	}
	names, notScored := listedServerScenarios(list.stdout)
	for _, name := range names {
		if reason, ok := notScored[name]; ok {
			results.NotScored[name] = reason
		}
		if _, done := results.Scenarios[name]; done {
			continue
		}
		if time.Now().After(deadline) {
			t.Logf("conformance: out of time, %s not run", name)
			continue
		}
		one := runConformance(t, suite, edition.watchdog(), edition.one(url, name, t.TempDir())...)
		output.WriteString(one.output)
		s, ok := one.scenarios()[name]
		switch {
		case one.stalled:
			s = stalledScenario(edition.watchdog())
		case !ok:
			s = ConformanceScenario{Failures: []string{"the suite saved no results: " + lastLines(one.output, 5)}}
		}
		results.Scenarios[name] = s
	}
	return results
}

func stalledScenario(after time.Duration) ConformanceScenario {
	return ConformanceScenario{Failures: []string{fmt.Sprintf("no result within %s", after)}}
}

// conformanceRun is what one invocation of the suite printed and saved.
type conformanceRun struct {
	stdout, output string
	err            error
	// stalled says the run was killed after a scenario made no progress; current names it.
	stalled bool
	current string
	// dirs maps each scenario to the folder its checks.json was saved in.
	dirs map[string]string
	// summary holds the suite's verdict per scenario from its summary (whole-suite runs).
	summary    map[string]bool
	summarised bool
	// notScored maps the scenarios a requirements run reports as not scored to the
	// suite's reason ("extension", "pending").
	notScored map[string]string
}

var (
	scenarioStartLine = regexp.MustCompile(`^=== Running scenario: (\S+) ===$`)
	singleStartLine   = regexp.MustCompile(`^Running client scenario '([^']+)' against server`)
	resultsSavedLine  = regexp.MustCompile(`^Results saved to (.+)$`)
	summaryLine       = regexp.MustCompile(`^([✓✗]) (\S+): \d+ passed, \d+ failed`)
	notScoredStart    = regexp.MustCompile(`^Not scored for \S+: `)
	notScoredLine     = regexp.MustCompile(`^\s+[✓✗] (\S+) \(([^)]+)\)$`)
	listedLine        = regexp.MustCompile(`^\s+- (\S+)(?: \[([^\]]*)\])?`)
	listedReasonLine  = regexp.MustCompile(`^\s+(\S[^(]*?) \(\d+\):$`)
)

// runConformance runs the suite with args, killing it when a scenario makes no progress
// for watchdogAfter, and parses what it printed.
func runConformance(t testing.TB, suite string, watchdogAfter time.Duration, args ...string) *conformanceRun {
	t.Helper()
	cmd := exec.Command(suite, args...) //nolint:noctx // killed by the watchdog below
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	cmd.SysProcAttr = processGroupDyingWithParent()
	var stderr LockedBuffer
	cmd.Stderr = &stderr
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the MCP conformance suite %s: %v", suite, err)
	}

	// Every scenario start is progress; the watchdog restarts on each.
	progress := make(chan struct{}, 1)
	var stdout strings.Builder
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		scanner := bufio.NewScanner(stdoutPipe)
		for scanner.Scan() {
			line := scanner.Text()
			stdout.WriteString(line + "\n")
			if scenarioStartLine.MatchString(line) || singleStartLine.MatchString(line) {
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdoutPipe)
	}()
	exited := make(chan error, 1)
	go func() {
		<-copied // Wait closes the pipe: read it to the end first
		exited <- cmd.Wait()
	}()

	run := &conformanceRun{}
	watchdog := time.NewTimer(watchdogAfter)
	defer watchdog.Stop()
wait:
	for {
		select {
		case <-progress:
			watchdog.Reset(watchdogAfter)
		case run.err = <-exited:
			break wait
		case <-watchdog.C:
			run.stalled = true
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			run.err = <-exited
			break wait
		}
	}
	run.stdout = stdout.String()
	run.output = run.stdout + stderr.String()
	run.parse()
	return run
}

// parse reads the suite's progress lines ("=== Running scenario: X ===", "Results saved
// to DIR"), its summary ("✓ X: 1 passed, 0 failed") and, after a requirements run, the
// scenarios it did not score ("  ✗ tasks-lifecycle (extension)").
func (r *conformanceRun) parse() {
	r.dirs, r.summary, r.notScored = map[string]string{}, map[string]bool{}, map[string]string{}
	inNotScored := false
	for line := range strings.Lines(r.stdout) {
		line = strings.TrimRight(line, "\n")
		if inNotScored {
			if m := notScoredLine.FindStringSubmatch(line); m != nil {
				r.notScored[m[1]] = m[2]
				continue
			}
			inNotScored = false
		}
		if notScoredStart.MatchString(line) {
			inNotScored = true
		} else if m := scenarioStartLine.FindStringSubmatch(line); m != nil {
			r.current = m[1]
		} else if m := singleStartLine.FindStringSubmatch(line); m != nil {
			r.current = m[1]
		} else if m := resultsSavedLine.FindStringSubmatch(line); m != nil && r.current != "" {
			r.dirs[r.current] = m[1]
			r.current = ""
		} else if m := summaryLine.FindStringSubmatch(line); m != nil {
			r.summary[m[2]] = m[1] == "✓"
			r.summarised = true
		}
	}
}

// scenarios returns the outcome of every scenario the run saved checks for or summarised.
func (r *conformanceRun) scenarios() map[string]ConformanceScenario {
	out := map[string]ConformanceScenario{}
	for name, dir := range r.dirs {
		s, err := readChecks(filepath.Join(dir, "checks.json"))
		if err != nil {
			s = ConformanceScenario{Failures: []string{err.Error()}}
		}
		out[name] = s
	}
	for name, passed := range r.summary {
		if _, ok := out[name]; !ok {
			// The scenario threw before saving checks; the suite printed why.
			out[name] = ConformanceScenario{Passed: passed, Failures: []string{"the scenario did not run: " + scenarioError(r.output, name)}}
		}
	}
	return out
}

// conformanceCheck is one entry of a scenario's checks.json.
type conformanceCheck struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Description  string `json:"description"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

func readChecks(path string) (ConformanceScenario, error) {
	data, err := os.ReadFile(path) //nolint:gosec // a folder the suite named in its output
	if err != nil {
		return ConformanceScenario{}, fmt.Errorf("reading conformance results: %w", err)
	}
	var checks []conformanceCheck
	if err := json.Unmarshal(data, &checks); err != nil {
		return ConformanceScenario{}, fmt.Errorf("parsing %s: %w", path, err)
	}
	return scenarioFromChecks(checks), nil
}

// scenarioFromChecks applies the suite's verdict: a scenario passes when no check has
// status FAILURE.
func scenarioFromChecks(checks []conformanceCheck) ConformanceScenario {
	var s ConformanceScenario
	for _, c := range checks {
		s.Checks = append(s.Checks, c.ID+" "+c.Status)
		switch c.Status {
		case "SUCCESS":
			s.Succeeded++
		case "WARNING":
			s.Warnings++
			message := c.ErrorMessage
			if message == "" {
				message = c.Description
			}
			s.Warned = append(s.Warned, c.ID+": "+message)
		case "SKIPPED":
			s.Skipped++
		case "FAILURE":
			s.Failed++
			message := c.ErrorMessage
			if message == "" {
				message = c.Description
			}
			s.Failures = append(s.Failures, c.Name+": "+message)
		}
	}
	s.Passed = s.Failed == 0
	return s
}

// scenarioError finds the error the suite printed for a scenario that threw.
func scenarioError(output, name string) string {
	prefix := "Failed to run scenario " + name + ":"
	for line := range strings.Lines(output) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return strings.TrimSpace(rest)
		}
	}
	return "no checks saved"
}

// listedServerScenarios reads the server scenarios from what the suite's list command
// printed: "list --server" (0.1.16: one "Server scenarios" section, versions in
// brackets) or "list --requirements REV" (0.2: a server and a client section, then the
// scenarios run but never scored, grouped by reason, with their leg in brackets). The
// second result maps the not-scored server scenarios to their reason.
func listedServerScenarios(stdout string) ([]string, map[string]string) {
	var names []string
	notScored := map[string]string{}
	section, reason := "server", ""
	for line := range strings.Lines(stdout) {
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
		case !strings.HasPrefix(line, " "): // a section heading
			switch {
			case strings.HasPrefix(line, "Server scenarios"):
				section = "server"
			case strings.HasPrefix(line, "Run and reported, but never scored"):
				section, reason = "not scored", ""
			default:
				section = "other"
			}
		case section == "server":
			if m := listedLine.FindStringSubmatch(line); m != nil {
				names = append(names, m[1])
			}
		case section == "not scored":
			if m := listedReasonLine.FindStringSubmatch(line); m != nil {
				reason = m[1]
			} else if m := listedLine.FindStringSubmatch(line); m != nil && m[2] == "server" {
				names = append(names, m[1])
				notScored[m[1]] = reason
			}
		}
	}
	return names, notScored
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// ConformanceClientRun is one run of a client scenario of the conformance suite.
type ConformanceClientRun struct {
	ConformanceScenario
	// Output is what the suite printed.
	Output string
	// ClientStdout and ClientStderr are what the client under test printed.
	ClientStdout, ClientStderr string
}

// RunConformanceClientScenario runs the conformance suite's client scenario with command
// as the client under test: the suite starts the scenario's servers and runs command
// with the server URL appended and the scenario's credentials in
// MCP_CONFORMANCE_CONTEXT. env is added to the suite's environment, which the client
// inherits. It returns the suite's verdict on the scenario's checks (the client's exit
// code does not count), and fails the test only when the suite itself cannot run.
func RunConformanceClientScenario(t testing.TB, command, scenario string, env ...string) ConformanceClientRun {
	t.Helper()
	suite, err := ConformanceSuite()
	if err != nil {
		t.Fatalf("locating the MCP conformance suite: %v", err)
	}
	return runConformanceClientScenario(t, suite, command, scenario, env...)
}

// RunConformanceClientScenario2026 is RunConformanceClientScenario with the suite's
// release for the 2026-07-28 revision (0.2.0-alpha.12), whose client scenarios include
// the authorization extensions (auth/wif-jwt-bearer,
// auth/enterprise-managed-authorization).
func RunConformanceClientScenario2026(t testing.TB, command, scenario string, env ...string) ConformanceClientRun {
	t.Helper()
	suite, err := ConformanceSuite2026()
	if err != nil {
		t.Fatalf("locating the MCP conformance suite for %s: %v", ConformanceRevision2026, err)
	}
	return runConformanceClientScenario(t, suite, command, scenario, env...)
}

func runConformanceClientScenario(t testing.TB, suite, command, scenario string, env ...string) ConformanceClientRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite, "client", "--command", command, "--scenario", scenario, "-o", t.TempDir())
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1"), env...)
	cmd.SysProcAttr = processGroupDyingWithParent()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, _ := cmd.CombinedOutput()
	run := ConformanceClientRun{Output: string(out)}
	var dir string
	for line := range strings.Lines(run.Output) {
		if m := resultsSavedLine.FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
			dir = m[1]
		}
	}
	if dir == "" {
		if ctx.Err() != nil {
			t.Fatalf("the MCP conformance suite did not finish scenario %s:\n%s", scenario, run.Output)
		}
		t.Fatalf("the MCP conformance suite saved no results for %s:\n%s", scenario, run.Output)
	}
	s, err := readChecks(filepath.Join(dir, "checks.json"))
	if err != nil {
		t.Fatalf("%v\n%s", err, run.Output)
	}
	run.ConformanceScenario = s
	stdout, _ := os.ReadFile(filepath.Join(dir, "stdout.txt")) //nolint:gosec // a folder the suite named
	stderr, _ := os.ReadFile(filepath.Join(dir, "stderr.txt")) //nolint:gosec // a folder the suite named
	run.ClientStdout, run.ClientStderr = string(stdout), string(stderr)
	return run
}
