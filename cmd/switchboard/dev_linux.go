package main

import "syscall"

// childProcAttr puts a child of dev in a process group of its own, so that dev can stop
// it and whatever it started, and has the kernel kill it should dev die without doing so.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
