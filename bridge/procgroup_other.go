//go:build !unix

package bridge

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// setProcessGroup does nothing where process groups do not exist.
func setProcessGroup(*exec.Cmd) {}

// signalProcessGroup kills the process itself where process groups and signals do not
// exist; SIGTERM is ignored.
func signalProcessGroup(pid int, sig syscall.Signal) error {
	if sig != syscall.SIGKILL {
		return nil
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}
