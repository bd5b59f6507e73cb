//go:build unix

package bridge

import (
	"errors"
	"os/exec"
	"syscall"
)

// setProcessGroup makes the command the leader of a new process group, so that the whole
// tree it starts can be signalled at once.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalProcessGroup sends sig to every process in the group led by pid. A group that no
// longer exists is not an error.
func signalProcessGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
