package bridge_test

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/bridge"
)

// helperOptions runs the helper MCP server with a short grace period.
func helperOptions(t testing.TB) bridge.Options {
	argv, env := testServerCommand(t)
	return bridge.Options{Command: argv, Env: env, GracePeriod: 500 * time.Millisecond}
}

func mustPID(t *testing.T, cs *mcp.ClientSession, tool string) int {
	t.Helper()
	pid, err := strconv.Atoi(mustCallText(t, cs, tool, map[string]any{}))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// assertSessionGone checks that the bridge dropped cs's session and that a call on it
// fails.
func assertSessionGone(t *testing.T, r *running, cs *mcp.ClientSession) {
	t.Helper()
	for _, s := range r.Sessions() {
		if s.ID == cs.ID() {
			t.Fatal("the session is still live")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.ListTools(ctx, nil); err == nil {
		t.Fatal("a call on an ended session succeeded")
	}
}

func TestExitingProcessFailsItsCallsAndItsSessionOnly(t *testing.T) {
	r := startBridge(t, helperOptions(t))
	victim, bystander := r.mustConnect(t), r.mustConnect(t)
	pid := mustPID(t, victim, "pid")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := callText(ctx, victim, "exit", map[string]any{"code": 3})
	if err == nil || !strings.Contains(err.Error(), "mcp server process exited: exit status 3") {
		t.Fatalf("call that made the server exit: err = %v, want the exit status", err)
	}
	assertSessionGone(t, r, victim)
	eventually(t, 10*time.Second, "the exited process to be reaped", func() bool { return !exists(pid) })

	if got := mustCallText(t, bystander, "echo", map[string]any{"message": "unaffected"}); got != "unaffected" {
		t.Errorf("other session: echo = %q", got)
	}
	next := r.mustConnect(t)
	if got := mustPID(t, next, "pid"); got == pid {
		t.Error("the next session did not get a fresh process")
	}
}

func TestServerThatFailsAtStartup(t *testing.T) {
	r := startBridge(t, bridge.Options{
		Command:     []string{"sh", "-c", "echo 'cannot find module dist/index.js' >&2; exit 7"},
		GracePeriod: 500 * time.Millisecond,
	})
	for range 2 { // and again: each session gets a fresh process
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := r.connect(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "mcp server process exited: exit status 7") {
			t.Fatalf("connecting to a server that exits at once: err = %v, want its exit status", err)
		}
	}
	eventually(t, 5*time.Second, "both sessions to end", func() bool { return len(r.Sessions()) == 0 })
	if lines := r.logs.matching("MCP server stderr", "cannot find module"); len(lines) != 2 {
		t.Errorf("stderr log lines: %q, want one per process", lines)
	}
	if code := r.get(t, "/readyz"); code != 200 {
		t.Errorf("GET /readyz = %d", code)
	}
}

func TestOverlongLineEndsItsSessionAndBridgeStaysHealthy(t *testing.T) {
	opts := helperOptions(t)
	opts.MaxMessageBytes = 1 << 20
	r := startBridge(t, opts)
	victim, bystander := r.mustConnect(t), r.mustConnect(t)
	pid := mustPID(t, victim, "pid")

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := callText(ctx, victim, "flood", map[string]any{"bytes": 100 << 20})
	if err == nil || !strings.Contains(err.Error(), "mcp server wrote a line longer than 1048576 bytes") {
		t.Fatalf("call whose server wrote a 100 MiB line: err = %v, want the line limit", err)
	}
	runtime.ReadMemStats(&after)
	// Buffering the line would allocate well over 100 MiB; the bridge reads 1 MiB of it.
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 48<<20 {
		t.Errorf("the bridge allocated %d MiB while cutting off a 100 MiB line", allocated>>20)
	}
	assertSessionGone(t, r, victim)
	eventually(t, 10*time.Second, "the flooding process to be stopped", func() bool { return !exists(pid) })

	if got := mustCallText(t, bystander, "echo", map[string]any{"message": "unaffected"}); got != "unaffected" {
		t.Errorf("other session: echo = %q", got)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code := r.get(t, path); code != 200 {
			t.Errorf("GET %s = %d after a flood", path, code)
		}
	}
}

func TestStderrIsLoggedLineBoundedAndRateLimited(t *testing.T) {
	r := startBridge(t, helperOptions(t))
	cs := r.mustConnect(t)

	mustCallText(t, cs, "stderr", map[string]any{"lines": 1, "text": "short-line " + strings.Repeat("y", 10<<10)})
	eventually(t, 5*time.Second, "the long stderr line in the log", func() bool {
		return len(r.logs.matching("MCP server stderr", "short-line")) == 1
	})
	long := r.logs.matching("short-line")[0]
	if !strings.Contains(long, `"truncated"=true`) || len(long) > 5<<10 {
		t.Errorf("a 10 KiB stderr line was logged as %d bytes (want it cut to 4 KiB and marked truncated)", len(long))
	}

	mustCallText(t, cs, "stderr", map[string]any{"lines": 5000, "text": "noisy-line"})
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the session to end", func() bool { return len(r.Sessions()) == 0 })
	eventually(t, 10*time.Second, "the dropped line count in the log", func() bool {
		return len(r.logs.matching("Dropped MCP server stderr lines")) > 0
	})
	logged := len(r.logs.matching("MCP server stderr", "noisy-line"))
	if logged < 50 || logged > 1000 {
		t.Errorf("%d of 5000 stderr lines written at once were logged, want the burst of about 100", logged)
	}
}

func TestIdleSessionsAreReaped(t *testing.T) {
	opts := helperOptions(t)
	opts.IdleTimeout = 2 * time.Second
	r := startBridge(t, opts)
	idle := r.mustConnect(t)
	idlePID := pidOf(t, r, idle)
	busy := r.mustConnect(t)
	busyPID := pidOf(t, r, busy)

	// The busy session calls more often than the timeout; the idle one never does.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		mustCallText(t, busy, "echo", map[string]any{"message": "keepalive"})
		time.Sleep(200 * time.Millisecond)
	}
	eventually(t, 5*time.Second, "the idle session to be reaped", func() bool { return !exists(idlePID) })
	assertSessionGone(t, r, idle)
	if !exists(busyPID) {
		t.Error("the busy session's process was stopped")
	}
	if got := mustCallText(t, busy, "echo", map[string]any{"message": "still busy"}); got != "still busy" {
		t.Errorf("busy session: echo = %q", got)
	}
	if lines := r.logs.matching("Session ended", "session idle timeout"); len(lines) != 1 {
		t.Errorf("idle reaping log lines: %q", lines)
	}
}

func TestShutdownStopsEveryProcessGroup(t *testing.T) {
	r := startBridge(t, helperOptions(t))
	polite, stubborn := r.mustConnect(t), r.mustConnect(t)
	politePID, stubbornPID := mustPID(t, polite, "pid"), mustPID(t, stubborn, "pid")
	grandchild := mustPID(t, polite, "spawn")
	mustCallText(t, stubborn, "linger", map[string]any{}) // outlives stdin: needs SIGTERM

	// Shutdown refuses new sessions while it waits for the old ones.
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Close()
	}()
	eventually(t, 5*time.Second, "readiness to fail", func() bool { return r.get(t, "/readyz") == 503 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.connect(ctx); err == nil {
		t.Error("a new session started during shutdown")
	}
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return")
	}

	for name, pid := range map[string]int{"polite server": politePID, "stubborn server": stubbornPID} {
		if exists(pid) {
			t.Errorf("%s %d still exists (running or unreaped) after Close", name, pid)
		}
	}
	if alive(grandchild) {
		t.Errorf("grandchild %d of a server survived Close", grandchild)
	}
	if lines := r.logs.matching("Session ended", "signal: terminated"); len(lines) != 1 {
		t.Errorf("want exactly the stubborn server terminated by signal, log: %q", lines)
	}
	r.stop(t)
}

func TestEndedSessionsLeaveNoGoroutinesBehind(t *testing.T) {
	r := startBridge(t, helperOptions(t))
	warm := r.mustConnect(t) // let the HTTP client and server settle their own goroutines
	mustCallText(t, warm, "echo", map[string]any{"message": "warm"})
	_ = warm.Close()
	eventually(t, 10*time.Second, "the warm-up session to end", func() bool { return len(r.Sessions()) == 0 })
	time.Sleep(500 * time.Millisecond)
	before := runtime.NumGoroutine()

	for i := range 5 {
		cs := r.mustConnect(t)
		mustCallText(t, cs, "echo", map[string]any{"message": "x"})
		if i%2 == 0 {
			_ = cs.Close()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _ = callText(ctx, cs, "exit", map[string]any{"code": 1})
			cancel()
			_ = cs.Close()
		}
	}
	eventually(t, 10*time.Second, "every session to end", func() bool { return len(r.Sessions()) == 0 })
	eventually(t, 10*time.Second, "goroutines to return to the baseline", func() bool {
		http.DefaultClient.CloseIdleConnections()
		return runtime.NumGoroutine() <= before+2
	})
}
