//go:build !linux

package testenv

import "syscall"

// processGroupDyingWithParent puts a child in its own process group.
func processGroupDyingWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
