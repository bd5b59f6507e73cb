package controllers_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/controllers"
)

// localParentEnv makes this test binary act as a manager that starts one local bridge
// (the switchboard binary the variable names), prints its status and waits to be killed.
const localParentEnv = "SWITCHBOARD_TEST_LOCAL_PARENT"

// init runs the manager stand-in before TestMain would start a control plane.
func init() {
	if bin := os.Getenv(localParentEnv); bin != "" {
		os.Exit(runLocalParent(bin))
	}
}

func runLocalParent(bin string) int {
	local := &controllers.LocalRuntime{Binary: bin, Logger: logr.Discard()}
	obj := &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orphan"},
		Spec:       mcpv1alpha1.MCPServerSpec{Stdio: &mcpv1alpha1.StdioServerSpec{Command: []string{"sleep", "300"}}},
	}
	status, err := local.Ensure(context.Background(), obj, nil)
	if err != nil || !status.Available {
		fmt.Printf("bridge not ready: %v %s\n", err, status.Message)
		return 1
	}
	fmt.Println(status.Message)
	select {} // until killed
}

// A manager that dies without stopping its local bridges (SIGKILL, a crash) must not
// leave them running beside the next manager's.
func TestLocalBridgeStopsWhenManagerDies(t *testing.T) {
	bin := switchboardBinary(t)
	parent := exec.Command(os.Args[0], "-test.run=^$") //nolint:noctx // killed below
	parent.Env = append(os.Environ(), localParentEnv+"="+bin)
	stdout, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the stand-in manager's output: %v", err)
	}
	m := regexp.MustCompile(`^Local bridge process (\d+) serves`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("the stand-in manager did not start a bridge: %s", line)
	}
	pid, _ := strconv.Atoi(m[1])
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })

	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for running(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("bridge %d still runs 10s after its manager was killed", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// running reports whether pid is a live process (not a zombie awaiting its reaper).
func running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !regexp.MustCompile(`\) Z `).Match(stat)
}
