package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
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

// buildSwitchboard builds this binary under the name switchboard, which the stdio
// samples run as their bridge.
func buildSwitchboard(t *testing.T) string {
	t.Helper()
	return testenv.BuildGoBinary(t, "./cmd/switchboard")
}

// TestManagerServesProbesLogsJSONAndShutsDownOnSIGTERM runs the real binary against a real
// API server the way a Deployment would.
func TestManagerServesProbesLogsJSONAndShutsDownOnSIGTERM(t *testing.T) {
	env, _ := testenv.StartForTest(t)
	kubeconfig := writeKubeconfig(t, env)

	bin := buildSwitchboard(t)

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

	testutil.Eventually(t, 30*time.Second, "the manager to be ready", func() error {
		return answers(fmt.Sprintf("http://%s/readyz", probeAddr), http.StatusOK)
	})

	// The catalogue is served and asks for a token.
	testutil.Eventually(t, 30*time.Second, "the catalogue to refuse a request without a token", func() error {
		return answers(fmt.Sprintf("http://%s/api/v1/servers", catalogAddr), http.StatusUnauthorized)
	})

	// The manager holds the leader Lease once elected.
	testutil.Eventually(t, 30*time.Second, "the manager to hold the leader Lease", func() error {
		if log := strings.Join(logs.snapshot(), "\n"); !strings.Contains(log, "Successfully acquired lease") {
			return fmt.Errorf("no \"Successfully acquired lease\" in the log:\n%s", log)
		}
		return nil
	})

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		// Wait closes the stderr pipe once the process is gone, dropping what is still
		// unread in it: read to its end first, as exec.Cmd asks.
		<-logs.done
		exited <- cmd.Wait()
	}()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("manager exited with %v after SIGTERM, want a clean exit", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("manager did not exit within 30s of SIGTERM")
	}

	// Every log line is one JSON object with a level and a message.
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

// TestManagerServesMetricsOnlyToAuthorizedScrapers runs the real binary with its default
// metrics flags: metrics are served over HTTPS, a scrape without a token is refused with
// 401, one whose ServiceAccount may not get /metrics with 403, and a ServiceAccount bound
// to a metrics-reader role gets the metrics.
func TestManagerServesMetricsOnlyToAuthorizedScrapers(t *testing.T) {
	env, _ := testenv.StartForTest(t)
	kubeconfig := writeKubeconfig(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// prometheus may get /metrics, as config/rbac/metrics_reader_role.yaml grants; nobody
	// is a ServiceAccount without rights.
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	reader := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	if _, err := clientset.RbacV1().ClusterRoles().Create(ctx, reader, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: "default"}},
	}
	if _, err := clientset.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		t.Helper()
		if _, err := clientset.CoreV1().ServiceAccounts("default").Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := clientset.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	prometheusToken, nobodyToken := token("prometheus"), token("nobody")

	bin := buildSwitchboard(t)
	probeAddr, metricsAddr := freeAddr(t), freeAddr(t)
	cmd := exec.CommandContext(context.Background(), bin, "manager",
		"--kubeconfig", kubeconfig,
		"--catalog-bind-address", "0",
		"--metrics-bind-address", metricsAddr,
		"--health-probe-bind-address", probeAddr,
	)
	logs := &logLines{done: make(chan struct{})}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go logs.read(stderr)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("manager log:\n%s", strings.Join(logs.snapshot(), "\n"))
		}
	})

	// The certificate is self-signed; what is checked here is who gets the metrics.
	scraper := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed test certificate
	scrape := func(url, token string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := scraper.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	metricsURL := "https://" + metricsAddr + "/metrics"
	testutil.Eventually(t, 30*time.Second, "a scrape without a token to be refused", func() error {
		code, _, err := scrape(metricsURL, "")
		if err != nil {
			return err
		}
		if code != http.StatusUnauthorized {
			return fmt.Errorf("status %d, want %d", code, http.StatusUnauthorized)
		}
		return nil
	})

	for _, tt := range []struct {
		name, url, token string
		want             []int // any of these; none means the request fails
	}{
		{name: "ServiceAccount without rights", url: metricsURL, token: nobodyToken, want: []int{http.StatusForbidden}},
		{name: "metrics reader", url: metricsURL, token: prometheusToken, want: []int{http.StatusOK}},
		// controller-runtime's filter answers a token the TokenReview rejects with 500.
		{name: "forged token", url: metricsURL, token: "not-a-token", want: []int{http.StatusUnauthorized, http.StatusInternalServerError}},
		// The TLS server answers plain HTTP with 400 and closes, which may reset the read.
		{name: "plain HTTP", url: "http://" + metricsAddr + "/metrics", token: prometheusToken, want: []int{http.StatusBadRequest}},
	} {
		code, body, err := scrape(tt.url, tt.token)
		if err != nil && tt.name != "plain HTTP" {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if err == nil && !slices.Contains(tt.want, code) {
			t.Errorf("%s: GET %s answered %d, want %v:\n%.500s", tt.name, tt.url, code, tt.want, body)
		}
		served := code == http.StatusOK
		if hasMetrics := strings.Contains(body, "rest_client_requests_total"); hasMetrics != served || served != slices.Contains(tt.want, http.StatusOK) {
			t.Errorf("%s: answered %d, metrics in the body: %v", tt.name, code, hasMetrics)
		}
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

// The manager's Go memory limit is 90% of its container's, unless GOMEMLIMIT says
// otherwise or no limit is given.
func TestMemoryLimitFromContainer(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want int64
		ok   bool
	}{
		{env: map[string]string{containerMemoryLimitEnv: "536870912"}, want: 483183819, ok: true},
		{env: map[string]string{containerMemoryLimitEnv: "536870912", "GOMEMLIMIT": "400MiB"}},
		{env: map[string]string{containerMemoryLimitEnv: "0"}},
		{env: map[string]string{containerMemoryLimitEnv: "512Mi"}},
		{env: map[string]string{}},
	} {
		got, ok := memoryLimitFromContainer(func(k string) string { return tc.env[k] })
		if got != tc.want || ok != tc.ok {
			t.Errorf("%v: got %d %v, want %d %v", tc.env, got, ok, tc.want, tc.ok)
		}
	}
}

// answers is nil when a GET of url answers status, and otherwise says what it answered.
func answers(url string, status int) error {
	resp, err := http.Get(url) //nolint:noctx // test poll
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != status {
		return fmt.Errorf("GET %s answered %s, want %d", url, resp.Status, status)
	}
	return nil
}
