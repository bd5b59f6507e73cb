package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// TestDevBringsUpTheDemoAndCtrlCLeavesNothingBehind runs `switchboard dev` as a newcomer
// would from the source tree, checks the demo with kubectl and the catalogue, then
// presses Ctrl-C and looks for any process it left behind.
func TestDevBringsUpTheDemoAndCtrlCLeavesNothingBehind(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatal("kubectl is required on PATH")
	}
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	// The stdio sample runs `switchboard demo-server`: the binary must carry that name.
	bin := buildSwitchboard(t)

	stateDir := t.TempDir()
	catalogAddr, metricsAddr := freeAddr(t), freeAddr(t)
	cmd := exec.CommandContext(context.Background(), bin, "dev", "--dir", stateDir,
		"--catalog-bind-address", catalogAddr, "--metrics-bind-address", metricsAddr)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+assets)
	// Its own process group, so that the interrupt below reaches exactly what a terminal's
	// Ctrl-C would: dev and whatever it did not move to a group of its own.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	output := &lockedLines{}
	upLine := make(chan struct{})
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			output.add(scanner.Text())
			if scanner.Text() == "Press Ctrl-C to stop." {
				close(upLine)
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })

	select {
	case <-upLine:
	case err := <-exited:
		t.Fatalf("dev exited early (%v):\n%s\n%s", err, output, stderr.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("dev did not come up within 3 minutes:\n%s\n%s", output, stderr.String())
	}
	kubeconfig := filepath.Join(stateDir, "kubeconfig")
	if !strings.Contains(output.String(), "export KUBECONFIG="+kubeconfig) {
		t.Errorf("dev did not print the kubeconfig line for %s:\n%s", kubeconfig, output)
	}

	// kubectl get mcps shows the samples Ready with their tools, the rogue one denied.
	table := kubectl(t, kubeconfig, "get", "mcps", "-n", "switchboard-demo", "--no-headers",
		"-o", "custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type=='Ready')].status,"+
			"REASON:.status.conditions[?(@.type=='Ready')].reason,TRANSPORT:.status.transport,TOOLS:.status.toolCount")
	want := map[string]struct{ ready, reason, transport string }{
		"notes": {"True", "Succeeded", "StreamableHTTP"},
		"clock": {"True", "Succeeded", "SSE"},
		"dice":  {"True", "Succeeded", "Stdio"},
		"rogue": {"False", "EgressDenied", "<none>"},
	}
	rows := 0
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("unexpected kubectl row %q", line)
		}
		rows++
		w, ok := want[f[0]]
		if !ok {
			t.Errorf("unexpected server %s", f[0])
			continue
		}
		if f[1] != w.ready || f[2] != w.reason || f[3] != w.transport {
			t.Errorf("%s: Ready=%s reason=%s transport=%s, want %s %s %s", f[0], f[1], f[2], f[3], w.ready, w.reason, w.transport)
		}
		if tools, _ := strconv.Atoi(f[4]); w.ready == "True" && tools == 0 {
			t.Errorf("%s is Ready with no tools", f[0])
		}
	}
	if rows != len(want) {
		t.Errorf("kubectl listed %d servers, want %d:\n%s", rows, len(want), table)
	}
	// The denial names the policy that caused it.
	if msg := kubectl(t, kubeconfig, "get", "mcps", "rogue", "-n", "switchboard-demo",
		"-o", "jsonpath={.status.conditions[?(@.type=='Ready')].message}"); !strings.Contains(msg, "approved-demo-servers") {
		t.Errorf("rogue's Ready message does not name the egress policy: %q", msg)
	}

	// The catalogue (no authentication in dev) lists the stdio server's tools.
	tools := httpGet(t, "http://"+catalogAddr+"/api/v1/tools?q=dice")
	if !strings.Contains(tools, "roll_dice") {
		t.Errorf("catalogue search for dice lacks roll_dice: %s", tools)
	}

	// dev prints the demo toolset's endpoint, lists its tools (prefixed, echo denied,
	// search_notes renamed) and finds the note through it.
	if url := "http://" + catalogAddr + "/mcp/namespaces/switchboard-demo/toolsets/assistant"; !strings.Contains(output.String(), url) {
		t.Errorf("dev does not print the toolset's gateway URL %s:\n%s", url, output)
	}
	if tools := lineAfter(output.String(), "==> Listing the tools of toolset assistant and calling search_notes through it"); !strings.Contains(tools, "dice_roll_dice") ||
		!strings.Contains(tools, "search_notes") || strings.Contains(tools, "_echo") {
		t.Errorf("dev lists the toolset's tools as %q", tools)
	}
	if answer := lineAfter(output.String(), `    search_notes (toolset) {"query":"gateway"}`); !strings.Contains(answer, demoNoteTitle) {
		t.Errorf("dev does not print search_notes finding its note through the toolset (got %q):\n%s", answer, output)
	}

	// dev prints every demo server's endpoint on the gateway, on the catalogue's address.
	for name := range want {
		url := "http://" + catalogAddr + "/mcp/namespaces/switchboard-demo/servers/" + name
		if !strings.Contains(output.String(), url) {
			t.Errorf("dev does not print the gateway URL %s:\n%s", url, output)
		}
	}

	// The notes server answers 401 to a caller without its token...
	if code := postStatus(t, "http://"+notesAddr+"/mcp"); code != http.StatusUnauthorized {
		t.Errorf("the notes server answered %d to a request without its token, want 401", code)
	}
	// ...yet dev's go-sdk client, which holds none, got search_notes' answer through the
	// gateway,
	if answer := lineAfter(output.String(), `    search_notes {"query":"gateway"}`); !strings.Contains(answer, `"title":"`+demoNoteTitle+`"`) {
		t.Errorf("dev does not print search_notes finding its note through the gateway (got %q):\n%s", answer, output)
	}
	// and so do the curl lines dev prints, pasted into bash.
	script := printedCurl(output.String())
	if script == "" {
		t.Fatalf("dev prints no curl lines for the gateway:\n%s", output)
	}
	curlOut, err := exec.CommandContext(context.Background(), "bash", "-euo", "pipefail", "-c", script).CombinedOutput()
	if err != nil || !strings.Contains(string(curlOut), `"id":2,"result"`) || !strings.Contains(string(curlOut), demoNoteTitle) {
		t.Errorf("the printed curl lines did not get search_notes' answer (%v):\n%s\n%s", err, script, curlOut)
	}
	// Both calls went through the gateway, which audited them.
	audited, toolsetAudited := 0, 0
	for _, line := range strings.Split(readFile(t, filepath.Join(stateDir, "manager.log")), "\n") {
		if strings.Contains(line, "gateway.audit") && strings.Contains(line, "Tool call") &&
			strings.Contains(line, `"tool": "search_notes"`) && strings.Contains(line, `"outcome": "ok"`) {
			if strings.Contains(line, `"toolset": "assistant"`) {
				toolsetAudited++
			} else {
				audited++
			}
		}
	}
	if audited != 2 {
		t.Errorf("the gateway audited %d successful search_notes calls, want 2 (dev's and curl's)", audited)
	}
	if toolsetAudited != 1 {
		t.Errorf("the gateway audited %d successful search_notes calls through the toolset, want 1 (dev's)", toolsetAudited)
	}

	// dev serves metrics over plain HTTP without authentication, as it prints.
	if !strings.Contains(output.String(), "Metrics:        http://"+metricsAddr+"/metrics") {
		t.Errorf("dev does not print its metrics address http://%s/metrics:\n%s", metricsAddr, output)
	}
	if metrics := httpGet(t, "http://"+metricsAddr+"/metrics"); !strings.Contains(metrics, "switchboard_connector_sessions") {
		t.Errorf("dev's metrics lack switchboard_connector_sessions:\n%.2000s", metrics)
	}

	// The notes token reaches the notes server and nothing a person reads.
	const token = "demo-only-token-4f7c2a"
	for what, text := range map[string]string{
		"kubectl get mcps -o yaml": kubectl(t, kubeconfig, "get", "mcps", "-A", "-o", "yaml"),
		"Events":                   kubectl(t, kubeconfig, "get", "events", "-A", "-o", "yaml"),
		"the catalogue":            httpGet(t, "http://"+catalogAddr+"/api/v1/servers"),
		"dev's output":             output.String() + stderr.String(),
		"the manager log":          readFile(t, filepath.Join(stateDir, "manager.log")),
	} {
		if strings.Contains(text, token) {
			t.Errorf("%s contains the notes token", what)
		}
	}

	// Ctrl-C: dev exits cleanly and every process it started is gone.
	started := descendants(cmd.Process.Pid)
	if len(started) < 3 { // etcd, kube-apiserver and the dice bridge at least
		t.Fatalf("dev runs %d child processes, want etcd, kube-apiserver and a bridge", len(started))
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("dev exited with %v after Ctrl-C:\n%s\n%s", err, output, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("dev did not stop within a minute of Ctrl-C")
	}
	for _, pid := range started {
		if alive(pid) {
			t.Errorf("process %d (%s) outlived dev", pid, cmdline(pid))
		}
	}
}

