package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/controllers"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// switchboardBinary builds cmd/switchboard once per test run.
func switchboardBinary(t testing.TB) string {
	t.Helper()
	return testenv.BuildGoBinary(t, "./cmd/switchboard")
}

// withLocalRuntime runs stdio servers as local bridge processes.
func withLocalRuntime(t testing.TB) operatorOption {
	bin := switchboardBinary(t)
	return func(r *controllers.MCPServerReconciler, mgr ctrl.Manager) {
		local := &controllers.LocalRuntime{Binary: bin, Reader: mgr.GetAPIReader(), Logger: mgr.GetLogger().WithName("stdio-local")}
		if err := mgr.Add(local); err != nil {
			t.Fatal(err)
		}
		r.Stdio = local
		local.PollInterval = probeInterval
	}
}

// bridgePIDs returns the pids of running bridge processes started from bin.
func bridgePIDs(t testing.TB, bin string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 1 && args[0] == bin && args[1] == "bridge" {
			stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if !strings.Contains(string(stat), ") Z ") { // zombies are not running
				pids = append(pids, e.Name())
			}
		}
	}
	return pids
}

// TestStdioServerThroughLocalBridge runs the real npm reference server in stdio mode
// behind the bridge, started with exactly the command line the pod runtime puts in the
// Deployment.
func TestStdioServerThroughLocalBridge(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	everything, err := testenv.ServerEverything()
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	startOperator(t, ns, withLocalRuntime(t))
	bin := switchboardBinary(t)

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "server-env"},
		Data:       map[string][]byte{"mode": []byte("stdio")},
	}
	g.Expect(k8sClient.Create(ctx, secret)).To(Succeed())
	obj := &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "everything"},
		Spec: mcpv1alpha1.MCPServerSpec{Stdio: &mcpv1alpha1.StdioServerSpec{
			Image:   "node:22",
			Command: []string{"node", everything},
			Args:    []string{"stdio"},
			Env: []corev1.EnvVar{{Name: "SERVER_MODE", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "server-env"}, Key: "mode"},
			}}},
			MaxSessions: 2,
			// Not something the local runtime can apply: it says so instead.
			SecurityContext: &mcpv1alpha1.StdioSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](10001)},
		}},
	}
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	testutil.Eventually(t, eventually, "Ready through the local bridge, saying the securityContext is not applied", func() error {
		got, err := readyIs(obj, metav1.ConditionTrue, "")
		if err != nil {
			return err
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionWorkloadAvailable, metav1.ConditionTrue, "",
			"runs the server as the manager's own user: spec.stdio.securityContext is not applied"); err != nil {
			return err
		}
		if st := got.Status; st.Transport != mcpv1alpha1.TransportStdio || !strings.HasPrefix(st.Endpoint, "http://127.0.0.1:") ||
			!slices.Contains(toolNames(got), "echo") || st.ServerInfo == nil || st.ServerInfo.Name == "" {
			return fmt.Errorf("transport %s, endpoint %s, tools %q, serverInfo %+v", st.Transport, st.Endpoint, toolNames(got), st.ServerInfo)
		}
		return nil
	})
	g.Expect(bridgePIDs(t, bin)).To(HaveLen(1))
	// Waiting for the bridge is not an outage: the first connect is "Connected".
	awaitEvent(t, ns, "everything", "Connected")
	g.Expect(eventReasons(t, ns, "everything")).NotTo(ContainElement("Recovered"))

	// Shared mode: a new bridge, serving the operator's session from its one process.
	before := bridgePIDs(t, bin)
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Stdio.SessionMode = mcpv1alpha1.StdioSessionModeShared })
	testutil.Eventually(t, eventually, "a new bridge in Shared mode, Ready with its tools", func() error {
		pids := bridgePIDs(t, bin)
		if len(pids) != 1 || slices.Equal(pids, before) {
			return fmt.Errorf("bridge processes %q, before %q", pids, before)
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", pids[0], "cmdline"))
		if err != nil {
			return err
		}
		if argv := strings.Split(string(cmdline), "\x00"); !slices.Contains(argv, "--session-mode") || !slices.Contains(argv, "Shared") {
			return fmt.Errorf("the bridge runs as %q", argv)
		}
		got, err := readyIs(obj, metav1.ConditionTrue, "")
		if err != nil {
			return err
		}
		if !slices.Contains(toolNames(got), "echo") {
			return fmt.Errorf("tools %q", toolNames(got))
		}
		return nil
	})

	// Suspending stops the process; resuming starts a fresh one.
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Suspend = true })
	testutil.Eventually(t, eventually, "the suspended server's bridge to stop", func() error { return noBridge(t, bin) })
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Suspend = false })
	awaitReady(t, obj, metav1.ConditionTrue, "")

	// Deleting the server leaves no process behind.
	g.Expect(k8sClient.Delete(ctx, obj)).To(Succeed())
	testutil.Eventually(t, eventually, "the deleted server's bridge to stop", func() error { return noBridge(t, bin) })
}

