//go:build !linux

package controllers

import "syscall"

// localProcAttr starts a bridge in a process group of its own, so that stop() reaches the
// servers the bridge started too. Only Linux can tie a bridge's life to the manager's.
func localProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
