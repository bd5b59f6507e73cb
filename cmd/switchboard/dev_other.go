//go:build !linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// childProcAttr puts a child of dev in a process group of its own, so that dev can stop
// it and whatever it started.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// guardedControlPlane returns the binaries in assets as they are: only Linux can have the
// kernel kill them when dev dies.
func guardedControlPlane(_, assets string) (etcd, apiServer string, err error) {
	return filepath.Join(assets, "etcd"), filepath.Join(assets, "kube-apiserver"), nil
}

// runDevChild exists on Linux only.
func runDevChild([]string) int {
	fmt.Fprintln(os.Stderr, "switchboard dev-child: Linux only")
	return 2
}
