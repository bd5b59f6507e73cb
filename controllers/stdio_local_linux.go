package controllers

import "syscall"

// localProcAttr starts a bridge in a process group of its own, so that stop() reaches the
// servers the bridge started too, and has the kernel send it SIGTERM when the manager
// dies without stopping it (SIGKILL, a crash): the bridge then winds its servers down
// instead of lingering beside the next manager's bridges.
func localProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
