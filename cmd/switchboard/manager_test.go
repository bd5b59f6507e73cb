package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// freeAddr returns a loopback address with a port nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeKubeconfig writes a kubeconfig for the test control plane's admin user.
func writeKubeconfig(t *testing.T, env *testenv.Environment) string {
	t.Helper()
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestManagerServesProbesLogsJSONAndShutsDownOnSIGTERM runs the real binary against a real
// API server the way a Deployment would.
func TestManagerServesProbesLogsJSONAndShutsDownOnSIGTERM(t *testing.T) {
	g := gomega.NewWithT(t)
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig := writeKubeconfig(t, env)

	bin := filepath.Join(t.TempDir(), "switchboard")
	build := exec.CommandContext(context.Background(), "go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building switchboard: %v\n%s", err, out)
	}

	probeAddr, catalogAddr := freeAddr(t), freeAddr(t)
	cmd := exec.CommandContext(context.Background(), bin, "manager",
		"--kubeconfig", kubeconfig,
		"--catalog-bind-address", catalogAddr,
		"--metrics-bind-address", freeAddr(t),
		"--health-probe-bind-address", probeAddr,
		"--leader-elect", "--leader-election-namespace", "default",
	)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	logs := &logLines{done: make(chan struct{})}
	go logs.read(stderr)

	g.Eventually(func() (int, error) {
		resp, err := http.Get(fmt.Sprintf("http://%s/readyz", probeAddr)) //nolint:noctx // test poll
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}, 30*time.Second, 200*time.Millisecond).Should(gomega.Equal(http.StatusOK), "manager never became ready")

	// The catalogue is served and asks for a token.
	g.Eventually(func() (int, error) {
		resp, err := http.Get(fmt.Sprintf("http://%s/api/v1/servers", catalogAddr)) //nolint:noctx // test poll
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}, 30*time.Second, 100*time.Millisecond).Should(gomega.Equal(http.StatusUnauthorized), "catalogue without a token")

	// The manager holds the leader Lease once elected.
	g.Eventually(func() string { return strings.Join(logs.snapshot(), "\n") }, 30*time.Second).
		Should(gomega.ContainSubstring("Successfully acquired lease"))

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("manager exited with %v after SIGTERM, want a clean exit", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("manager did not exit within 30s of SIGTERM")
	}

	// Every log line is one JSON object with a level and a message.
	<-logs.done
	all := logs.snapshot()
	if len(all) == 0 {
		t.Fatal("manager logged nothing")
	}
	for _, line := range all {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Errorf("log line is not JSON: %s", line)
			continue
		}
		if entry["level"] == nil || entry["msg"] == nil {
			t.Errorf("log line lacks level or msg: %s", line)
		}
	}
	if !strings.Contains(strings.Join(all, "\n"), "Manager stopped") {
		t.Errorf("manager did not log a clean stop:\n%s", strings.Join(all, "\n"))
	}
}

// logLines collects a process's log output line by line.
type logLines struct {
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

func (l *logLines) read(r io.Reader) {
	defer close(l.done)
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	for scanner.Scan() {
		l.mu.Lock()
		l.lines = append(l.lines, scanner.Text())
		l.mu.Unlock()
	}
}

func (l *logLines) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}
