package bridge_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/bridge"
)

// served waits for Serve to return, and leaves nil for the test's cleanup to find.
func (r *running) waitServed(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.served:
		r.served <- nil
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the bridge still serves 30s on")
		return nil
	}
}

// TestFirstProcessExitingAtOnceStopsTheBridge: a command that dies as it starts (its warm
// spare here) ends the bridge with an error naming the command and its exit status, after
// its stderr was logged, instead of a bridge that answers /readyz while every session fails.
func TestFirstProcessExitingAtOnceStopsTheBridge(t *testing.T) {
	for _, mode := range []bridge.SessionMode{bridge.PerSession, bridge.Shared} {
		t.Run(string(mode), func(t *testing.T) {
			r := startBridge(t, bridge.Options{
				Command:       []string{"sh", "-c", "echo 'Error: Cannot find module dist/index.js' >&2; exit 7"},
				SessionMode:   mode,
				WarmProcesses: 1,
				GracePeriod:   500 * time.Millisecond,
				StartupWindow: time.Minute,
			})
			if mode == bridge.Shared {
				// Its one process starts with the first session.
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, _ = r.connect(ctx)
				cancel()
			}
			err := r.waitServed(t)
			var commandErr *bridge.CommandError
			if !errors.As(err, &commandErr) || commandErr.Command != "sh" || !strings.Contains(err.Error(), "exit status 7") {
				t.Fatalf("Serve = %v, want a CommandError naming sh and exit status 7", err)
			}
			if !strings.Contains(err.Error(), `mcp server command "sh": exited `) {
				t.Errorf("error %q does not say that the command exited", err)
			}
			if lines := r.logs.matching("MCP server stderr", "Cannot find module"); len(lines) == 0 {
				t.Error("the process's stderr was not logged before the bridge stopped")
			}
		})
	}
}

// TestProcessTheBridgeStopsDoesNotCount: the first process ending because its session
// ended is no failure of the command; the bridge keeps serving.
func TestProcessTheBridgeStopsDoesNotCount(t *testing.T) {
	opts := helperOptions(t)
	opts.WarmProcesses = 0
	opts.StartupWindow = time.Hour
	r := startBridge(t, opts)
	cs := r.mustConnect(t)
	pid := mustPID(t, cs, "pid")
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the session's process to be reaped", func() bool { return !exists(pid) })
	select {
	case <-r.StartupSettled():
	case <-time.After(30 * time.Second):
		t.Fatal("no verdict on the first process 30s after it was reaped")
	}
	select {
	case err := <-r.served:
		r.served <- err
		t.Fatalf("the bridge stopped (%v) after a session it ended", err)
	default:
	}
	if code := r.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("GET /readyz = %d", code)
	}
	r.mustConnect(t)
}

// TestMissingCommandIsACommandError: New names the command that is not there.
func TestMissingCommandIsACommandError(t *testing.T) {
	_, err := bridge.New(bridge.Options{Command: []string{"no-such-mcp-server", "--token", "s3cr3t"}})
	var commandErr *bridge.CommandError
	if !errors.As(err, &commandErr) || commandErr.Command != "no-such-mcp-server" {
		t.Fatalf("New = %v, want a CommandError naming the command", err)
	}
	if want := `mcp server command "no-such-mcp-server": executable file not found in $PATH`; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}
