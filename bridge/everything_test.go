package bridge_test

import (
	"context"
	"errors"
	"io"
	"net/http"
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

func TestServerEverythingSessionLimitAnswersClearly(t *testing.T) {
	r := startBridge(t, bridge.Options{Command: serverEverything(t), MaxSessions: 1, GracePeriod: time.Second})
	first := r.mustConnect(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := r.connect(ctx)
	if err == nil || !strings.Contains(err.Error(), "Service Unavailable") {
		t.Fatalf("second session: err = %v, want Service Unavailable", err)
	}

	// Any client sees why: a 503 with a JSON-RPC error naming the limit.
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(data), "too many sessions: all 1 sessions are in use") ||
		resp.Header.Get("Retry-After") == "" {
		t.Errorf("over the limit: %d %q (Retry-After %q), want 503 naming the limit", resp.StatusCode, data, resp.Header.Get("Retry-After"))
	}
	if n := len(r.Sessions()); n != 1 {
		t.Errorf("%d sessions after refusals, want 1", n)
	}

	// The existing session is not disturbed.
	if got := mustCallText(t, first, "echo", map[string]any{"message": "still here"}); !strings.Contains(got, "still here") {
		t.Errorf("echo = %q", got)
	}
	// Once it ends, its slot is free again.
	if err := first.Close(); err != nil {
		t.Fatalf("closing the first session: %v", err)
	}
	eventually(t, 15*time.Second, "a new session after the first one ended", func() bool {
		cs, err := r.connect(ctx)
		if err != nil {
			return false
		}
		_ = cs.Close()
		return true
	})
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
