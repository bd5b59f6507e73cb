//go:build e2e && linux

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// Timeouts of the steps. The whole test takes well under a minute when healthy; these
// only bound how long a broken step takes to fail.
const waitTimeout = 60 * time.Second

// kubeconfigPath is the admin kubeconfig every kubectl call uses.
var kubeconfigPath string

// kubectl runs kubectl against the test control plane and returns its stdout; it fails
// the test when kubectl fails.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectlErr(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// kubectlErr runs kubectl and returns its stdout, or an error carrying its stderr.
func kubectlErr(args ...string) (string, error) {
	return kubectlStdin(nil, args...)
}

// kubectlApply applies a YAML document with `kubectl apply -f -`.
func kubectlApply(t *testing.T, manifest string) string {
	t.Helper()
	out, err := kubectlStdin(strings.NewReader(manifest), "apply", "-f", "-")
	if err != nil {
		t.Fatalf("kubectl apply:\n%s\n%v", manifest, err)
	}
	return out
}

func kubectlStdin(stdin *strings.Reader, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfigPath}, args...)...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// buildSwitchboard builds the binary as `make build` and the release do.
func buildSwitchboard(t *testing.T) string {
	t.Helper()
	return testenv.BuildGoBinary(t, "./cmd/switchboard")
}

// startControlPlane starts etcd and kube-apiserver (no CRDs: the test applies them with
// kubectl) and writes a kubeconfig for an administrator into dir.
func startControlPlane(t *testing.T, dir string) string {
	t.Helper()
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	if _, err := env.Start(); err != nil {
		_ = env.Stop()
		t.Fatalf("starting the control plane from %s: %v", assets, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stopping the control plane: %v", err)
		}
	})
	admin, err := env.AddUser(envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// authProxy fronts backend on a loopback port and refuses every request whose
// Authorization header is not want, so that a server becomes Ready only when the
// operator really sends the header it resolved from a Secret. It remembers every other
// Authorization value it was sent, so a test can tell whose credentials reached it.
type authProxy struct {
	URL        string
	authorized atomic.Int64
	refused    atomic.Int64

	mu      sync.Mutex
	foreign []string // Authorization values of refused requests, "" for none
}

// foreignAuthorizations returns the Authorization values, other than the expected one,
// that requests carried.
func (p *authProxy) foreignAuthorizations() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.foreign)
}

func startAuthProxy(t *testing.T, backend, want string) *authProxy {
	t.Helper()
	target, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	p := &authProxy{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // stream server-sent events as they come
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if got := r.Header.Get("Authorization"); got != want {
				p.refused.Add(1)
				p.mu.Lock()
				p.foreign = append(p.foreign, got)
				p.mu.Unlock()
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			p.authorized.Add(1)
			proxy.ServeHTTP(w, r)
		}),
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	p.URL = "http://" + l.Addr().String()
	return p
}

// managerProcess is one run of `switchboard manager`.
type managerProcess struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error // the result of Wait, once exited is closed
}

// startManager runs `switchboard manager` with args, its output in logPath, and waits
// until its /readyz answers at probeAddr.
func startManager(t *testing.T, bin, logPath, probeAddr string, args []string) *managerProcess {
	t.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"manager"}, args...)...) //nolint:noctx // stopped by signals the test sends
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The manager must not outlive the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the manager: %v", err)
	}
	m := &managerProcess{cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		m.err = cmd.Wait()
		_ = logFile.Close()
		close(m.exited)
	}()
	t.Cleanup(func() {
		if !m.hasExited() {
			_ = cmd.Process.Kill()
			<-m.exited
		}
	})
	testutil.Eventually(t, waitTimeout, "the manager's /readyz", func() error {
		if m.hasExited() {
			t.Fatalf("the manager exited at start (%v); log:\n%s", m.err, m.logTail(80))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+probeAddr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})
	return m
}

func (m *managerProcess) hasExited() bool {
	select {
	case <-m.exited:
		return true
	default:
		return false
	}
}

// logTail returns the last n lines of the manager's output.
func (m *managerProcess) logTail(n int) string {
	data, _ := os.ReadFile(m.logPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// kill sends SIGKILL, the way a node failure or an OOM kill ends the manager.
func (m *managerProcess) kill(t *testing.T) {
	t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-m.exited
}

// terminate sends SIGTERM and returns the exit code.
func (m *managerProcess) terminate(t *testing.T) int {
	t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the manager did not stop within 30s of SIGTERM; log:\n%s", m.logTail(40))
	}
	var exit *exec.ExitError
	if errors.As(m.err, &exit) {
		return exit.ExitCode()
	}
	if m.err != nil {
		t.Fatal(m.err)
	}
	return 0
}

// process is a running process found in /proc.
type process struct {
	pid  int
	args []string
}

func (p process) String() string { return fmt.Sprintf("%d %s", p.pid, strings.Join(p.args, " ")) }

// markedProcesses returns the running (not zombie) processes whose environment holds
// marker, such as "E2E_RUN=<id>": the stdio server's bridge and the servers it started.
func markedProcesses(t *testing.T, marker string) []process {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		environ, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil || !slices.Contains(strings.Split(string(environ), "\x00"), marker) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			continue // gone, or a zombie
		}
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue
		}
		found = append(found, process{pid: pid, args: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")})
	}
	return found
}

// splitProcesses sorts the stdio server's processes into bridges and everything else.
func splitProcesses(procs []process) (bridges, servers []process) {
	for _, p := range procs {
		if len(p.args) > 1 && p.args[1] == "bridge" {
			bridges = append(bridges, p)
		} else {
			servers = append(servers, p)
		}
	}
	return bridges, servers
}

// alive reports whether pid still runs (and is not a zombie).
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	return err == nil && !strings.Contains(string(stat), ") Z ")
}
