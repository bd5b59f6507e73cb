package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// goBinaries holds one build per package for the life of the test process: linking takes
// seconds, and several tests run the same server.
var goBinaries sync.Map // package path -> *goBinary

type goBinary struct {
	once sync.Once
	path string
	err  error
}

// BuildGoBinary builds the Go main package pkg (an import path, resolved with this
// module's go.mod, or a path relative to the repository root such as "./cmd/switchboard")
// once per test process and returns the binary's path.
func BuildGoBinary(t testing.TB, pkg string) string {
	t.Helper()
	entry, _ := goBinaries.LoadOrStore(pkg, &goBinary{})
	bin := entry.(*goBinary)
	bin.once.Do(func() {
		// Not t.TempDir: the binary outlives the test that built it.
		dir, err := os.MkdirTemp("", "switchboard-testbin-")
		if err != nil {
			bin.err = err
			return
		}
		out := filepath.Join(dir, path.Base(pkg))
		cmd := exec.CommandContext(context.Background(), "go", "build", "-o", out, pkg)
		cmd.Dir = RepoRoot()
		if output, err := cmd.CombinedOutput(); err != nil {
			bin.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, output)
			return
		}
		bin.path = out
	})
	if bin.err != nil {
		t.Fatal(bin.err)
	}
	return bin.path
}

// process is a child started by this package for one test: its own process group,
// killed at the test's end or with the test process.
type process struct {
	what   string
	output *LockedBuffer
	exited chan struct{}
}

// startProcess starts cmd, collecting its output, and kills its process group when the
// test ends. what names it in failure messages.
func startProcess(t testing.TB, what string, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{what: what, output: &LockedBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.output, p.output
	cmd.SysProcAttr = processGroupDyingWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", what, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	})
	return p
}

// StartHTTPServerProcess starts cmd, a server process of the test's own, and returns once
// url answers HTTP; its process group is killed when the test ends. what names it in
// failure messages, which carry its output.
func StartHTTPServerProcess(t testing.TB, what string, cmd *exec.Cmd, url string) {
	t.Helper()
	startProcess(t, what, cmd).waitForHTTP(t, url)
}

// waitForHTTP waits until url answers an HTTP request with any status: the server is
// listening and speaking HTTP.
func (p *process) waitForHTTP(t testing.TB, url string) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited early:\n%s", p.what, p.output)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer at %s:\n%s", p.what, url, p.output)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