func kubectl(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(context.Background(), "kubectl",
		append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // test helper
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, body)
	}
	return string(body)
}

// postStatus returns the status code of an empty MCP POST to url.
func postStatus(t *testing.T, url string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// lineAfter returns the line of text that follows the line equal to line, or "".
func lineAfter(text, line string) string {
	lines := strings.Split(text, "\n")
	for i := 0; i+1 < len(lines); i++ {
		if lines[i] == line {
			return lines[i+1]
		}
	}
	return ""
}

// printedCurl returns the shell lines dev prints for calling search_notes with curl,
// from "URL=" to the closing DELETE, without their indent.
func printedCurl(output string) string {
	var script []string
	for _, line := range strings.Split(output, "\n") {
		if strings.HasPrefix(line, "  URL=") || len(script) > 0 {
			script = append(script, strings.TrimPrefix(line, "  "))
		}
		if len(script) > 0 && strings.Contains(line, "-X DELETE") {
			break
		}
	}
	return strings.Join(script, "\n")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// descendants returns the pids of every process below pid, read from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(child); ok {
			children[ppid] = append(children[ppid], child)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		out = append(out, children[next]...)
		queue = append(queue, children[next]...)
	}
	return out
}

// parentOf reads a process's parent pid from /proc/PID/stat.
func parentOf(pid int) (int, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name is in parentheses and may hold spaces: fields follow the last ')'.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(fields[1])
	return ppid, err == nil
}

// alive says whether pid still runs; a zombie waiting for its parent counts as gone.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func cmdline(pid int) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(data), "\x00", " ")
}

// lockedLines collects output lines from one goroutine for reading in another.
type lockedLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *lockedLines) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

func (l *lockedLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