// noBridge says which bridge processes of bin still run.
func noBridge(t testing.TB, bin string) error {
	if pids := bridgePIDs(t, bin); len(pids) != 0 {
		return fmt.Errorf("bridge processes %q", pids)
	}
	return nil
}

// TestLocalBridgeCommandFollowsSessionMode runs the local runtime with a stand-in for the
// switchboard binary that records its arguments: the bridge gets --session-mode Shared
// only in Shared mode, and changing the mode restarts the process.
func TestLocalBridgeCommandFollowsSessionMode(t *testing.T) {
	dir := t.TempDir()
	argvFile := filepath.Join(dir, "argv")
	fake := filepath.Join(dir, "switchboard")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$ARGV_FILE.tmp\" && mv \"$ARGV_FILE.tmp\" \"$ARGV_FILE\"\nexec sleep 60\n"
	if err := os.WriteFile(fake, []byte(script), 0o700); err != nil { //nolint:gosec // the test's own stand-in executable
		t.Fatal(err)
	}
	local := &controllers.LocalRuntime{Binary: fake, Logger: logr.Discard(), PollInterval: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- local.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Error(err)
		}
	})

	obj := &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "files"},
		Spec: mcpv1alpha1.MCPServerSpec{Stdio: &mcpv1alpha1.StdioServerSpec{
			Image: "ghcr.io/acme/files:1", Command: []string{"files-server"}, Args: []string{"/data"},
			Env: []corev1.EnvVar{{Name: "ARGV_FILE", Value: argvFile}}, MaxSessions: 4,
		}},
	}
	argv := func(mode mcpv1alpha1.StdioSessionMode) []string {
		t.Helper()
		_ = os.Remove(argvFile)
		obj.Spec.Stdio.SessionMode = mode
		st, err := local.Ensure(context.Background(), obj, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Available {
			t.Fatal("the stand-in serves no /readyz, yet the bridge is reported available")
		}
		var data []byte
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if data, err = os.ReadFile(argvFile); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("sessionMode %q: the bridge was not (re)started: %v", mode, err)
		}
		return strings.Fields(string(data))
	}

	perSession := []string{"bridge", "--listen", "LISTEN", "--max-sessions", "4", "--", "files-server", "/data"}
	shared := []string{"bridge", "--listen", "LISTEN", "--max-sessions", "4", "--session-mode", "Shared", "--", "files-server", "/data"}
	for _, step := range []struct {
		mode mcpv1alpha1.StdioSessionMode
		want []string
	}{{"", perSession}, {mcpv1alpha1.StdioSessionModeShared, shared}, {mcpv1alpha1.StdioSessionModePerSession, perSession}} {
		got := argv(step.mode)
		if len(got) > 2 && got[1] == "--listen" {
			got[2] = "LISTEN" // a free loopback port, different each start
		}
		if strings.Join(got, " ") != strings.Join(step.want, " ") {
			t.Errorf("sessionMode %q: bridge started with\n  %q\nwant\n  %q", step.mode, got, step.want)
		}
	}
}
