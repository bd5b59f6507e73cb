package testenv

import "syscall"

// processGroupDyingWithParent puts a child in its own process group, killed with the
// test process even when that one dies without cleaning up.
func processGroupDyingWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
