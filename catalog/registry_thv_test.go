package catalog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// fakeDockerSocket serves the Docker Engine API's /_ping on a unix socket in home: thv
// refuses to start without a container engine, though its registry commands never use
// one (and its kubernetes runtime keeps its configuration in the cluster, not in HOME).
func fakeDockerSocket(t *testing.T, home string) string {
	t.Helper()
	path := filepath.Join(home, "docker.sock")
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/_ping") {
			http.Error(w, `{"message":"no container engine here"}`, http.StatusNotImplemented)
			return
		}
		w.Header().Set("Api-Version", "1.45")
		w.Header().Set("Ostype", "linux")
		_, _ = w.Write([]byte("OK"))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return path
}

// runThv runs ToolHive's thv with a HOME of its own and returns its standard output.
func runThv(t *testing.T, bin, home, socket string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(),
		"TOOLHIVE_SKIP_UPDATE_CHECK=true",
		"TOOLHIVE_DOCKER_SOCKET="+socket,
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_DATA_HOME="+filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME="+filepath.Join(home, ".local", "state"),
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("thv %s: %v\n%s\n%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}

// TestThvListsWhatTheCallerMayUse points ToolHive's thv, a registry client nobody here
// wrote, at the catalogue as its MCP registry, for each of two callers. thv's own
// registry authentication is an interactive OAuth login, so a loopback proxy attaches the
// caller's ServiceAccount token to each of its requests; the catalogue decides as for
// any caller.
func TestThvListsWhatTheCallerMayUse(t *testing.T) {
	bin, err := testenv.Thv()
	if err != nil {
		t.Skipf("ToolHive's thv is not available (%v): build it with hack/test-servers.sh --thv (several minutes the first time) or set SWITCHBOARD_THV to a thv binary", err)
	}
	f := newRegistryFixture(t)
	target, err := url.Parse(f.c.base)
	if err != nil {
		t.Fatal(err)
	}
	for _, caller := range []struct {
		name  string
		token string
		want  []string
	}{{"A", f.tokenA, f.wantA}, {"B", f.tokenB, f.wantB}} {
		t.Run(caller.name, func(t *testing.T) {
			// Counted on the proxy's goroutines, read on the test's: thv is another process,
			// so nothing orders the two for the race detector.
			var requests atomic.Int64
			proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
				r.SetURL(target)
				r.Out.Header.Set("Authorization", "Bearer "+caller.token)
				requests.Add(1)
			}}
			srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 5 * time.Second}
			ln := listenLoopback(t)
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })
			base := "http://" + ln.Addr().String()

			home, err := os.MkdirTemp("", "thv")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(home) })
			socket := fakeDockerSocket(t, home)
			runThv(t, bin, home, socket, "config", "set-registry", base, "--allow-private-ip")
			if got := runThv(t, bin, home, socket, "config", "get-registry"); !bytes.Contains(got, []byte(base+" (API endpoint)")) {
				t.Fatalf("thv did not take the catalogue as its registry API: %s", got)
			}
			var listed []struct {
				Name string `json:"name"`
			}
			out := runThv(t, bin, home, socket, "registry", "list", "--format", "json", "--refresh")
			if err := json.Unmarshal(out, &listed); err != nil {
				t.Fatalf("thv registry list --format json printed %s: %v", out, err)
			}
			var names []string
			for _, s := range listed {
				names = append(names, s.Name)
			}
			slices.Sort(names)
			t.Logf("thv registry list as caller %s: %q (%d requests)", caller.name, names, requests.Load())
			if !slices.Equal(names, caller.want) {
				t.Errorf("thv listed %q for caller %s, want %q", names, caller.name, caller.want)
			}
			// thv reads one entry it may see, and finds none it may not.
			info := runThv(t, bin, home, socket, "registry", "info", caller.want[0], "--format", "json")
			if !bytes.Contains(info, []byte(caller.want[0])) || !bytes.Contains(info, []byte(registryPublicURL)) {
				t.Errorf("thv registry info %s printed %s", caller.want[0], info)
			}
		})
	}
}

// listenLoopback listens on a free loopback port until the test ends.
func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}
