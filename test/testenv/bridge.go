package testenv

import (
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// StartBridgeBinary runs the switchboard binary's bridge, as a stdio server's pod does,
// on a free loopback port with the given bridge flags in front of command (run with env;
// nil means this process's environment), and returns its MCP endpoint URL once it
// answers. It is killed when the test ends. Benchmarks use it to measure the binary
// that ships, in a process of its own, as the peers they compare against run.
func StartBridgeBinary(t testing.TB, flags, command, env []string) string {
	t.Helper()
	bin := BuildGoBinary(t, "./cmd/switchboard")
	base := "http://127.0.0.1:" + strconv.Itoa(FreePort(t))
	args := append([]string{"bridge", "--listen", base[len("http://"):]}, flags...)
	args = append(append(args, "--"), command...)
	cmd := exec.Command(bin, args...) //nolint:noctx // killed at cleanup
	cmd.Env = env
	p := startProcess(t, "switchboard bridge", cmd)
	// Before startProcess's SIGKILL (cleanups run last first): SIGTERM lets the bridge
	// stop its server processes, which run in process groups of their own.
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
		}
	})
	p.waitForHTTP(t, base+"/healthz")
	return base + "/mcp"
}
