package testenv

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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

// StartServerEverything runs the npm reference server in mode ("streamableHttp" or
// "sse") on a free loopback port and returns its base URL. The process group is killed
// when the test ends (or, on Linux, when the test process dies).
func StartServerEverything(t testing.TB, mode string) string {
	t.Helper()
	entry, err := ServerEverything()
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
	port := FreePort(t)

	output := &LockedBuffer{}
	cmd := exec.Command(node, "--require", preload, entry, mode) //nolint:noctx // killed at cleanup
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = output, output
	cmd.SysProcAttr = processGroupDyingWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting server-everything %s: %v", mode, err)
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
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", addr)
		if err == nil {
			_ = conn.Close()
			return "http://" + addr
		}
		select {
		case <-exited:
			t.Fatalf("server-everything %s exited early:\n%s", mode, output)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything %s did not listen on %s:\n%s", mode, addr, output)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FreePort returns a TCP port nothing listens on at 127.0.0.1, for a process to listen
// on. It comes from below the kernel's ephemeral range, where the local ports of
// outgoing connections come from: a port the kernel hands out as free (listening on
// port 0) is in that range, and any process's next connection may take it before the
// process that was meant to listen there does ("address already in use", seen with
// builds fetching modules beside the tests).
func FreePort(t testing.TB) int {
	t.Helper()
	lowest, below := 10000, ephemeralPortsFrom()
	for range 200 {
		port := lowest + rand.IntN(below-lowest) //nolint:gosec // a port to listen on, no secret
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // taken
		}
		_ = l.Close()
		return port
	}
	t.Fatalf("no free port between %d and %d after 200 tries", lowest, below)
	return 0
}

// ephemeralPortsFrom returns the first port of the kernel's ephemeral range, 32768 where
// the kernel does not say (the default of Linux; macOS starts at 49152).
func ephemeralPortsFrom() int {
	const fallback = 32768
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	fields := strings.Fields(string(raw))
	if len(fields) == 0 {
		return fallback
	}
	first, err := strconv.Atoi(fields[0])
	if err != nil || first < 12000 {
		return fallback
	}
	return first
}

// LockedBuffer collects a child process's output for failure messages; the process
// writes while the test reads.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
