package bridge_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// TestCommandShutsDownOnSIGTERM runs `switchboard bridge` the way the pod's container
// does, and stops it the way the kubelet does.
func TestCommandShutsDownOnSIGTERM(t *testing.T) {
	bin := testenv.BuildGoBinary(t, "./cmd/switchboard")

	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()

	argv, env := testServerCommand(t)
	cmd := exec.CommandContext(context.Background(), bin, append([]string{"bridge", "--listen", addr, "--grace-period", "1s", "--"}, argv...)...)
	cmd.Env = env // the subprocess inherits the bridge's environment
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if err := <-exited; err != nil {
			t.Logf("bridge process: %v", err)
		}
	})

	r := &running{url: "http://" + addr + "/mcp", base: "http://" + addr}
	eventually(t, 30*time.Second, "the bridge to be ready", func() bool {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, r.base+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	sessions := []*mcp.ClientSession{r.mustConnect(t), r.mustConnect(t)}
	pids := []int{mustPID(t, sessions[0], "pid"), mustPID(t, sessions[1], "pid"), mustPID(t, sessions[0], "spawn")}
	mustCallText(t, sessions[1], "linger", map[string]any{})
	mustCallText(t, sessions[1], "stderr", map[string]any{"lines": 1, "text": "hello from the server's stderr"})

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("bridge exited with %v after SIGTERM; log:\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("bridge still running 20s after SIGTERM; log:\n%s", stderr.String())
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d survived the bridge", pid)
		}
	}

	// Every log line is a JSON object; the sessions' ends and the server's stderr are there.
	var ended, serverStderr int
	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	for sc.Scan() {
		var entry map[string]any
		if err := json.Unmarshal(sc.Bytes(), &entry); err != nil {
			t.Errorf("log line is not JSON: %q", sc.Text())
			continue
		}
		switch entry["msg"] {
		case "Session ended":
			ended++
		case "MCP server stderr":
			if entry["line"] == "hello from the server's stderr" && entry["logger"] == "bridge" {
				serverStderr++
			}
		}
	}
	if ended != 2 {
		t.Errorf("%d sessions logged as ended, want 2; log:\n%s", ended, stderr.String())
	}
	if serverStderr != 1 {
		t.Errorf("the server's stderr line was logged %d times, want once; log:\n%s", serverStderr, stderr.String())
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader in different goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestCommandExitsWhenItsServerCannotRun runs `switchboard bridge` as the pod's container
// does, in front of a command the image lacks and of one that dies as it starts: the
// bridge exits with status 1, and its last log line names the command and what went wrong
// (the kubelet then reports the exit code, and the log's tail says why), after the
// server's own stderr. The command's arguments are not logged.
func TestCommandExitsWhenItsServerCannotRun(t *testing.T) {
	bin := testenv.BuildGoBinary(t, "./cmd/switchboard")
	tests := []struct {
		name    string
		command []string
		want    []string // in the last line's error
		stderr  string   // a line of the server's stderr logged before it
	}{
		{
			name:    "not in the image",
			command: []string{"no-such-mcp-server", "--token", "s3cr3t"},
			want:    []string{`mcp server command "no-such-mcp-server"`, "executable file not found"},
		},
		{
			name:    "exits at once",
			command: []string{"sh", "-c", "echo 'Error: Cannot find module dist/index.js' >&2; exit 3", "s3cr3t"},
			want:    []string{`mcp server command "sh"`, "exited", "exit status 3"},
			stderr:  "Error: Cannot find module dist/index.js",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := append([]string{"bridge", "--listen", "127.0.0.1:0", "--"}, tt.command...)
			cmd := exec.CommandContext(ctx, bin, args...)
			var stderr lockedBuffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
				t.Fatalf("bridge exited with %v, want exit status 1; log:\n%s", err, stderr.String())
			}
			log := strings.TrimSpace(stderr.String())
			if strings.Contains(log, "s3cr3t") {
				t.Errorf("the command's arguments were logged:\n%s", log)
			}
			lines := strings.Split(log, "\n")
			var last map[string]any
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
				t.Fatalf("last log line is not JSON: %q", lines[len(lines)-1])
			}
			if last["msg"] != "Cannot run the MCP server" || last["command"] != tt.command[0] {
				t.Errorf("last log line = %v, want the command that cannot run", last)
			}
			if _, ok := last["stacktrace"]; ok {
				t.Error("last log line carries a Go stack trace")
			}
			for _, w := range tt.want {
				if msg, _ := last["error"].(string); !strings.Contains(msg, w) {
					t.Errorf("last log line's error %q does not say %q", msg, w)
				}
			}
			if tt.stderr != "" && !strings.Contains(strings.Join(lines[:len(lines)-1], "\n"), tt.stderr) {
				t.Errorf("the server's stderr %q was not logged before; log:\n%s", tt.stderr, log)
			}
		})
	}
}
