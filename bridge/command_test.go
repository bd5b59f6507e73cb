package bridge_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
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
	bin := filepath.Join(t.TempDir(), "switchboard")
	build := exec.CommandContext(context.Background(), "go", "build", "-o", bin, "./cmd/switchboard")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building switchboard: %v\n%s", err, out)
	}

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
