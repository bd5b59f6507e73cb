//go:build linux

package devcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// widgetCRD is a CRD of the test's own, in the file layout of config/crd/bases: a
// document separator first and a second, empty document.
const widgetCRD = `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
---
`

// TestControlPlaneServesItsCRDsThroughTheKubeconfigAndStopLeavesNothing starts a control
// plane with a CRD folder, uses it through the kubeconfig it writes as `kubectl` would,
// then stops it and looks for anything left behind.
func TestControlPlaneServesItsCRDsThroughTheKubeconfigAndStopLeavesNothing(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	crdDir, stateDir := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(crdDir, "example.com_widgets.yaml"), widgetCRD)
	writeFile(t, filepath.Join(crdDir, "README.md"), "not a manifest")
	dir := filepath.Join(stateDir, "control-plane")
	// What a run killed outright left behind: Start starts afresh.
	writeFile(t, filepath.Join(dir, "etcd", "member", "leftover"), "x")

	ctx := t.Context()
	cp, err := Start(ctx, Options{
		EtcdPath:      filepath.Join(assets, "etcd"),
		APIServerPath: filepath.Join(assets, "kube-apiserver"),
		Dir:           dir,
		LogDir:        stateDir,
		CRDDirs:       []string{crdDir},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	if _, err := os.Stat(filepath.Join(dir, "etcd", "member", "leftover")); !os.IsNotExist(err) {
		t.Errorf("Start kept a file of an earlier run in its folder (%v)", err)
	}
	running := children(t)
	if !hasCommand(running, "etcd") || !hasCommand(running, "kube-apiserver") {
		t.Fatalf("the control plane runs %v, want etcd and kube-apiserver", running)
	}

	kubeconfig := filepath.Join(stateDir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, User{Name: "dev-admin", Groups: []string{"system:masters"}}); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(kubeconfig); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig: %v, mode %v, want 0600", err, info.Mode().Perm())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	// The API server authenticates the kubeconfig's client certificate as its user.
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		t.Fatal(err)
	}
	if user := review.Status.UserInfo; user.Username != "dev-admin" || !slices.Contains(user.Groups, "system:masters") {
		t.Errorf("the kubeconfig authenticates as %s in %v, want dev-admin in system:masters", user.Username, user.Groups)
	}

	// The CRD is installed, Established, applied by dev, and its resource served.
	var crd apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, client.ObjectKey{Name: "widgets.example.com"}, &crd); err != nil {
		t.Fatal(err)
	}
	if !established(&crd) {
		t.Errorf("widgets.example.com is not Established: %+v", crd.Status.Conditions)
	}
	if managers := managedBy(&crd); !slices.Contains(managers, fieldOwner) {
		t.Errorf("widgets.example.com is managed by %v, want %s (server-side apply)", managers, fieldOwner)
	}
	widget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "default"},
		"spec":     map[string]any{"size": int64(3)},
	}}
	if err := c.Create(ctx, widget); err != nil {
		t.Fatal(err)
	}
	got := &unstructured.Unstructured{}
	got.SetAPIVersion("example.com/v1")
	got.SetKind("Widget")
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "w"}, got); err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 3 {
		t.Errorf("read back a widget of size %d, want 3", size)
	}

	// Stop ends both processes and removes the data, keeping the logs.
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	if left := children(t); len(left) > 0 {
		t.Errorf("processes outlived Stop: %v", left)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Stop left %s (%v)", dir, err)
	}
	for _, log := range []string{"etcd.log", "kube-apiserver.log"} {
		if info, err := os.Stat(filepath.Join(stateDir, log)); err != nil || info.Size() == 0 {
			t.Errorf("%s: %v, want the process's log", log, err)
		}
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "widgets.example.com"}, &crd); err == nil {
		t.Error("the API server still answers after Stop")
	}
}

