package bridge_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/bridge"
)

// These tests run the bridge in front of the npm reference server, exactly as a pod runs
// `switchboard bridge -- node dist/index.js stdio`.

// pidOf returns the subprocess PID of the bridge session cs is connected to.
func pidOf(t *testing.T, r *running, cs *mcp.ClientSession) int {
	t.Helper()
	for _, s := range r.Sessions() {
		if s.ID == cs.ID() {
			return s.PID
		}
	}
	t.Fatalf("no bridge session for client session")
	return 0
}

func TestServerEverythingConcurrentClientsGetTheirOwnProcess(t *testing.T) {
	r := startBridge(t, bridge.Options{Command: serverEverything(t), MaxSessions: 4, GracePeriod: time.Second})

	var wg sync.WaitGroup
	sessions := make([]*mcp.ClientSession, 2)
	toggled := make([]string, 2)
	for i := range sessions {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cs, err := r.connect(ctx)
			if err != nil {
				t.Errorf("client %d: connecting: %v", i, err)
				return
			}
			t.Cleanup(func() { _ = cs.Close() })
			sessions[i] = cs
			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Errorf("client %d: listing tools: %v", i, err)
				return
			}
			if !slices.ContainsFunc(tools.Tools, func(tool *mcp.Tool) bool { return tool.Name == "echo" }) {
				t.Errorf("client %d: no echo tool among %d tools", i, len(tools.Tools))
			}
			msg := "hello from client " + string(rune('A'+i))
			if got, err := callText(ctx, cs, "echo", map[string]any{"message": msg}); err != nil || !strings.Contains(got, msg) {
				t.Errorf("client %d: echo = %q, %v; want it to contain %q", i, got, err, msg)
			}
			// The reference server keeps this toggle in process-wide state in stdio mode:
			// both clients see "Started" only if each has a process of its own.
			if toggled[i], err = callText(ctx, cs, "toggle-simulated-logging", map[string]any{}); err != nil {
				t.Errorf("client %d: toggle-simulated-logging: %v", i, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, text := range toggled {
		if !strings.HasPrefix(text, "Started") {
			t.Errorf("client %d: toggle-simulated-logging = %q, want a fresh process's \"Started...\"", i, text)
		}
	}
	pidA, pidB := pidOf(t, r, sessions[0]), pidOf(t, r, sessions[1])
	if pidA == pidB {
		t.Fatalf("both sessions run in process %d", pidA)
	}

	r.stop(t)
	for _, pid := range []int{pidA, pidB} {
		if exists(pid) {
			t.Errorf("process %d still exists (running or unreaped) after shutdown", pid)
		}
	}
	if len(r.Sessions()) != 0 {
		t.Errorf("sessions left after shutdown: %v", r.Sessions())
	}
}

func TestServerEverythingSessionLimitEvictsTheIdleSession(t *testing.T) {
	r := startBridge(t, bridge.Options{Command: serverEverything(t), MaxSessions: 1, GracePeriod: time.Second})
	first := r.mustConnect(t)
	firstPID := pidOf(t, r, first)
	mustCallText(t, first, "echo", map[string]any{"message": "first"})

	second := r.mustConnect(t)
	if got := mustCallText(t, second, "echo", map[string]any{"message": "second"}); !strings.Contains(got, "second") {
		t.Errorf("echo = %q", got)
	}
	if alive(firstPID) {
		t.Error("the evicted session's process is still running")
	}
	assertSessionGone(t, r, first)
	if lines := r.logs.matching("Session ended", "session evicted"); len(lines) != 1 {
		t.Errorf("eviction log lines: %q", lines)
	}
}

func TestServerEverythingKilledProcessEndsOnlyItsSession(t *testing.T) {
	r := startBridge(t, bridge.Options{Command: serverEverything(t), MaxSessions: 2, GracePeriod: time.Second})
	victim, bystander := r.mustConnect(t), r.mustConnect(t)
	pid := pidOf(t, r, victim)

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the killed process's session to end", func() bool {
		return len(r.Sessions()) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := victim.ListTools(ctx, nil); err == nil {
		t.Error("a call on the killed process's session succeeded")
	} else if !errors.Is(err, mcp.ErrSessionMissing) && !errors.Is(err, mcp.ErrConnectionClosed) {
		t.Errorf("call on the killed process's session: %v, want the session gone", err)
	}
	if got := mustCallText(t, bystander, "echo", map[string]any{"message": "unaffected"}); !strings.Contains(got, "unaffected") {
		t.Errorf("other session: echo = %q", got)
	}
	eventually(t, 10*time.Second, "the killed process to be reaped", func() bool { return !exists(pid) })

	// The next session gets a fresh process.
	next := r.mustConnect(t)
	if got := mustCallText(t, next, "echo", map[string]any{"message": "fresh"}); !strings.Contains(got, "fresh") {
		t.Errorf("new session: echo = %q", got)
	}
	if pidOf(t, r, next) == pid {
		t.Error("the new session reuses the killed process's PID")
	}
	if lines := r.logs.matching("Session ended", "signal: killed"); len(lines) != 1 {
		t.Errorf("log lines for the killed session: %q", lines)
	}
}
