package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
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

// Commands go.mod pins as tools, which tests run as binaries built by GoBinary: `go tool`
// would build them plain, compiling their Kubernetes libraries once more.
const (
	HelmCommand      = "helm.sh/helm/v3/cmd/helm"
	KustomizeCommand = "sigs.k8s.io/kustomize/kustomize/v5"
)

// BuildGoBinary builds the Go main package pkg with GoBinary and returns the binary's path;
// a failed build fails the test.
func BuildGoBinary(t testing.TB, pkg string) string {
	t.Helper()
	bin, err := GoBinary(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// GoBinary builds the Go main package pkg (an import path, resolved with this module's
// go.mod, or a path relative to the repository root such as "./cmd/switchboard") once per
// test process and returns the binary's path. It builds as the release and the node's
// image do, static, without build paths or debug information: the binary tested is the
// one shipped, and every package compiled for one is in the build cache for the others (a
// plain build would compile the whole dependency graph once more, minutes on a new
// machine).
func GoBinary(pkg string) (string, error) {
	entry, _ := goBinaries.LoadOrStore(pkg, &goBinary{})
	bin := entry.(*goBinary)
	bin.once.Do(func() {
		// Not t.TempDir: the binary outlives the test that built it.
		dir, err := binDir()
		if err != nil {
			bin.err = err
			return
		}
		// A directory per package: two packages may share their last element.
		pkgDir := filepath.Join(dir, strings.ReplaceAll(strings.TrimPrefix(pkg, "./"), "/", "_"))
		if err := os.MkdirAll(pkgDir, 0o750); err != nil {
			bin.err = err
			return
		}
		out := filepath.Join(pkgDir, commandName(pkg))
		cmd := exec.CommandContext(context.Background(), "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
		cmd.Dir = RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if output, err := cmd.CombinedOutput(); err != nil {
			bin.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, output)
			return
		}
		bin.path = out
	})
	return bin.path, bin.err
}

// commandName is the name `go install` gives pkg's binary: its last element, or the one
// before a major version suffix (sigs.k8s.io/kustomize/kustomize/v5 is kustomize).
func commandName(pkg string) string {
	dir, name := path.Split(strings.TrimSuffix(pkg, "/"))
	if len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" && dir != "" {
		return path.Base(dir)
	}
	return name
}

// binDirPrefix names the directories of built binaries, one per test process, by its pid.
const binDirPrefix = "switchboard-testbin-"

var (
	binDirOnce sync.Once
	binDirPath string
	errBinDir  error
)

// binDir returns this test process's directory of built binaries. A test binary has no
// hook that runs as it exits, so the directory is named by the process's pid and the next
// test process removes the directories of processes that are gone: a binary is over a
// hundred megabytes, and every test run used to leave its own behind.
func binDir() (string, error) {
	binDirOnce.Do(func() {
		removeOrphanedBinDirs()
		binDirPath = filepath.Join(os.TempDir(), fmt.Sprintf("%s%d", binDirPrefix, os.Getpid()))
		errBinDir = os.MkdirAll(binDirPath, 0o750)
	})
	return binDirPath, errBinDir
}

// removeOrphanedBinDirs removes the binary directories of test processes that no longer
// run (and those of the old, randomly named kind, whose number is no running pid).
func removeOrphanedBinDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, dir := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), binDirPrefix))
		if err != nil || pid == os.Getpid() {
			continue
		}
		// Signal 0 checks that the process exists; EPERM means it does, as another user's.
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
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
