//go:build unix && !linux

package devcluster

import "syscall"

// procAttr puts a control plane process in a process group of its own. Only Linux can
// have the kernel kill it should the process that started it die without stopping it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
