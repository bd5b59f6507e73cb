package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// termWait is how long a process group has between SIGTERM and SIGKILL.
const termWait = time.Second

// killWait bounds how long the bridge waits for a process after SIGKILL before it gives
// up waiting (the reaper goroutine still reaps it whenever the kernel lets go).
const killWait = 10 * time.Second

// outputDrain bounds how long shutdown waits for stdout and stderr to reach EOF once the
// process group is gone (a process that escaped the group could hold them open).
const outputDrain = time.Second

// process is one MCP server subprocess, leader of its own process group. The bridge keeps
// the parent ends of its three pipes; the child ends are closed once it has started, so
// stdout and stderr reach EOF exactly when every process of the group is gone or has
// closed them.
type process struct {
	pid     int
	started time.Time
	stdin   *os.File // write end of the child's stdin
	stdout  *os.File // read end of the child's stdout
	stderr  *os.File // read end of the child's stderr

	// released is set once the bridge closes the child's stdin, the MCP stdio shutdown
	// signal: an exit after it was asked for, not one of the process's own.
	released atomic.Bool

	exited  chan struct{} // closed once the leader has been reaped
	waitErr error         // the leader's exit, readable once exited is closed
	// onItsOwn says, once exited is closed, that the leader was reaped before the
	// bridge released it.
	onItsOwn bool

	stderrDone chan struct{} // closed once stderr reached EOF (see logStderrTo)
}

// startProcess starts argv in a new process group with its own pipes. Pipes are
// close-on-exec, so no subprocess inherits another session's pipes.
func startProcess(argv, env []string, dir string) (*process, error) {
	// The context is never cancelled: stopping is process.stop's job, which signals the
	// whole group rather than only the leader.
	cmd := exec.CommandContext(context.Background(), argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = dir
	setProcessGroup(cmd)

	var files []*os.File // every pipe end, closed on failure
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	stdinR, stdinW, err := pipe()
	if err != nil {
		return nil, fmt.Errorf("creating stdin pipe: %w", err)
	}
	stdoutR, stdoutW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("creating stdout pipe: %w", err)
	}
	stderrR, stderrW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("creating stderr pipe: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	if err := cmd.Start(); err != nil {
		closeAll()
		return nil, fmt.Errorf("starting mcp server command: %w", err)
	}
	// The child holds its own copies now.
	_ = stdinR.Close()
	_ = stdoutW.Close()
	_ = stderrW.Close()

	p := &process{
		pid:     cmd.Process.Pid,
		started: time.Now(),
		stdin:   stdinW,
		stdout:  stdoutR,
		stderr:  stderrR,
		exited:  make(chan struct{}),

		stderrDone: make(chan struct{}),
	}
	go func() {
		// Always reap the leader, whatever ended it, so that no zombie is left behind.
		p.waitErr = cmd.Wait()
		p.onItsOwn = !p.released.Load()
		// Whatever the leader left running in its group goes with it.
		_ = signalProcessGroup(p.pid, syscall.SIGKILL)
		close(p.exited)
	}()
	return p, nil
}

// connection returns the JSON-RPC connection over the process's stdin and stdout, with
// lines on stdout bounded by maxMessageBytes.
func (p *process) connection(maxMessageBytes int) (mcp.Connection, error) {
	transport := &mcp.IOTransport{
		Reader: io.NopCloser(&lineLimitReader{r: p.stdout, limit: maxMessageBytes}),
		Writer: processStdin{p},
		// lineLimitReader enforces the limit with a clear error; this is a backstop.
		MaxLineLength: 2 * maxMessageBytes,
	}
	return transport.Connect(context.Background())
}

// processStdin is a process's stdin as its connection writes and closes it: closing it
// releases the process (see process.released).
type processStdin struct{ p *process }

func (w processStdin) Write(b []byte) (int, error) { return w.p.stdin.Write(b) }

func (w processStdin) Close() error { return w.p.closeStdin() }

// closeStdin closes the child's stdin, and marks the process released first, so that
// whoever sees it exit knows that the bridge asked it to.
func (p *process) closeStdin() error {
	p.released.Store(true)
	return p.stdin.Close()
}

// exitedOnItsOwn reports whether the leader has been reaped, and was before the bridge
// closed its stdin or signalled it.
func (p *process) exitedOnItsOwn() bool {
	return p.hasExited() && p.onItsOwn
}

// logStderrTo logs what the process writes to stderr to log until EOF, then closes
// stderrDone. Call it once, right after the start: a process whose stderr nobody reads
// blocks once the pipe is full.
func (p *process) logStderrTo(log logr.Logger) {
	go func() {
		defer close(p.stderrDone)
		logStderr(log, p.stderr)
	}()
}

// hasExited reports whether the leader has been reaped.
func (p *process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// exitError describes how the leader ended; call it only once exited is closed.
func (p *process) exitError() error {
	if p.waitErr == nil {
		return errors.New("exit status 0")
	}
	return p.waitErr
}

// stop asks the process to exit the way the MCP stdio transport specifies: it closes its
// stdin, gives it grace to exit, then sends SIGTERM to the whole process group and, if the
// leader is still there termWait later, SIGKILL. It returns once the leader has been
// reaped, or killWait after SIGKILL at most.
func (p *process) stop(grace time.Duration) error {
	_ = p.closeStdin()
	if p.waitExit(grace) {
		return nil
	}
	if err := signalProcessGroup(p.pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("terminating process group %d: %w", p.pid, err)
	}
	if p.waitExit(termWait) {
		return nil
	}
	if err := signalProcessGroup(p.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing process group %d: %w", p.pid, err)
	}
	if p.waitExit(killWait) {
		return nil
	}
	return fmt.Errorf("process %d did not exit %s after SIGKILL", p.pid, killWait)
}

// shutdown stops the process (see stop), waits until its stdout and stderr are drained
// (at most outputDrain: a process that escaped the group could hold them open) and closes
// them. It returns how the process ended, for the log.
func (p *process) shutdown(grace time.Duration) (exit string, err error) {
	err = p.stop(grace)
	select {
	case <-p.stderrDone:
	case <-time.After(outputDrain):
	}
	p.closeOutputs()
	<-p.stderrDone
	if !p.hasExited() {
		return "still running", err
	}
	return p.exitError().Error(), err
}

// waitExit waits up to d for the leader to be reaped and reports whether it was.
func (p *process) waitExit(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.exited:
		return true
	case <-timer.C:
		return false
	}
}

// closeOutputs closes the bridge's read ends of stdout and stderr, which unblocks any
// reader still waiting on them.
func (p *process) closeOutputs() {
	_ = p.stdout.Close()
	_ = p.stderr.Close()
}
