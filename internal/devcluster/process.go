package devcluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is etcd or kube-apiserver, running with its output in a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	// exited is closed once the process has exited and waitErr is set.
	exited  chan struct{}
	waitErr error
}

// startProcess starts path with args, its output written to logPath, in a process group
// of its own (a terminal's Ctrl-C reaches only its parent, which stops it in order) and,
// on Linux, killed by the kernel should its parent die without stopping it.
func startProcess(name, path string, args []string, logPath string) (*process, error) {
	logFile, err := os.Create(logPath) //nolint:gosec // the log file the caller chose
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own copy
	// Not CommandContext: stop ends the process, with SIGTERM first.
	cmd := exec.Command(path, args...) //nolint:gosec,noctx // the control plane binary the caller chose
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// waitReady calls ready every 100 ms until it reports true, and fails when the process
// exits first or timeout passes, with the end of the process's log.
func (p *process) waitReady(ctx context.Context, timeout time.Duration, ready func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("%s not ready after %s", p.name, timeout))
	defer cancel()
	ctx, cancelOnExit := context.WithCancelCause(ctx)
	defer cancelOnExit(nil)
	go func() {
		select {
		case <-p.exited:
			cancelOnExit(fmt.Errorf("%s exited: %w", p.name, p.waitErr))
		case <-ctx.Done():
		}
	}()
	if err := pollUntil(ctx, ready); err != nil {
		return fmt.Errorf("%w\n%s", err, p.logTail())
	}
	return nil
}

// exitedOnPortInUse says whether the process has exited because an address it was told to
// listen on was taken since its port was chosen.
func (p *process) exitedOnPortInUse() bool {
	select {
	case <-p.exited:
	default:
		return false
	}
	data, err := os.ReadFile(p.logPath)
	return err == nil && bytes.Contains(data, []byte("address already in use"))
}

// logTail returns the last lines of the process's log, to explain a failure.
func (p *process) logTail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return fmt.Sprintf("last lines of %s:\n%s", p.logPath, strings.Join(lines, "\n"))
}

// stop asks the process to stop with SIGTERM and kills it (and anything in its process
// group) should it still run after timeout.
func (p *process) stop(timeout time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(timeout):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
	return fmt.Errorf("%s did not stop within %s of SIGTERM and was killed", p.name, timeout)
}

// freePorts returns n distinct ports free on 127.0.0.1 when it looked. Another process may
// take one before the control plane listens on it: Start then tries again.
func freePorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() { // held until all are chosen, so that they differ
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