// TestStartStopsEtcdWhenTheAPIServerFails gives Start an API server that exits at once:
// Start reports its output and leaves no etcd running, nor its folder.
func TestStartStopsEtcdWhenTheAPIServerFails(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	crdDir, stateDir := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(crdDir, "widgets.yaml"), widgetCRD)
	broken := filepath.Join(stateDir, "kube-apiserver")
	writeFile(t, broken, "#!/bin/sh\necho 'Error: unknown flag: --secure-port' >&2\nexit 1\n")
	if err := os.Chmod(broken, 0o700); err != nil { //nolint:gosec // a script the test runs
		t.Fatal(err)
	}
	dir := filepath.Join(stateDir, "control-plane")

	_, err = Start(t.Context(), Options{
		EtcdPath:      filepath.Join(assets, "etcd"),
		APIServerPath: broken,
		Dir:           dir,
		CRDDirs:       []string{crdDir},
	})
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver exited") || !strings.Contains(err.Error(), "unknown flag: --secure-port") {
		t.Fatalf("Start returned %v, want the API server's exit and output", err)
	}
	if left := children(t); len(left) > 0 {
		t.Errorf("processes outlived the failed Start: %v", left)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the failed Start left %s (%v)", dir, err)
	}
}

// TestStartPicksNewPortsWhenEtcdFindsOneTaken gives Start an etcd that, the first time,
// exits as etcd does when another program took its port after Start chose it: Start tries
// again on other ports, and the second etcd comes up (the API server then fails, which
// ends the test early).
func TestStartPicksNewPortsWhenEtcdFindsOneTaken(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	crdDir, stateDir := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(crdDir, "widgets.yaml"), widgetCRD)
	attempts := filepath.Join(stateDir, "attempts")
	etcd := filepath.Join(stateDir, "etcd")
	writeFile(t, etcd, fmt.Sprintf(`#!/bin/sh
echo x >> '%s'
if [ $(wc -l < '%[1]s') -eq 1 ]; then
  echo '{"msg":"creating peer listener failed","error":"listen tcp 127.0.0.1:2380: bind: address already in use"}' >&2
  exit 1
fi
exec '%s' "$@"
`, attempts, filepath.Join(assets, "etcd")))
	broken := filepath.Join(stateDir, "kube-apiserver")
	writeFile(t, broken, "#!/bin/sh\nexit 1\n")
	for _, script := range []string{etcd, broken} {
		if err := os.Chmod(script, 0o700); err != nil { //nolint:gosec // a script the test runs
			t.Fatal(err)
		}
	}

	_, err = Start(t.Context(), Options{EtcdPath: etcd, APIServerPath: broken, Dir: filepath.Join(stateDir, "control-plane"), CRDDirs: []string{crdDir}})
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver exited") {
		t.Fatalf("Start returned %v, want the API server's failure after etcd came up", err)
	}
	if n := strings.Count(readFile(t, attempts), "x"); n != 2 {
		t.Errorf("etcd was started %d times, want 2", n)
	}
	if left := children(t); len(left) > 0 {
		t.Errorf("processes outlived the failed Start: %v", left)
	}
}

// TestStartWithoutCRDsStartsNothing: a CRD folder that is missing, or holds no CRD, is
// reported before any process starts.
func TestStartWithoutCRDsStartsNothing(t *testing.T) {
	empty := t.TempDir()
	writeFile(t, filepath.Join(empty, "kustomization.yaml"), "resources: []\n")
	for _, crdDir := range []string{filepath.Join(t.TempDir(), "missing"), empty} {
		dir := filepath.Join(t.TempDir(), "control-plane")
		_, err := Start(t.Context(), Options{EtcdPath: "etcd", APIServerPath: "kube-apiserver", Dir: dir, CRDDirs: []string{crdDir}})
		if err == nil {
			t.Errorf("Start with CRDs from %s succeeded", crdDir)
		}
		if _, statErr := os.Stat(dir); !os.IsNotExist(statErr) {
			t.Errorf("Start with CRDs from %s created %s (%v)", crdDir, dir, err)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func managedBy(crd *apiextensionsv1.CustomResourceDefinition) []string {
	var managers []string
	for _, m := range crd.ManagedFields {
		managers = append(managers, m.Manager)
	}
	return managers
}

// children returns the command lines of this test process's running children, from /proc.
func children(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The command name is in parentheses and may hold spaces: fields follow the last ')'.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) || fields[0] == "Z" {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return out
}

func hasCommand(cmdlines []string, name string) bool {
	for _, c := range cmdlines {
		if filepath.Base(strings.Fields(c)[0]) == name {
			return true
		}
	}
	return false
}
