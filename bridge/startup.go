package bridge

import (
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"time"
)

// CommandError means the MCP server command cannot run: it is not found, it cannot be
// started, or its first process exited on its own within Options.StartupWindow. Its
// message names the command's executable and what went wrong, never the command's
// arguments, which may carry what should not be logged.
type CommandError struct {
	// Command is the command's executable, Options.Command[0].
	Command string
	// Err is what went wrong.
	Err error
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("mcp server command %q: %v", e.Command, e.Err)
}

func (e *CommandError) Unwrap() error { return e.Err }

// lookPath finds the command's executable, or says in a CommandError why it is not there.
func lookPath(command string) error {
	if _, err := exec.LookPath(command); err != nil {
		var execErr *exec.Error
		if errors.As(err, &execErr) {
			err = execErr.Err // its message names the command again
		}
		return &CommandError{Command: command, Err: err}
	}
	return nil
}

// startupWatch watches the first server process a bridge starts, whatever starts it (a
// warm spare, a session, the shared process, the sessionless front), for
// Options.StartupWindow: a process that cannot be started, or that exits on its own
// before the window ends, is a command that fails at once (a missing module, a bad
// flag, a missing library), and Serve then stops the bridge with a CommandError.
type startupWatch struct {
	command string
	window  time.Duration

	once sync.Once
	// failed receives at most one *CommandError.
	failed chan error
	// done is closed once the verdict is in: the first process outlived the window, or
	// failed.
	done chan struct{}
}

// newStartupWatch returns a watch for command's first process, or nil when window is
// zero: nothing is watched then.
func newStartupWatch(command string, window time.Duration) *startupWatch {
	if window <= 0 {
		return nil
	}
	return &startupWatch{command: command, window: window, failed: make(chan error, 1), done: make(chan struct{})}
}

// observe is told of every attempt to start a process, with the process or why it could
// not be started; only the first attempt counts. Call it once the process's stderr is
// being logged, so that what it wrote before it exited is logged before the verdict.
func (w *startupWatch) observe(proc *process, err error) {
	if w == nil {
		return
	}
	w.once.Do(func() {
		if err != nil {
			w.fail(err)
			return
		}
		go w.watch(proc)
	})
}

// watch waits for the window to end or the process to exit, whichever comes first.
func (w *startupWatch) watch(proc *process) {
	timer := time.NewTimer(w.window - time.Since(proc.started))
	defer timer.Stop()
	select {
	case <-timer.C:
		close(w.done)
		return
	case <-proc.exited:
	}
	if !proc.exitedOnItsOwn() {
		close(w.done) // the bridge stopped it: its session ended
		return
	}
	// What it wrote to stderr on its way out goes to the log before the verdict.
	select {
	case <-proc.stderrDone:
	case <-time.After(outputDrain):
	}
	w.fail(fmt.Errorf("exited %s after it started: %w", time.Since(proc.started).Round(time.Millisecond), proc.exitError()))
}

func (w *startupWatch) fail(err error) {
	w.failed <- &CommandError{Command: w.command, Err: err}
	close(w.done)
}

// failures returns the channel the verdict arrives on; nil, which never delivers, when
// nothing is watched.
func (w *startupWatch) failures() <-chan error {
	if w == nil {
		return nil
	}
	return w.failed
}
