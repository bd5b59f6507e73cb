package devcluster

import "syscall"

// procAttr puts a control plane process in a process group of its own and has the kernel
// kill it should the process that started it die without stopping it. (The kernel sends
// the signal when the thread that started it ends: Go ends a thread only when a goroutine
// locked to it exits, which this package never does.)
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
