package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/mod/modfile"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// modulePath is the module RepoRoot looks for.
const modulePath = "github.com/switchboard-mcp/switchboard"

// RepoRoot returns the root of the source tree the tests run in.
func RepoRoot() string { return repoRoot() }

// repoRoot finds the root from the working folder, which `go test` sets to the package's
// source folder: the test binaries built without build paths (make test-e2e, test-node)
// record this file as a module path, not a file. The file's path is the fallback for a
// binary run elsewhere.
var repoRoot = sync.OnceValue(func() string {
	if dir, err := os.Getwd(); err == nil {
		for ; ; dir = filepath.Dir(dir) {
			data, err := os.ReadFile(filepath.Join(dir, "go.mod")) //nolint:gosec // the go.mod files above the working folder, read to find the module
			if err == nil && modfile.ModulePath(data) == modulePath {
				return dir
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		return filepath.Join(filepath.Dir(file), "..", "..")
	}
	panic("testenv: cannot find the source tree of " + modulePath + ": run the tests inside it")
})

// AssetsDir returns the folder holding kube-apiserver and etcd: KUBEBUILDER_ASSETS when
// set, otherwise the folder hack/envtest-assets.sh prints (building the binaries there on
// first use, which takes minutes).
func AssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	return runHackScript("envtest-assets.sh")
}

// runHackScript runs a script from hack/ with args that prints one path on stdout and
// reports progress on stderr, and returns the path.
func runHackScript(name string, args ...string) (string, error) {
	script := filepath.Join(RepoRoot(), "hack", name)
	var stdout bytes.Buffer
	cmd := exec.CommandContext(context.Background(), "bash", append([]string{script}, args...)...)
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("running %s: %w", script, err)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// Scheme returns a scheme with the built-in kinds, the CRD kinds and Switchboard's kinds.
func Scheme() *k8sruntime.Scheme {
	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme,
		mcpv1alpha1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(fmt.Sprintf("testenv: building scheme: %v", err))
		}
	}
	return scheme
}

// Environment is a running test control plane.
type Environment struct {
	*envtest.Environment

	// Config connects to the API server as an administrator.
	Config *rest.Config
}

// Start starts kube-apiserver and etcd and installs the CRDs. Call Stop when done.
func Start() (*Environment, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
	}
	cfg, err := env.Start()
	if err != nil {
		// Start may fail after launching etcd and kube-apiserver (a CRD the API server
		// rejects, say); stop them rather than leave them running.
		_ = env.Stop()
		return nil, fmt.Errorf("starting envtest with assets from %s: %w", assets, err)
	}
	return &Environment{Environment: env, Config: cfg}, nil
}

// StartForTest starts a control plane for one test, stops it when the test ends, and
// returns it with a client that acts as its administrator.
func StartForTest(tb testing.TB) (*Environment, client.Client) {
	tb.Helper()
	env, err := Start()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = env.Stop() })
	admin, err := client.New(env.Config, client.Options{Scheme: Scheme()})
	if err != nil {
		tb.Fatal(err)
	}
	return env, admin
}

// ServerEverything returns the path of the entry point of the npm package
// @modelcontextprotocol/server-everything, the MCP reference server, to be run with node:
// SWITCHBOARD_SERVER_EVERYTHING when set (the Makefile sets it), otherwise what
// hack/test-servers.sh prints (installing the package on first use).
func ServerEverything() (string, error) {
	if path := os.Getenv("SWITCHBOARD_SERVER_EVERYTHING"); path != "" {
		return path, nil
	}
	return runHackScript("test-servers.sh")
}

// ServerFilesystem returns the path of the entry point of the npm package
// @modelcontextprotocol/server-filesystem, the MCP reference filesystem server, to be run
// with node and the folders it may serve as arguments: SWITCHBOARD_SERVER_FILESYSTEM when
// set, otherwise what hack/test-servers.sh --filesystem prints (installing the package on
// first use).
func ServerFilesystem() (string, error) {
	if path := os.Getenv("SWITCHBOARD_SERVER_FILESYSTEM"); path != "" {
		return path, nil
	}
	return runHackScript("test-servers.sh", "--filesystem")
}

// Supergateway returns the path of the entry point of the npm package supergateway, a
// stdio to HTTP bridge the bridge benchmark compares against, to be run with node:
// SWITCHBOARD_SUPERGATEWAY when set (the Makefile sets it), otherwise what
// hack/test-servers.sh --supergateway prints (installing the package on first use).
func Supergateway() (string, error) {
	if path := os.Getenv("SWITCHBOARD_SUPERGATEWAY"); path != "" {
		return path, nil
	}
	return runHackScript("test-servers.sh", "--supergateway")
}

// Main is a TestMain body: it starts the control plane, runs the package's tests with
// a client for it, stops it, and returns the exit code for os.Exit.
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env, &k8sClient)) }
func Main(m *testing.M, env **Environment, c *client.Client) int {
	started, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := started.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	*env = started
	if *c, err = client.New(started.Config, client.Options{Scheme: Scheme()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// StartControllerManager runs kube-controller-manager (built next to kube-apiserver by
// hack/envtest-assets.sh) against the environment with only the named controllers, such
// as "garbagecollector", which envtest alone does not run. It stops at the test's end.
func (e *Environment) StartControllerManager(t testing.TB, controllers ...string) {
	t.Helper()
	user, err := e.ControlPlane.AddUser(envtest.User{Name: "kube-controller-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(e.BinaryAssetsDirectory, "kube-controller-manager"),
		"--kubeconfig="+path,
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--v=1",
	)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting kube-controller-manager: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("kube-controller-manager output:\n%s", logs.String())
		}
	})
}
