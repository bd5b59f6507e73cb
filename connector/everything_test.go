package connector

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// loopbackPreload makes a Node.js server that calls listen(port) without a host bind
// to 127.0.0.1 only: server-everything reads PORT but has no host setting.
const loopbackPreload = `
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  if ((typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port))) && typeof args[1] !== "string") {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
`

// lockedBuffer collects a child's output for failure messages.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startEverything runs the npm reference server in mode on a free loopback port and
// returns its base URL. The process group is killed at cleanup.
func startEverything(t *testing.T, mode string) string {
	t.Helper()
	entry, err := testenv.ServerEverything()
	if err != nil {
		t.Fatalf("locating @modelcontextprotocol/server-everything: %v", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required to run server-everything: %v", err)
	}
	preload := filepath.Join(t.TempDir(), "loopback.cjs")
	if err := os.WriteFile(preload, []byte(loopbackPreload), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)

	var output lockedBuffer
	cmd := exec.Command(node, "--require", preload, entry, mode)
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = &output, &output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting server-everything: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(waitTimeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("server-everything %s exited early:\n%s", mode, output.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything %s did not listen on %s:\n%s", mode, addr, output.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + addr
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestServerEverything(t *testing.T) {
	for _, tc := range []struct {
		mode, path    string
		protocol      Protocol
		wantTransport Transport
	}{
		{"streamableHttp", "/mcp", ProtocolAuto, TransportStreamableHTTP},
		{"sse", "/sse", ProtocolAuto, TransportSSE},
		{"sse", "/sse", ProtocolSSE, TransportSSE},
	} {
		t.Run(fmt.Sprintf("%s %s", tc.mode, tc.protocol), func(t *testing.T) {
			base := startEverything(t, tc.mode)
			reg := prometheus.NewRegistry()
			p := testPool(t, func(o *Options) { o.Registerer = reg })
			key := Key{"ns", "everything"}
			cfg := fastConfig(base + tc.path)
			cfg.Protocol = tc.protocol
			cfg.Timeout, cfg.ConnectTimeout = 10*time.Second, 10*time.Second
			cfg.HealthCheck = HealthCheck{Interval: 100 * time.Millisecond, FailureThreshold: 2}
			p.Ensure(key, cfg)
			snap := waitReady(t, p, key)
			if snap.Transport != tc.wantTransport {
				t.Errorf("transport = %s, want %s", snap.Transport, tc.wantTransport)
			}
			if !hasTool(snap, "echo") {
				t.Errorf("tool echo missing from %v", toolNames(snap))
			}
			if len(snap.Resources) == 0 || len(snap.Prompts) == 0 {
				t.Errorf("got %d resources and %d prompts, want some of each", len(snap.Resources), len(snap.Prompts))
			}
			t.Logf("%s: %s %s, %d tools, %d resources, %d templates, %d prompts", tc.mode, snap.Transport,
				snap.ProtocolVersion, len(snap.Tools), len(snap.Resources), len(snap.ResourceTemplates), len(snap.Prompts))

			// Three probes later the session is still the same, healthy one.
			connected := snap.ConnectedAt
			after := waitFor(t, p, key, "three probes", func(Snapshot) bool { return histogramCount(t, reg) >= 3 })
			if !after.ConnectedAt.Equal(connected) || after.ConsecutiveFailures != 0 {
				t.Errorf("probes disturbed a healthy session: reconnected=%v failures=%d err=%v",
					!after.ConnectedAt.Equal(connected), after.ConsecutiveFailures, after.LastError)
			}
		})
	}
}

func hasTool(s Snapshot, name string) bool {
	for _, t := range s.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}
